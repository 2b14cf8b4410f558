"""Does the model hold on your model? One step under a plan, predicted against measured.

`check(chain, plan, batch, loss_fn, profile=...)` runs training steps under
the plan with the executor and reports, beside the simulator's prediction:

* the peak memory, measured from outside the executor (`measure`: the CUDA
  caching allocator, or the live-storage tracker on CPU), with what was
  live at the measured peak and where each peak happens;
* the time of each phase (forward, backward with its copies back and
  recompute blocks, the whole step), the median of `iterations` steps.

`format_check(report)` renders it as text (`planopt run-check` prints it).
The prediction uses the profile as given: on CPU give the link as
instantaneous (copies there end when they start) for the peaks to compare.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from planopt.plan import Plan
from planopt.profile import Profile
from planopt.report import human_bytes, human_seconds, table
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.executor import Executor
from planopt.runtime.inputs import check_batch, check_count
from planopt.runtime.measure import Measurement, grads_regime, measure
from planopt.runtime.training import prepare_grads, restored
from planopt.schedule import OP_KINDS, OpKind, Schedule
from planopt.simulate import simulate

_OP = {
    OpKind.FORWARD: "F",
    OpKind.BACKWARD: "B",
    OpKind.RECOMPUTE: "R",
    OpKind.REGENERATE: "R",  # a partial layer's regeneration (v3), `R_i` in the executor
}


@dataclass(frozen=True)
class Phase:
    """One phase of the step: predicted and measured seconds."""

    name: str
    predicted: float
    measured: float


@dataclass(frozen=True)
class CheckReport:
    """Predicted against measured for one plan on one model."""

    profile: str
    plan: str
    device: str
    predicted_peak: int
    measured_peak: int
    predicted_at: str
    measured_at: str
    peak_source: str
    live_at_peak: dict[str, int]
    reserved_peak: int | None
    phases: tuple[Phase, ...]

    @property
    def peak_error(self) -> float:
        """predicted / measured - 1: above 0 the model over-predicts (safe)."""
        return self.predicted_peak / self.measured_peak - 1


def peak_operation(schedule: Schedule) -> str:
    """The compute operation the simulated peak falls in (`F_3`, `B_5`, `R_2`)."""
    found = ""
    for kind, layer, start, end in zip(
        schedule.op_kind, schedule.op_layer, schedule.op_start, schedule.op_end, strict=True
    ):
        op = OP_KINDS[kind]
        if op not in _OP:
            continue
        if start <= schedule.peak_time < end or (start == schedule.peak_time and not found):
            found = f"{_OP[op]}_{layer}"
    return found


def _phase_times(
    executor: Executor,
    chain: Chain,
    batch: tuple[torch.Tensor, torch.Tensor],
    device: torch.device,
    to_none: bool,
    iterations: int,
    warmup: int,
) -> tuple[float, float]:
    """Median forward and backward seconds of the executor's steps."""
    cuda = device.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    fwd: list[float] = []
    bwd: list[float] = []
    with restored(chain, device):
        for k in range(warmup + iterations):
            prepare_grads(chain, to_none)
            with executor:
                sync()
                t0 = time.perf_counter()
                loss = executor(*batch)
                sync()
                t1 = time.perf_counter()
                loss.backward()
                sync()
                t2 = time.perf_counter()
            if k >= warmup:
                fwd.append(t1 - t0)
                bwd.append(t2 - t1)
    return statistics.median(fwd), statistics.median(bwd)


def check(
    chain: Chain,
    plan: Plan,
    batch: tuple[torch.Tensor, torch.Tensor],
    loss_fn: LossFn,
    *,
    profile: Profile,
    device: torch.device | str | None = None,
    iterations: int = 3,
    warmup: int = 1,
    optimizer: torch.optim.Optimizer | None = None,
    grads_to_none: bool | None = None,
) -> CheckReport:
    """Predicted against measured peak and phase times of `plan` (see the module doc)."""
    check_count("iterations", iterations, 1, "check")
    x, y = check_batch(batch, "check")
    schedule = simulate(profile, plan)
    if device is None:
        device = next((p.device for p in chain.parameters()), x.device)
    device = torch.device(device)
    x, y = x.to(device), y.to(device)
    mem: Measurement = measure(
        chain,
        plan,
        (x, y),
        loss_fn,
        profile=profile,
        device=device,
        iterations=0,
        warmup=0,
        optimizer=optimizer,
        grads_to_none=grads_to_none,
    )
    executor = Executor(chain, plan, profile=profile, loss_fn=loss_fn)
    to_none = grads_regime(profile, grads_to_none)
    fwd, bwd = _phase_times(executor, chain, (x, y), device, to_none, iterations, warmup)
    executor.release_host_memory()
    forward_end = float(max(schedule.op_end[schedule.op_kind == OP_KINDS.index(OpKind.FORWARD)]))
    phases = (
        Phase("forward", forward_end, fwd),
        Phase("backward", schedule.makespan - forward_end, bwd),
        Phase("step", schedule.makespan, fwd + bwd),
    )
    return CheckReport(
        profile=profile.name,
        plan=plan.summary(),
        device=str(device),
        predicted_peak=schedule.peak_bytes,
        measured_peak=mem.peak_bytes,
        predicted_at=peak_operation(schedule),
        measured_at=mem.peak_where,
        peak_source=mem.peak_source,
        live_at_peak=mem.peak_categories,
        reserved_peak=mem.reserved_bytes,
        phases=phases,
    )


def format_check(report: CheckReport) -> str:
    """The report as text: the peak line, what was live, and the phases' table."""
    error = report.peak_error
    verdict = (
        "the model holds"
        if -0.005 <= error <= 0.02
        else "UNDER-PREDICTED: a plan that fits by the model may run out of memory"
        if error < -0.005
        else "over-predicted (safe, but budgets are spent on memory that is not used)"
    )
    lines = [
        f"run-check: profile {report.profile!r}, plan {report.plan}, on {report.device}",
        f"peak memory: predicted {human_bytes(report.predicted_peak)} "
        f"(in {report.predicted_at or '-'}), measured {human_bytes(report.measured_peak)} "
        f"(in {report.measured_at or '-'}): {error * 100:+.2f}%, {verdict}",
        f"measured by: {report.peak_source}",
    ]
    if report.reserved_peak is not None:
        lines.append(f"reserved by the caching allocator: {human_bytes(report.reserved_peak)}")
    if report.live_at_peak:
        live = ", ".join(f"{k} {human_bytes(v)}" for k, v in report.live_at_peak.items())
        lines.append(f"live at the measured peak: {live}")
    rows = [
        [p.name, human_seconds(p.predicted), human_seconds(p.measured), _ratio(p)]
        for p in report.phases
    ]
    headers = ["phase", "predicted", "measured", "measured / predicted"]
    lines += ["", table(headers, rows, right=(1, 2, 3))]
    return "\n".join(lines)


def _ratio(p: Phase) -> str:
    return "-" if p.predicted <= 0 else f"{p.measured / p.predicted:.2f}"
