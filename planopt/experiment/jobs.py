"""Building sweeps: which profiles, methods and budgets make up the jobs.

Methods are read from the registry at run time (`default_methods`: the
planners, never an oracle; `bound_methods`: role `bound`), so a newly
registered method joins every sweep without a code change here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from planopt import registry
from planopt.budget import budget_from_fraction, min_budget
from planopt.errors import PlanoptError
from planopt.experiment.roles import is_exact
from planopt.experiment.sweep import Job
from planopt.profile import Profile
from planopt.random_chain import FAMILIES, random_chain
from planopt.registry import Role

# Given to every method that declares the option: a sweep already runs one job per
# core, so a method's own threads would only compete with the other workers.
DEFAULT_WORKER_OPTIONS: dict[str, Any] = {"threads": 1}


def default_methods() -> list[str]:
    """Every available planner: baselines, heuristics and exact methods (an oracle is
    exponential, a bound is added per instance by `make_jobs`)."""
    return registry.planners()


def bound_methods() -> list[str]:
    """Every available method of role `bound` (a proven lower bound, no plan)."""
    return registry.by_role(Role.BOUND)


def _accepted(method: str, options: dict[str, Any]) -> dict[str, Any]:
    """The subset of `options` that `method` declares (a default is not an order)."""
    if not options:
        return {}
    allowed = registry.get(method).options()
    return {k: v for k, v in options.items() if k in allowed}


def random_profiles(
    families: Sequence[str],
    lengths: Sequence[int],
    seeds: int | Sequence[int],
    version: int = 1,
) -> list[tuple[Profile, str]]:
    """Seeded random chains with their group label `random-<family>`; `version` is the
    cost model's (`planopt.random_chain`)."""
    seed_list = range(seeds) if isinstance(seeds, int) else seeds
    out = []
    for family in families:
        if family not in FAMILIES:
            raise PlanoptError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
        for n in lengths:
            for seed in seed_list:
                out.append(
                    (random_chain(n, seed=seed, family=family, version=version), f"random-{family}")
                )
    return out


def parse_random(spec: str) -> list[tuple[Profile, str]]:
    """`FAMILY:L1,L2,...:SEEDS` (e.g. `mixed:8,16:3`) as random profiles."""
    parts = spec.split(":")
    if len(parts) != 3:
        raise PlanoptError(
            f"random chains must be given as FAMILY:L1,L2,...:SEEDS (e.g. mixed:8,16:3), "
            f"got {spec!r}"
        )
    family, lengths, seeds = parts
    try:
        ns = [int(n) for n in lengths.split(",") if n]
        count = int(seeds)
    except ValueError:
        raise PlanoptError(
            f"random chains: lengths and seed count must be integers, got {spec!r}"
        ) from None
    if not ns or count < 1 or min(ns) < 1:
        raise PlanoptError(
            f"random chains: need at least one length >= 1 and a seed count >= 1, got {spec!r}"
        )
    return random_profiles([family], ns, count)


def make_jobs(
    profiles: Iterable[Profile | tuple[Profile, str]],
    fractions: Sequence[float],
    methods: Sequence[str] | None = None,
    *,
    time_limit: float | None = 60.0,
    work_limit: float | None = None,
    exact_time_limit: float | None = None,
    exact_max_layers: int = 32,
    worker_options: dict[str, Any] | None = None,
    method_options: dict[str, dict[str, Any]] | None = None,
    bound: bool = True,
    bound_time_limit: float | None = 10.0,
    seed: int = 0,
    skip_below_min: bool = True,
) -> list[Job]:
    """Every (profile, budget fraction, method) job, plus a lower bound per instance.

    With `bound`, every bound method (`bound_methods`) not already among
    `methods` runs on each instance with `bound_time_limit`. Every job gets
    `work_limit` (work units; see `planopt.work`). Exact methods run only on
    nets of at most `exact_max_layers` layers, with
    `exact_time_limit` (default `time_limit`). Every method that declares an
    option in `worker_options` (default `threads=1`: the sweep already runs
    jobs in parallel) gets it.
    `method_options` adds options per method name. Budgets below the
    minimum any plan needs are skipped unless `skip_below_min` is False.
    """
    methods = [registry.get(m).name for m in (default_methods() if methods is None else methods)]
    bounds = [m for m in bound_methods() if m not in methods] if bound else []
    extra = worker_options if worker_options is not None else DEFAULT_WORKER_OPTIONS
    per_method = method_options or {}
    jobs = []
    for item in profiles:
        profile, group = item if isinstance(item, tuple) else (item, "")
        minimum = min_budget(profile)
        for fraction in fractions:
            if skip_below_min and budget_from_fraction(profile, fraction) < minimum:
                continue
            for method in methods:
                exact = is_exact(method)
                if exact and len(profile.layers) > exact_max_layers:
                    continue
                options = {
                    **_accepted(method, extra),
                    **per_method.get(method, {}),
                }
                limit = exact_time_limit if exact and exact_time_limit is not None else time_limit
                jobs.append(
                    Job.make(
                        profile,
                        fraction,
                        method,
                        options,
                        time_limit=limit,
                        seed=seed,
                        group=group,
                        work_limit=work_limit,
                    )
                )
            for method in bounds:
                jobs.append(
                    Job.make(
                        profile,
                        fraction,
                        method,
                        time_limit=bound_time_limit,
                        group=group,
                        work_limit=work_limit,
                    )
                )
    return jobs
