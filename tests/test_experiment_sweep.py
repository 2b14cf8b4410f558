"""The sweep machinery on tiny sweeps: cache keys, hits and misses, resuming after an
interruption, and parallel runs giving the serial results.

Figures are checked against the simulator (`planopt.simulate` on the returned
plan) and against the brute-force oracle, not against the sweep's own code.
"""

from __future__ import annotations

import json
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

import pytest

import planopt
from planopt.experiment import (
    Cache,
    Job,
    SerialExecutor,
    code_version,
    make_jobs,
    run_sweep,
)
from planopt.experiment.cache import make_key, profile_digest
from planopt.experiment.jobs import parse_random
from planopt.experiment.sweep import ERROR
from planopt.profile import Layer

METHODS = ("keep-all", "all-swap", "sqrt-n", "greedy")
LOWER_BOUND = "lower-bound"  # the registered bound method


def tiny_jobs() -> list[Job]:
    profiles = [planopt.random_chain(6, seed=s, family="uniform") for s in range(2)]
    return make_jobs(profiles, (1.0, 0.8, 0.6), METHODS, time_limit=10, bound_time_limit=5)


def outcome(results):
    """What must agree between runs: everything but timing and cache flags."""
    return [(r.key, r.status, r.makespan, r.peak_bytes, r.lower_bound, r.plan) for r in results]


# -- keys ---------------------------------------------------------------------------------


def test_key_changes_with_everything_that_changes_the_outcome():
    profile = planopt.random_chain(5, seed=3, family="uniform")
    base = Job.make(profile, 0.5, "pooch", time_limit=10)
    slower = profile.layers[0]
    changed_profile = profile.replace_layers(
        [
            Layer.v1(slower.name, slower.fwd * 2, slower.bwd, slower.product_bytes),
            *profile.layers[1:],
        ]
    )
    variants = [
        Job.make(changed_profile, 0.5, "pooch", time_limit=10),
        Job.make(profile, 0.6, "pooch", time_limit=10),
        Job.make(profile, 0.5, "sqrt-n", time_limit=10),
        Job.make(profile, 0.5, "pooch", {"retry_over_budget": True}, time_limit=10),
        Job.make(profile, 0.5, "pooch", time_limit=20),
        Job.make(profile, 0.5, "pooch", time_limit=10, seed=1),
        Job.make(profile, 0.5, LOWER_BOUND, time_limit=10),
    ]
    keys = {base.key(), *(v.key() for v in variants)}
    assert len(keys) == 1 + len(variants)


def test_key_ignores_labels_and_resolves_aliases():
    profile = planopt.random_chain(5, seed=3, family="uniform")
    base = Job.make(profile, 0.5, "pooch", time_limit=10)
    renamed = profile.replace_layers(profile.layers, name="other", source="elsewhere")
    assert Job.make(profile, 0.5, "greedy", time_limit=10).key() == base.key()
    assert Job.make(profile, 0.5, "pooch", time_limit=10, group="g").key() == base.key()
    assert Job.make(renamed, 0.5, "pooch", time_limit=10).key() == base.key()


def test_key_includes_the_code_version(monkeypatch):
    profile = planopt.random_chain(5, seed=3, family="uniform")
    job = Job.make(profile, 0.5, "pooch")
    before = job.key()
    assert code_version().startswith(planopt.__version__ + "+")
    monkeypatch.setattr("planopt.experiment.cache.code_version", lambda: "0.0.0+other")
    assert job.key() != before


def test_work_limit_is_part_of_the_key_only_when_set():
    """Keys of jobs without a work limit keep the recipe they had before work limits,
    so every outcome cached then is still found."""
    profile = planopt.random_chain(6, seed=1, family="uniform")
    [plain] = make_jobs([profile], (0.8,), ["greedy"], bound=False, time_limit=10)
    [limited] = make_jobs([profile], (0.8,), ["greedy"], bound=False, work_limit=0.5)
    [other] = make_jobs([profile], (0.8,), ["greedy"], bound=False, work_limit=0.25)
    assert len({plain.key(), limited.key(), other.key()}) == 3
    before = make_key(
        {
            "profile": profile_digest(profile),
            "budget": planopt.budget_from_fraction(profile, 0.8),
            "method": "pooch",
            "options": {},
            "time_limit": 10,
            "seed": 0,
        }
    )
    assert plain.key() == before
    with pytest.raises(planopt.PlanoptError, match="work_limit"):
        make_jobs([profile], (0.8,), ["greedy"], work_limit=-1.0)


