"""Draw one plan's timeline: compute, D2H and H2D lanes over the memory curve.

Needs matplotlib (the `plots` extra); the planner does not, so it is
imported only when a figure is drawn. Figures are built with the
object-oriented `matplotlib.figure.Figure` (no pyplot), which neither needs
a display nor changes the backend of a notebook that imports planopt.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from planopt.errors import OutputPathError, PlanoptError
from planopt.paths import check_output_path
from planopt.plan import Plan
from planopt.profile import Profile
from planopt.schedule import OpKind, Resource, Schedule
from planopt.simulate import simulate

if TYPE_CHECKING:
    from matplotlib.figure import Figure

LANES = (Resource.COMPUTE, Resource.D2H, Resource.H2D)
LANE_LABELS = {Resource.COMPUTE: "compute", Resource.D2H: "D2H copy", Resource.H2D: "H2D copy"}
OP_COLORS = {
    OpKind.FORWARD: "#4C72B0",
    OpKind.BACKWARD: "#55A868",
    OpKind.RECOMPUTE: "#DD8452",
    OpKind.COPY_OUT: "#8172B3",
    OpKind.COPY_BACK: "#C44E52",
    OpKind.REGENERATE: "#CCB974",
}
OP_LABELS = {
    OpKind.FORWARD: "forward",
    OpKind.BACKWARD: "backward",
    OpKind.RECOMPUTE: "recompute",
    OpKind.COPY_OUT: "copy out (swap)",
    OpKind.COPY_BACK: "copy back (prefetch)",
    OpKind.REGENERATE: "regenerate (partial layer)",
}
STALL_COLOR = "#E8E8E8"
BUDGET_COLOR = "#D62728"
FIGURE_FORMATS = (".png", ".svg", ".pdf")


class PlotUnavailableError(PlanoptError):
    """Drawing needs matplotlib, which is not installed."""


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailableError(
            "plots need the package 'matplotlib', which is not installed; "
            "install it (pip install 'planopt[plots]')"
        ) from None


# (name, size) from the smallest unit up; binary byte units, as `planopt.report` prints.
BYTE_UNITS = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40))
TIME_UNITS = (("us", 1e-6), ("ms", 1e-3), ("s", 1.0))


def pick_unit(largest: float, units: Sequence[tuple[str, float]]) -> tuple[float, str]:
    """(size, name) of the unit for an axis that runs from 0 to `largest`.

    The largest unit in which `largest` is at least 1, so the figure's
    biggest number has one to three digits before the point (`33.2 MiB`,
    not `0.03 GiB`); the smallest unit when even that one is too large
    (0, or values below it). Divide values by the size to plot them.
    """
    size, name = units[0][1], units[0][0]
    for unit_name, unit_size in units:
        if abs(largest) >= unit_size:
            size, name = unit_size, unit_name
    return size, name


def _number(value: float) -> str:
    """Four significant figures without an exponent: units keep values below 1024."""
    return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"


def _stalls(schedule: Schedule) -> list[tuple[float, float]]:
    """Intervals in [0, makespan] when the compute stream runs nothing."""
    busy = sorted(
        (op.start, op.end) for op in schedule.operations() if op.resource is Resource.COMPUTE
    )
    gaps, clock = [], 0.0
    tiny = 1e-9 * max(schedule.makespan, 1e-30)
    for start, end in busy:
        if start > clock + tiny:
            gaps.append((clock, start))
        clock = max(clock, end)
    if schedule.makespan > clock + tiny:
        gaps.append((clock, schedule.makespan))
    return gaps


def timeline_figure(
    profile: Profile,
    plan: Plan,
    *,
    budget: float | None = None,
    title: str | None = None,
    schedule: Schedule | None = None,
) -> Figure:
    """A Gantt chart of the plan's three queues with the memory curve beneath.

    Grey bands in the compute lane are stalls (compute waiting on a copy);
    the red dashed line is the budget, the dotted one static memory.
    """
    require_matplotlib()
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    sched = schedule if schedule is not None else simulate(profile, plan, budget)
    budget = sched.budget if budget is None else budget
    # NOTE: one time unit and one byte unit per figure, picked from its largest
    # value (the makespan; the peak or the budget), so a 33 MiB model reads in MiB
    # and a 20 us one in us; every label and the title use the same two units.
    tsize, unit = pick_unit(sched.makespan, TIME_UNITS)
    top_bytes = max(sched.peak_bytes, sched.static_bytes, budget or 0)
    msize, munit = pick_unit(top_bytes, BYTE_UNITS)
    fig = Figure(figsize=(11, 5.6), layout="constrained")
    gantt, memory = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1.15, 1.0]})

    lane_y = {lane: len(LANES) - 1 - k for k, lane in enumerate(LANES)}
    bars: dict[tuple[Resource, OpKind], list[tuple[float, float]]] = {}
    for op in sched.operations():
        bars.setdefault((op.resource, op.kind), []).append(
            (op.start / tsize, (op.end - op.start) / tsize)
        )
    stalls = [(a / tsize, (b - a) / tsize) for a, b in _stalls(sched)]
    y_c = lane_y[Resource.COMPUTE]
    if stalls:
        gantt.broken_barh(
            stalls,
            (y_c - 0.4, 0.8),
            facecolors=STALL_COLOR,
            hatch="////",
            edgecolor="#AAAAAA",
            linewidth=0,
        )
    for (resource, kind), spans in bars.items():
        gantt.broken_barh(
            spans,
            (lane_y[resource] - 0.4, 0.8),
            facecolors=OP_COLORS[kind],
            edgecolor="white",
            linewidth=0.25,
        )
    gantt.set_yticks([lane_y[lane] for lane in LANES], [LANE_LABELS[lane] for lane in LANES])
    gantt.set_ylim(-0.6, len(LANES) - 0.4)
    gantt.grid(axis="x", alpha=0.3)
    kinds_present = [kind for kind in OP_COLORS if any(k == kind for _, k in bars)]
    handles = [Patch(facecolor=OP_COLORS[k], label=OP_LABELS[k]) for k in kinds_present]
    if stalls:
        stall_total = sum(d for _, d in stalls)
        handles.append(
            Patch(
                facecolor=STALL_COLOR,
                hatch="////",
                edgecolor="#AAAAAA",
                label=f"compute stalled ({stall_total:.3g} {unit})",
            )
        )
    if handles:
        gantt.legend(
            handles=handles,
            loc="lower left",
            bbox_to_anchor=(0, 1.0),
            ncol=6,
            frameon=False,
            fontsize="small",
        )

    # Several events at one instant (frees first) leave zero-length dips; the
    # last level at each instant is the one that lasts, and never below a dip.
    last = np.append(np.diff(sched.memory_times) != 0, True)
    times = sched.memory_times[last] / tsize
    level = sched.memory_bytes[last] / msize
    memory.step(times, level, where="post", color="#333333", linewidth=1.0, label="device memory")
    memory.fill_between(times, level, step="post", color="#9ECAE1", alpha=0.5)
    memory.axhline(
        sched.static_bytes / msize,
        color="#777777",
        linestyle=":",
        linewidth=1,
        label=f"static {_number(sched.static_bytes / msize)} {munit}",
    )
    if budget is not None:
        memory.axhline(
            budget / msize,
            color=BUDGET_COLOR,
            linestyle="--",
            linewidth=1.3,
            label=f"budget {_number(budget / msize)} {munit}",
        )
    peak = sched.peak_bytes / msize
    memory.plot(
        [sched.peak_time / tsize],
        [peak],
        marker="v",
        color=BUDGET_COLOR if not sched.feasible else "#333333",
        linestyle="none",
        label=f"peak {_number(peak)} {munit}",
    )
    top = top_bytes / msize * 1.12
    memory.set_ylim(0, top if top > 0 else 1)
    memory.set_xlim(0, sched.makespan / tsize * 1.005 if sched.makespan > 0 else 1)
    memory.set_ylabel(f"device memory ({munit})")
    memory.set_xlabel(f"time ({unit})")
    memory.grid(alpha=0.3)
    memory.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", frameon=False)

    if title is None:
        title = f"{profile.name}: {plan.summary()}"
    verdict = "" if budget is None else ("fits" if sched.feasible else "OVER BUDGET")
    fig.suptitle(
        f"{title}\nmakespan {_number(sched.makespan / tsize)} {unit} "
        f"(+{100 * sched.overhead:.1f}% over T_ideal {_number(sched.t_ideal / tsize)} {unit}), "
        f"peak {_number(peak)} {munit} {verdict}".rstrip(),
        fontsize="medium",
    )
    return fig


def save_figure(
    fig: Figure, path: str | Path, *, dpi: int = 150, what: str = "figure path"
) -> Path:
    """Write `fig` to `path`; the suffix picks the format (.png, .svg or .pdf). The path
    follows `planopt.paths`' rule (its folder must exist); `what` names it in errors."""
    path = check_output_path(path, what)  # no folder is created (planopt.paths' one rule)
    if path.suffix.lower() not in FIGURE_FORMATS:
        raise PlanoptError(f"{what} must end in {', '.join(FIGURE_FORMATS)}, got {str(path)!r}")
    import matplotlib

    try:
        with matplotlib.rc_context({"svg.hashsalt": "planopt"}):
            fig.savefig(path, dpi=dpi, metadata=_metadata(path))
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise OutputPathError(f"{what} {str(path)!r} cannot be written ({reason})") from None
    return path


def _metadata(path: Path) -> dict:
    """Drop the date and tool stamps, so a figure re-drawn from the same data is the same."""
    suffix = path.suffix.lower()
    if suffix == ".svg":
        return {"Date": None, "Creator": None}
    if suffix == ".pdf":
        return {"CreationDate": None, "Creator": None, "Producer": None}
    return {"Software": None}


def plot_timeline(
    profile: Profile,
    plan: Plan,
    path: str | Path,
    *,
    budget: float | None = None,
    title: str | None = None,
) -> Path:
    """Draw the plan's timeline (see `timeline_figure`) and write it to `path`."""
    return save_figure(timeline_figure(profile, plan, budget=budget, title=title), path)
