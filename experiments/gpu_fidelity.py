"""Parts 2, 2b and 3 of the GPU run: every plan's predicted peak and makespan against the device.

For one model (`experiments.gpu_models`): build it on the device, profile
it there (`planopt.runtime.profile`: CUDA events, the caching allocator, the
link measured in part 1; with each layer class's SAC menu, cost model v3,
falling back to whole layers if the menus fail), time plain PyTorch, then
plan and run:

* keep-all;
* every method that needs no MIP package (`METHODS`: the greedy, remat-dp,
  blocks with its exact windows and LP bound off, the baselines) at 70/50/30%
  of keep-all activation memory, with a work limit (the same plans on any
  machine);
* `random` random valid plans (seeded; whole layers).

Identical plans are run once and listed under every name that produced
them. Each distinct plan runs under the executor (`planopt.runtime.measure`:
one warm-up step, then `iterations` timed ones; swaps on the real copy
streams). Predicted: the simulator on the profile. Measured: the peak of
`torch.cuda.max_memory_allocated` over the timed steps (reserved beside it)
and the median step by CUDA events; on CPU (the smoke run) the live-storage
tracker and `time.perf_counter`.

The clock is checked before each plan: a plan that would not end inside
the model's share of the run is listed as skipped, never started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import planopt
from experiments.bench_fidelity import random_plan
from experiments.gpu_models import GpuModel
from planopt import registry
from planopt.errors import PlanoptError
from planopt.plan import Plan
from planopt.profile import Profile
from planopt.runtime.measure import measure, plain_step_seconds
from planopt.runtime.profiler import profile

BUDGETS = (70, 50, 30)
WORK_LIMIT = 2.0  # work units per solve: the same plans on any machine under any load
SOLVE_SECONDS = 20.0  # a guard on top of the work limit
# blocks without its exact windows (OR-Tools) and its LP bound (HiGHS/PuLP): registered
# under its own name, with no package required, so that it runs where they are absent.
BLOCKS_NO_MIP = "blocks-nomip"
BLOCKS_NO_MIP_OPTIONS = {"window": 0, "lower_bound": False}
METHODS = ("greedy", "remat-dp", BLOCKS_NO_MIP, "sqrt-n", "all-swap", "superneurons")


def register_blocks_without_mip() -> None:
    """`blocks` with no package required, run with `BLOCKS_NO_MIP_OPTIONS` (idempotent)."""
    if BLOCKS_NO_MIP in registry.names():
        return
    spec = registry.get("blocks")
    registry.register(
        dataclasses.replace(
            spec,
            name=BLOCKS_NO_MIP,
            requires=(),
            aliases=(),
            summary="blocks with its exact windows and LP bound off (no MIP package)",
        )
    )


@dataclass
class PlanRow:
    """One distinct plan of one model: who produced it, what was predicted and measured."""

    model: str
    names: list[str]
    actions: str  # per layer: K keep, O keep with a menu option, S swap, R recompute
    summary: str
    predicted_peak: int | None = None
    measured_peak: int | None = None
    reserved_peak: int | None = None
    predicted_seconds: float | None = None
    measured_seconds: float | None = None
    samples: list[float] = field(default_factory=list)
    copied: str = ""
    note: str = ""
    error: str = ""

    @property
    def memory_error(self) -> float | None:
        """predicted / measured peak - 1 (negative: under-predicted)."""
        if self.predicted_peak is None or not self.measured_peak:
            return None
        return self.predicted_peak / self.measured_peak - 1

    @property
    def time_error(self) -> float | None:
        """measured / predicted step - 1 (positive: slower than predicted)."""
        if self.measured_seconds is None or not self.predicted_seconds:
            return None
        return self.measured_seconds / self.predicted_seconds - 1


@dataclass
class ModelInfo:
    """One model's profile and how its run went."""

    model: str
    config: str
    layers: int = 0
    menus: str = ""
    static_bytes: int = 0
    keep_all_peak: int = 0
    min_budget: int = 0
    t_ideal: float = 0.0
    plain_seconds: float | None = None
    profile_seconds: float = 0.0
    seconds: float = 0.0
    link: str = ""
    missing: dict[str, list[str]] = field(default_factory=dict)
    error: str = ""


