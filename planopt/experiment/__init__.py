"""Experiments on your own profiles: cached parallel sweeps, tables, figures, robustness.

    from planopt.experiment import make_jobs, run_sweep, write_outputs
    jobs = make_jobs([my_profile], fractions=(0.7, 0.5, 0.3))
    results = run_sweep(jobs)              # 2 processes; or executor=any Executor,
                                           # or a dask.distributed Client (planopt[dask])
    write_outputs(results, {my_profile.name: my_profile}, "out/tables", "out/figures")

Which methods run, and which part each plays in the tables (optimum,
restricted optimum, bound, the greedy), come from the registry's roles and
spaces (`planopt.experiment.roles`). Figures need matplotlib (the `plots`
extra), imported only when one is drawn. On the command line:
`planopt experiment sweep ...` and `planopt experiment suite`.
"""

from planopt.experiment.cache import DEFAULT_CACHE_DIR, Cache, code_version
from planopt.experiment.jobs import default_methods, make_jobs, parse_random, random_profiles
from planopt.experiment.outputs import write_outputs
from planopt.experiment.robustness import Noise, perturb, robustness_rows
from planopt.experiment.sweep import Job, Result, SerialExecutor, execute, run_sweep

__all__ = [
    "DEFAULT_CACHE_DIR",
    "Cache",
    "Job",
    "Noise",
    "Result",
    "SerialExecutor",
    "code_version",
    "default_methods",
    "execute",
    "make_jobs",
    "parse_random",
    "perturb",
    "random_profiles",
    "robustness_rows",
    "run_sweep",
    "write_outputs",
]
