"""Sweeps: run many (profile, budget, method) jobs in parallel, cached by content.

`run_sweep(jobs)` runs every job whose outcome is not in the cache through a
`concurrent.futures.Executor` (a 2-process pool unless you pass one; a
`dask.distributed.Client` spreads the sweep over a cluster unchanged, see
`run_sweep`), stores each outcome as it arrives, and returns one `Result`
per job in job order. Killing a sweep loses only the jobs in flight: the
next run finds the rest in the cache.

A job is executed by `execute(job)` (a plain module-level function, so it
pickles to any worker): `planopt.solve` with the job's method, a bound
method (`lower-bound`, role `bound`) included. Figures in a `Result` are
always the simulator's (as `solve` re-scores every plan). A job with a
`work_limit` and no binding time limit has the same outcome on any worker.

NOTE (size): `Job`, `Result`, `execute` and `run_sweep` are one contract
(what a job is, what it records, how it runs); split, each would import the
others.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from planopt import registry
from planopt.api import check_time_limit, solve
from planopt.budget import budget_from_fraction, min_budget
from planopt.errors import PlanoptError
from planopt.experiment.cache import DEFAULT_CACHE_DIR, Cache, make_key, profile_digest
from planopt.experiment.roles import is_bound
from planopt.io import plan_from_dict, plan_to_dict
from planopt.plan import Plan
from planopt.profile import Profile
from planopt.result import Status
from planopt.work import check_work_limit

DEFAULT_WORKERS = 2
# The status of a `Result` beyond `planopt.Status`: a refused job.
ERROR = "error"


@dataclass(frozen=True)
class Job:
    """One solve (or bound) request of a sweep.

    `budget_fraction` is the spec's budget figure: static bytes plus that
    fraction of keep-all's activation memory. `options` are the method's
    keyword options as sorted `(name, value)` pairs (see `Job.make`).
    `group` is a label for tables (a family of random chains, "bundled"); it
    is not part of the cache key. `work_limit` (work units, see
    `planopt.work`) is `planopt.solve`'s: with it and no binding time
    limit, the job's outcome is the same on any machine.
    """

    profile: Profile
    budget_fraction: float
    method: str
    options: tuple[tuple[str, Any], ...] = ()
    time_limit: float | None = None
    seed: int = 0
    group: str = ""
    work_limit: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.profile, Profile):
            raise TypeError(f"job: profile must be a planopt.Profile, got {self.profile!r}")
        # The rules are planopt's own, checked when the job is made, not on a worker.
        budget_from_fraction(self.profile, self.budget_fraction)
        check_time_limit(self.time_limit)  # validated, not converted: it is in the key
        object.__setattr__(self, "method", registry.get(self.method).name)
        object.__setattr__(self, "work_limit", check_work_limit(self.work_limit))
        object.__setattr__(self, "options", tuple(sorted(dict(self.options).items())))
        if not self.group:
            object.__setattr__(self, "group", self.profile.name)

    @classmethod
    def make(
        cls,
        profile: Profile,
        budget_fraction: float,
        method: str,
        options: dict[str, Any] | None = None,
        *,
        time_limit: float | None = None,
        seed: int = 0,
        group: str = "",
        work_limit: float | None = None,
    ) -> Job:
        return cls(
            profile,
            budget_fraction,
            method,
            tuple((options or {}).items()),
            time_limit,
            seed,
            group,
            work_limit,
        )

    @property
    def options_dict(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def budget(self) -> float:
        """The budget in bytes."""
        return budget_from_fraction(self.profile, self.budget_fraction)

    def key(self) -> str:
        """The cache key: a hash of everything that can change the outcome.

        NOTE: `work_limit` enters the key only when set, so the keys of jobs
        without one (every cached outcome from before work limits) are
        unchanged and their outcomes stay readable.
        """
        payload = {
            "profile": profile_digest(self.profile),
            "budget": self.budget,
            "method": self.method,
            "options": self.options_dict,
            "time_limit": self.time_limit,
            "seed": self.seed,
        }
        if self.work_limit is not None:
            payload["work_limit"] = self.work_limit
        return make_key(payload)


@dataclass(frozen=True)
class Result:
    """A job's outcome with the labels tables need (plain data; CSV via `to_row`).

    `status` is a `planopt.Status` value (`"bound"` for a bound method that
    found one), or `"error"` when the request was refused (the message says
    why). `solve_seconds` and `cached` are left out of equality, so two
    results are equal when their outcomes are; `work_used` (work units; None
    in outcomes cached before work was counted) is part of the outcome.
    """

    key: str
    group: str
    profile: str
    n_layers: int
    t_ideal: float
    budget_fraction: float
    budget: float
    min_budget: int
    method: str
    options: dict[str, Any]
    time_limit: float | None
    seed: int
    status: str
    makespan: float | None
    peak_bytes: int | None
    lower_bound: float | None
    message: str
    plan: dict | None = field(default=None, repr=False)
    solve_seconds: float = field(default=0.0, compare=False)
    cached: bool = field(default=False, compare=False)
    work_limit: float | None = None
    work_used: float | None = None

    @property
    def overhead(self) -> float | None:
        """`T / T_ideal - 1` of the plan, or None without one."""
        if self.makespan is None or self.t_ideal <= 0:
            return None
        return self.makespan / self.t_ideal - 1.0

    @property
    def fits(self) -> bool:
        """A plan that fits the budget was found."""
        return (
            self.status in (Status.OPTIMAL.value, Status.FEASIBLE.value)
            and self.peak_bytes is not None
            and self.peak_bytes <= self.budget
        )

    @property
    def label(self) -> str:
        """The method, with its back-end when one was chosen (`exact[highs]`)."""
        backend = self.options.get("backend")
        return self.method if backend is None else f"{self.method}[{backend}]"

    def plan_object(self) -> Plan | None:
        return None if self.plan is None else plan_from_dict(self.plan)

    def to_row(self) -> dict[str, Any]:
        """One CSV row: every field but the plan, plus the derived figures."""
        return {
            "group": self.group,
            "profile": self.profile,
            "n_layers": self.n_layers,
            "budget_fraction": self.budget_fraction,
            "budget_bytes": self.budget,
            "min_budget_bytes": self.min_budget,
            "method": self.method,
            "label": self.label,
            "options": json.dumps(self.options, sort_keys=True, default=repr),
            "time_limit": self.time_limit,
            "work_limit": self.work_limit,
            "seed": self.seed,
            "status": self.status,
            "t_ideal_s": self.t_ideal,
            "makespan_s": self.makespan,
            "overhead": self.overhead,
            "peak_bytes": self.peak_bytes,
            "fits": self.fits,
            "lower_bound_s": self.lower_bound,
            "solve_seconds": self.solve_seconds,
            "work_used": self.work_used,
            "message": self.message,
            "key": self.key,
        }


def execute(job: Job) -> dict[str, Any]:
    """Run one job; returns the record the cache stores (plain JSON data).

    A `PlanoptError` (a refused option, a net too large for an exact method,
    a missing back-end) becomes an `"error"` record; anything else is a bug
    and propagates.
    """
    started = time.monotonic()
    record: dict[str, Any] = {
        "status": ERROR,
        "makespan": None,
        "peak_bytes": None,
        "lower_bound": None,
        "message": "",
        "plan": None,
        "work_used": None,
    }
    try:
        solution = solve(
            job.profile,
            job.budget,
            job.method,
            time_limit=job.time_limit,
            work_limit=job.work_limit,
            seed=job.seed,
            **job.options_dict,
        )
        record["status"] = solution.status.value
        record["lower_bound"] = solution.lower_bound
        record["message"] = solution.message
        record["work_used"] = solution.work_used
        if solution.schedule is not None and solution.plan is not None:
            record["makespan"] = solution.schedule.makespan
            record["peak_bytes"] = solution.schedule.peak_bytes
            record["plan"] = plan_to_dict(solution.plan)
    except PlanoptError as exc:
        record["status"] = ERROR
        record["message"] = str(exc)
    record["solve_seconds"] = time.monotonic() - started
    return record


def make_result(job: Job, key: str, record: dict[str, Any], *, cached: bool) -> Result:
    profile = job.profile
    return Result(
        key=key,
        group=job.group,
        profile=profile.name,
        n_layers=len(profile.layers),
        t_ideal=profile.t_ideal,
        budget_fraction=float(job.budget_fraction),
        budget=job.budget,
        min_budget=min_budget(profile),
        method=job.method,
        options=job.options_dict,
        time_limit=job.time_limit,
        seed=job.seed,
        status=record["status"],
        makespan=record["makespan"],
        peak_bytes=record["peak_bytes"],
        lower_bound=record["lower_bound"],
        message=record["message"],
        plan=record["plan"],
        solve_seconds=record["solve_seconds"],
        cached=cached,
        work_limit=job.work_limit,
        work_used=record.get("work_used"),
    )


class SerialExecutor(Executor):
    """Runs each job when it is submitted, in this process (debugging, tests).

    `_max_workers = 1` tells `run_sweep` to keep one job in flight, so
    progress, the cache and `on_result` see every job as it finishes.
    """

    _max_workers = 1

    def submit(self, fn: Callable, /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # delivered through the future, as a pool would
            future.set_exception(exc)
        return future


def _cost_rank(job: Job) -> tuple[int, int]:
    """Longest first (exact methods, then bounds, then heuristics; larger nets first),
    so the slowest jobs do not start last and leave the other workers idle."""
    if is_bound(job.method):
        return (1, len(job.profile.layers))
    kind = 2 if registry.get(job.method).exact else 0
    return (kind, len(job.profile.layers))


def _as_cache(cache: Cache | str | os.PathLike | None) -> Cache | None:
    if cache is None or isinstance(cache, Cache):
        return cache
    return Cache(cache)


def run_sweep(
    jobs: Iterable[Job],
    *,
    executor: Executor | Any | None = None,
    cache: Cache | str | os.PathLike | None = DEFAULT_CACHE_DIR,
    max_workers: int = DEFAULT_WORKERS,
    max_pending: int | None = None,
    progress: bool = True,
    desc: str = "sweep",
    on_result: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run `jobs` (cache hits are not re-run); returns their results in job order.

    `executor`: any `concurrent.futures.Executor`, or a `dask.distributed.Client`
    (its `get_executor()` is used, and its workers' threads set the number
    of jobs in flight); None makes a process pool of `max_workers` and shuts
    it down at the end. At most `max_pending` jobs
    are submitted at a time (default: twice the executor's workers), so
    each outcome reaches the cache soon after it finishes. `cache`: a
    `Cache`, a folder, or None for no cache. `on_result` is called in this
    process with each freshly computed result, as it arrives.
    """
    jobs = list(jobs)
    keys = [job.key() for job in jobs]
    store = _as_cache(cache)
    records: dict[str, dict] = {}
    hits: set[str] = set()
    if store is not None:
        for key in dict.fromkeys(keys):
            record = store.get(key)
            if record is not None:
                records[key] = record
                hits.add(key)
    todo: dict[str, Job] = {}
    for job, key in zip(jobs, keys, strict=True):
        if key not in records and key not in todo:
            todo[key] = job
    order = sorted(todo.items(), key=lambda kv: _cost_rank(kv[1]), reverse=True)

    own = executor is None and bool(order)
    if own:
        executor = ProcessPoolExecutor(max_workers=max_workers)
    executor, workers = _as_executor(executor, max_workers)
    window = max_pending or max(1, 2 * workers)
    bar = tqdm(
        total=len(order),
        desc=desc if store is None else f"{desc} ({len(hits)} cached)",
        unit="job",
        disable=None if progress else True,
        dynamic_ncols=True,
    )
    try:
        if order:
            assert executor is not None
            for key, record in _drain(executor, iter(order), window):
                records[key] = record
                if store is not None and record["status"] != ERROR:
                    store.put(key, record)
                bar.update(1)
                job = todo[key]
                bar.set_postfix_str(f"{job.profile.name} {job.method}", refresh=False)
                if on_result is not None:
                    on_result(make_result(job, key, record, cached=False))
    except BaseException:
        if own and executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
            own = False
        raise
    finally:
        bar.close()
        if own and executor is not None:
            executor.shutdown(wait=True)
    return [
        make_result(job, key, records[key], cached=key in hits)
        for job, key in zip(jobs, keys, strict=True)
    ]