@dataclass
class Settings:
    """What one model's run needs from the driver."""

    device: torch.device
    link: planopt.Device | None  # CUDA: measured in part 1 (None: the profiler measures it)
    seed: int
    random: int
    profile_iterations: int
    profile_warmup: int
    iterations: int
    log: Callable[[str], None]
    left: Callable[[], float]  # seconds left in this model's share


def actions_string(plan: Plan) -> str:
    options = plan.options or (None,) * len(plan)
    return "".join(
        "O" if o is not None else a.value[0].upper()
        for a, o in zip(plan.actions, options, strict=True)
    )


def _key(plan: Plan) -> tuple:
    return (plan.actions, plan.prefetch_at, plan.swap_wait, plan.options)


def _error_text(exc: BaseException) -> str:
    first = (str(exc).splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:300]}"


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc)


def free_device(device: torch.device) -> None:
    """Drop what the last model left: garbage, the allocator's cached blocks, and the
    pinned host blocks torch caches after a swap's buffers are freed (tens of GB after
    a large model's swap plans; a private API whose name varies: best effort)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        for name in ("_host_emptyCache", "_accelerator_emptyHostCache"):
            empty_host = getattr(torch._C, name, None)
            if empty_host is not None:
                with contextlib.suppress(Exception):
                    empty_host()
                break


def profile_model(chain, batch, loss_fn, s: Settings, name: str) -> tuple[Profile, str]:
    """The measured profile, with menus (v3) if they can be made, else whole layers (v2)."""
    kw = dict(
        iterations=s.profile_iterations,
        warmup=s.profile_warmup,
        link=s.link,
        name=name,
        progress=False,
    )
    try:
        prof = profile(chain, batch, loss_fn, menus=True, **kw)
        with_menus = sum(1 for layer in prof.layers if layer.options)
        return prof, f"v3: menus on {with_menus} of {len(prof)} layers"
    except Exception as exc:  # the menus' own failure is a result; whole layers still run
        s.log(f"  {name}: profile with menus failed, whole layers instead: {_error_text(exc)}")
        s.log(traceback.format_exc())
        free_device(s.device)
        prof = profile(chain, batch, loss_fn, menus=False, **kw)
        return prof, f"v2 (menus failed: {_error_text(exc)})"


def plans_for(prof: Profile, s: Settings, missing: dict[str, list[str]]) -> list[tuple]:
    """Distinct plans, keep-all first, then the methods', then the random ones."""
    register_blocks_without_mip()
    plans: dict[tuple, tuple[list[str], Plan]] = {}

    def add(name: str, plan: Plan) -> None:
        plans.setdefault(_key(plan), ([], plan))[0].append(name)

    add("keep-all", Plan.keep_all(prof))
    for percent in BUDGETS:
        for method in METHODS:
            label = f"{method}@{percent}%"
            options = BLOCKS_NO_MIP_OPTIONS if method == BLOCKS_NO_MIP else {}
            limit = max(1.0, min(SOLVE_SECONDS, s.left() / 4))
            try:
                sol = planopt.solve(
                    prof,
                    f"{percent}%",
                    method,
                    seed=s.seed,
                    work_limit=WORK_LIMIT,
                    time_limit=limit,
                    **options,
                )
            except PlanoptError as exc:  # refused: a result, listed under its reason
                missing.setdefault(type(exc).__name__, []).append(label)
                continue
            if sol.plan is None:
                missing.setdefault(sol.status.value, []).append(label)
            else:
                add(label, sol.plan)
    rng = random.Random(s.seed)
    for k in range(s.random):
        add(f"random-{k}", random_plan(rng, prof))
    return list(plans.values())


