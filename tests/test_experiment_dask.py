"""A sweep sent to a dask.distributed cluster gives the serial run's outcomes.

The jobs are bounded by work units (no time limit), so their outcomes do
not depend on which worker runs them or how loaded it is: the cluster's
plans and figures must equal the in-process run's exactly.
"""

from __future__ import annotations

import pytest

import planopt
from planopt.experiment import SerialExecutor, make_jobs, run_sweep

distributed = pytest.importorskip("distributed")


def outcome(results):
    """Everything a job decides: status, figures, bound, plan and the work it took."""
    return [
        (r.key, r.status, r.makespan, r.peak_bytes, r.lower_bound, r.plan, r.work_used)
        for r in results
    ]


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


def work_limited_jobs():
    profiles = [planopt.random_chain(10, seed=s, family="mixed") for s in range(2)]
    return make_jobs(
        profiles,
        (0.8, 0.5),
        ["greedy", "sqrt-n", "lns"],
        time_limit=None,
        work_limit=0.05,
        bound_time_limit=None,
    )


def test_a_client_runs_a_work_limited_sweep_with_the_serial_outcomes(client):
    jobs = work_limited_jobs()
    assert all(job.work_limit == 0.05 and job.time_limit is None for job in jobs)
    serial = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    on_cluster = run_sweep(jobs, executor=client, cache=None, progress=False)
    assert outcome(on_cluster) == outcome(serial)
    assert on_cluster == serial
    assert any(r.method == "lns" and r.fits for r in serial)  # a search really ran
    assert any(r.method == "lower-bound" and r.status == "bound" for r in serial)


def test_the_clients_executor_gives_the_same_outcomes(client, tmp_path):
    jobs = work_limited_jobs()[:6]
    serial = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    pooled = run_sweep(jobs, executor=client.get_executor(), cache=tmp_path, progress=False)
    assert outcome(pooled) == outcome(serial)
    again = run_sweep(jobs, executor=client, cache=tmp_path, progress=False)
    assert all(r.cached for r in again) and outcome(again) == outcome(serial)