def _as_executor(executor: Any, max_workers: int) -> tuple[Executor | None, int]:
    """The executor to submit to and how many jobs it runs at once.

    NOTE: a `dask.distributed.Client` is recognised by its methods, not its
    type, so dask stays an optional extra (`planopt[dask]`) and is never
    imported here. Its `get_executor()` is a `concurrent.futures.Executor`
    whose futures `wait` understands; the cluster's total worker threads
    size the window of jobs in flight.
    """
    if executor is not None and hasattr(executor, "get_executor") and hasattr(executor, "nthreads"):
        threads = sum(executor.nthreads().values())
        return executor.get_executor(), threads or max_workers
    return executor, getattr(executor, "_max_workers", None) or max_workers


def _drain(
    executor: Executor, pending: Iterator[tuple[str, Job]], window: int
) -> Iterator[tuple[str, dict]]:
    """Keep up to `window` jobs in flight; yield `(key, record)` as each finishes."""
    inflight: dict[Future, str] = {}

    def fill() -> None:
        for key, job in pending:
            inflight[executor.submit(execute, job)] = key
            if len(inflight) >= window:
                return

    try:
        fill()
        while inflight:
            done, _ = wait(inflight, return_when=FIRST_COMPLETED)
            for future in done:
                key = inflight.pop(future)
                yield key, future.result()
            fill()
    finally:
        for future in inflight:
            future.cancel()