def run_plan(chain, batch, loss_fn, prof: Profile, names, plan: Plan, s: Settings, model: str):
    """One plan predicted and measured (an exception is the row's error, not the run's)."""
    predicted = planopt.simulate(prof, plan)
    row = PlanRow(
        model=model,
        names=names,
        actions=actions_string(plan),
        summary=plan.summary(),
        predicted_peak=int(predicted.peak_bytes),
        predicted_seconds=float(predicted.makespan),
    )
    try:
        m = measure(
            chain,
            plan,
            batch,
            loss_fn,
            profile=prof,
            iterations=s.iterations,
            warmup=1,
        )
    except Exception as exc:  # out of memory, or a runtime failure: recorded, the run goes on
        row.error = _error_text(exc)
        row.note = "out of memory on the device" if _is_oom(exc) else "failed"
        s.log(f"    {names[0]}: {row.error}")
        if not _is_oom(exc):
            s.log(traceback.format_exc())
        free_device(s.device)
        return row
    row.measured_peak = int(m.peak_bytes)
    row.reserved_peak = m.reserved_bytes
    row.measured_seconds = float(m.step_seconds)
    row.samples = [float(x) for x in m.step_samples]
    st = m.stats
    if st.copies_out:
        row.copied = f"{st.bytes_out / 2**20:.0f} MiB out, {st.bytes_back / 2**20:.0f} MiB back"
    return row


def run_model(
    model: GpuModel, s: Settings, rows: list[PlanRow], on_profile: Callable[[Profile], None]
) -> ModelInfo:
    """Profile, plan and run `model`; rows are appended to `rows` as they are measured."""
    started = time.perf_counter()
    info = ModelInfo(model=model.key, config=model.config)
    free_device(s.device)
    with torch.device(s.device):  # big models are initialised where they run
        ref = model.build()
    chain = ref.chain.to(s.device)
    batch = ref.batch(seed=s.seed + 1, device=s.device)
    info.config = f"{model.config}, batch {batch[0].shape[0]}"
    t = time.perf_counter()
    prof, info.menus = profile_model(chain, batch, ref.loss_fn, s, model.key)
    info.profile_seconds = time.perf_counter() - t
    on_profile(prof)
    info.layers = len(prof)
    info.static_bytes = prof.static_bytes
    info.keep_all_peak = planopt.keep_all_peak(prof)
    info.min_budget = planopt.min_budget(prof)
    info.t_ideal = prof.t_ideal
    info.link = f"{prof.device.name}: H2D {prof.device.h2d_bandwidth / 1e9:.1f} GB/s"
    s.log(
        f"  {model.key}: {len(prof)} layers, {info.menus}, keep-all "
        f"{info.keep_all_peak / 2**30:.2f} GiB, T_ideal {prof.t_ideal * 1e3:.1f} ms, "
        f"profiled in {info.profile_seconds:.1f} s"
    )
    plain, _ = plain_step_seconds(chain, batch, ref.loss_fn, iterations=s.iterations, warmup=1)
    info.plain_seconds = plain
    plans = plans_for(prof, s, info.missing)
    per_step = max(plain, prof.t_ideal)
    for names, plan in plans:
        cost = per_step * (s.iterations + 2) * 2 + 1.0  # with a recompute's or a copy's slack
        if s.left() < cost:
            rows.append(
                PlanRow(
                    model.key,
                    names,
                    actions_string(plan),
                    plan.summary(),
                    note=f"skipped: {s.left():.0f} s left in this model's share",
                )
            )
            continue
        row = run_plan(chain, batch, ref.loss_fn, prof, names, plan, s, model.key)
        rows.append(row)
        err = row.memory_error
        s.log(
            f"    {', '.join(names[:3])}: {row.actions} peak "
            + ("-" if err is None else f"{err * 100:+.2f}%")
            + (
                ""
                if row.time_error is None
                else f", step {row.measured_seconds * 1e3:.1f} ms ({row.time_error * 100:+.1f}%)"
            )
        )
    info.seconds = time.perf_counter() - started
    del chain, batch, ref
    free_device(s.device)
    return info


def finite(values) -> list[float]:
    return [v for v in values if v is not None and not math.isnan(v)]