def test_bound_jobs_run_the_registered_bound_method():
    profile = planopt.random_chain(6, seed=1, family="uniform")
    jobs = make_jobs([profile], (0.8,), ["greedy"], time_limit=10, bound_time_limit=5)
    [bound] = [j for j in jobs if j.method == LOWER_BOUND]
    assert planopt.registry.get(bound.method).role == "bound"
    [result] = run_sweep([bound], executor=SerialExecutor(), cache=None, progress=False)
    direct = planopt.solve(profile, bound.budget, "lower-bound", time_limit=5)
    assert result.status == direct.status.value == "bound"
    assert result.lower_bound == direct.lower_bound and result.plan is None


def test_unknown_method_is_refused_when_the_job_is_made():
    with pytest.raises(planopt.UnknownMethodError, match="no-such"):
        Job.make(planopt.random_chain(3), 0.5, "no-such")


# -- outcomes against independent truth ---------------------------------------------------


def test_results_are_the_simulators_figures(tmp_path):
    jobs = tiny_jobs()
    results = run_sweep(jobs, executor=SerialExecutor(), cache=tmp_path, progress=False)
    assert [r.key for r in results] == [j.key() for j in jobs]
    for job, r in zip(jobs, results, strict=True):
        assert r.method == job.method and r.budget == job.budget
        if r.plan is None:
            continue
        schedule = planopt.simulate(job.profile, r.plan_object(), job.budget)
        assert r.makespan == schedule.makespan
        assert r.peak_bytes == schedule.peak_bytes
        assert r.fits == schedule.feasible
        assert r.overhead == pytest.approx(schedule.overhead)
    # keep-all fits only at 100%; the bound jobs carry a bound and no plan
    keep = {r.budget_fraction: r.fits for r in results if r.method == "keep-all"}
    assert keep[1.0] and not keep[0.6]
    bounds = [r for r in results if r.method == LOWER_BOUND]
    assert bounds and all(r.plan is None and r.lower_bound is not None for r in bounds)


def test_lower_bound_never_exceeds_the_brute_force_optimum(tmp_path):
    profile = planopt.random_chain(4, seed=1, family="uniform")
    jobs = make_jobs([profile], (0.9, 0.7), ["brute-force"], time_limit=30)
    results = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    by_budget: dict[float, dict[str, float]] = {}
    for r in results:
        value = r.lower_bound if r.method == LOWER_BOUND else r.makespan
        by_budget.setdefault(r.budget_fraction, {})[r.method] = value
    assert by_budget
    for values in by_budget.values():
        assert values[LOWER_BOUND] <= values["brute-force"] * (1 + 1e-9)


def test_a_refused_job_is_an_error_result_and_is_not_cached(tmp_path):
    profile = planopt.random_chain(5, seed=0, family="uniform")
    job = Job.make(profile, 0.9, "sqrt-n", {"segments": -3})
    cache = Cache(tmp_path)
    [result] = run_sweep([job], executor=SerialExecutor(), cache=cache, progress=False)
    assert result.status == ERROR and result.message
    assert len(cache) == 0


# -- the cache ----------------------------------------------------------------------------


def test_second_run_is_all_cache_hits_with_equal_results(tmp_path):
    jobs = tiny_jobs()
    cache = Cache(tmp_path / "cache")
    first = run_sweep(jobs, executor=SerialExecutor(), cache=cache, progress=False)
    assert not any(r.cached for r in first)
    assert len(cache) == len({j.key() for j in jobs})
    calls = []

    class Counting(SerialExecutor):
        def submit(self, fn, /, *args, **kwargs):
            calls.append(args)
            return super().submit(fn, *args, **kwargs)

    second = run_sweep(jobs, executor=Counting(), cache=cache, progress=False)
    assert calls == []
    assert all(r.cached for r in second)
    assert second == first
    assert outcome(second) == outcome(first)


def test_a_corrupt_cache_entry_is_recomputed(tmp_path):
    jobs = tiny_jobs()[:3]
    cache = Cache(tmp_path)
    first = run_sweep(jobs, executor=SerialExecutor(), cache=cache, progress=False)
    cache.path(jobs[0].key()).write_text("{not json")
    again = run_sweep(jobs, executor=SerialExecutor(), cache=cache, progress=False)
    assert [r.cached for r in again] == [False, True, True]
    assert again == first
    assert json.loads(cache.path(jobs[0].key()).read_text())["status"] == first[0].status


def test_duplicate_jobs_run_once(tmp_path):
    job = tiny_jobs()[0]
    calls = []

    class Counting(SerialExecutor):
        def submit(self, fn, /, *args, **kwargs):
            calls.append(args)
            return super().submit(fn, *args, **kwargs)

    results = run_sweep([job, job, job], executor=Counting(), cache=None, progress=False)
    assert len(calls) == 1
    assert results[0] == results[1] == results[2]


# -- interruption and resume ----------------------------------------------------------------


class Interrupt(Exception):
    pass


def test_resume_after_interruption_computes_only_the_rest(tmp_path):
    jobs = tiny_jobs()
    unique = len({j.key() for j in jobs})
    stop_after = 5
    seen = []

    def stop(result):
        seen.append(result)
        if len(seen) == stop_after:
            raise KeyboardInterrupt

    cache = Cache(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(jobs, executor=SerialExecutor(), cache=cache, progress=False, on_result=stop)
    assert len(cache) == stop_after

    fresh = []
    resumed = run_sweep(
        jobs, executor=SerialExecutor(), cache=cache, progress=False, on_result=fresh.append
    )
    assert len(fresh) == unique - stop_after
    assert sum(r.cached for r in resumed) == len(jobs) - len(fresh)
    uninterrupted = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    assert outcome(resumed) == outcome(uninterrupted)


def test_interrupting_a_process_pool_sweep_keeps_what_finished(tmp_path):
    jobs = tiny_jobs()
    cache = Cache(tmp_path)
    count = []

    def stop(result):
        count.append(result)
        if len(count) == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        run_sweep(jobs, cache=cache, max_workers=2, progress=False, on_result=stop)
    assert len(cache) >= 3
    resumed = run_sweep(jobs, executor=SerialExecutor(), cache=cache, progress=False)
    assert sum(r.cached for r in resumed) >= 3


# -- parallel equals serial --------------------------------------------------------------------


def test_process_pool_gives_the_serial_results():
    jobs = tiny_jobs()
    serial = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    with ProcessPoolExecutor(max_workers=2) as pool:
        parallel = run_sweep(jobs, executor=pool, cache=None, progress=False, max_pending=3)
    assert parallel == serial
    assert outcome(parallel) == outcome(serial)


def test_default_executor_and_a_thread_pool_give_the_serial_results(tmp_path):
    jobs = tiny_jobs()[:8]
    serial = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    default = run_sweep(jobs, cache=tmp_path, progress=False)  # a 2-process pool
    with ThreadPoolExecutor(max_workers=2) as pool:
        threaded = run_sweep(jobs, executor=pool, cache=None, progress=False)
    assert outcome(default) == outcome(serial) == outcome(threaded)


# -- building jobs -----------------------------------------------------------------------------


def test_make_jobs_skips_budgets_below_the_minimum_and_big_nets_for_exact():
    small = planopt.random_chain(4, seed=0, family="uniform")
    big = planopt.random_chain(40, seed=0, family="uniform")
    fractions = (0.9, 0.0)  # 0% is below every net's minimum budget
    jobs = make_jobs([small, big], fractions, ["exact", "sqrt-n"], exact_max_layers=10)
    seen = {(j.profile.name, j.budget_fraction, j.method) for j in jobs}
    assert seen == {
        (small.name, 0.9, "exact"),
        (small.name, 0.9, "sqrt-n"),
        (small.name, 0.9, LOWER_BOUND),
        (big.name, 0.9, "sqrt-n"),
        (big.name, 0.9, LOWER_BOUND),
    }
    exact = next(j for j in jobs if j.method == "exact")
    assert exact.options_dict == {"threads": 1}  # exact declares threads; sqrt-n does not
    assert next(j for j in jobs if j.method == "sqrt-n").options_dict == {}


def test_parse_random():
    profiles = parse_random("cnn:5,7:2")
    assert [(len(p), g) for p, g in profiles] == [(5, "random-cnn")] * 2 + [(7, "random-cnn")] * 2
    for bad in ("cnn:5", "nope:5:1", "cnn:x:1", "cnn:5:0"):
        with pytest.raises(planopt.PlanoptError):
            parse_random(bad)
