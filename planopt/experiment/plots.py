"""Figures of a sweep: overhead vs budget, the greedy's gap, solve time vs L, robustness.

matplotlib (the `plots` extra) is imported inside each function, never at
module import. Every figure is written as PNG and SVG by `save_both`; every
method keeps one colour and marker across figures (`method_style`).
Which method is the greedy, an optimum or a bound is read from the registry
(`planopt.experiment.roles`).

NOTE (size): four figures sharing one style table and one percentage axis
(`method_style`, `_pct_axis`); each figure is one function, and splitting
them would scatter the shared styling that keeps a method's colour the same
in every figure.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from planopt.experiment.analysis import median
from planopt.experiment.roles import full_space, greedy, is_bound, joint_exact
from planopt.experiment.sweep import Result
from planopt.plot import require_matplotlib, save_figure

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Fixed colours for the methods we know, so a figure's colours never depend on which
# methods a sweep ran (a style, not a classification: roles come from the registry);
# others get the remaining colours in turn.
_KNOWN = (
    "exact",
    "pooch",
    "sqrt-n",
    "all-swap",
    "superneurons",
    "recompute-only",
    "swap-only",
    "keep-all",
    "blocks",
    "auto",
)
_COLORS = (
    "#000000",
    "#D62728",
    "#1F77B4",
    "#9467BD",
    "#8C564B",
    "#FF7F0E",
    "#2CA02C",
    "#7F7F7F",
    "#17BECF",
    "#BCBD22",
    "#E377C2",
    "#AEC7E8",
)
_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "<", ">", "h", "*", "p")
_BACKEND_LINES = {"cpsat": "-", "highs": "--", "cbc": ":"}
_BACKEND_COLORS = {"cpsat": "#000000", "highs": "#1F77B4", "cbc": "#FF7F0E"}
# The anytime searches often tie with the optimum: dashes keep every curve visible.
_METHOD_LINES = {"lns": (0, (5, 2)), "blocks": "-.", "auto": (0, (1, 1.5))}
_extra: dict[str, int] = {}


def method_style(label: str) -> dict:
    """Colour, marker and line style of a method label (`exact[highs]` keeps exact's
    colour, with the back-end's line style)."""
    method, _, rest = label.partition("[")
    backend = rest.rstrip("]") or None
    if method in _KNOWN:
        k = _KNOWN.index(method)
    else:
        k = len(_KNOWN) + _extra.setdefault(method, len(_extra))
    style = {
        "color": _COLORS[k % len(_COLORS)],
        "marker": _MARKERS[k % len(_MARKERS)],
        "linestyle": (
            _BACKEND_LINES.get(backend, "-.") if backend else _METHOD_LINES.get(method, "-")
        ),
    }
    if backend is not None:
        style["color"] = _BACKEND_COLORS.get(backend, style["color"])
    if method == greedy():
        style["linewidth"] = 2.2
    return style


def display_name(label: str) -> str:
    """The greedy's label says it is the greedy: `pooch (greedy)`."""
    name = greedy()
    return f"{name} (greedy){label[len(name) :]}" if label.startswith(name) else label


def save_both(fig: Figure, folder: str | Path, stem: str) -> list[Path]:
    """`<stem>.png` and `<stem>.svg` in `folder`."""
    folder = Path(folder)
    return [save_figure(fig, folder / f"{stem}{ext}") for ext in (".png", ".svg")]


def _figure(width: float, height: float) -> Figure:
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


class NothingToDraw(ValueError):
    """The results hold nothing this figure shows; the message says why, for the sweep's
    summary (a ValueError, as `overhead_vs_budget` raised before it existed)."""


# Share of the axis left above the largest value, so no marker is cut at the top.
HEADROOM = 0.08


def _pct_axis(ax: Axes, axis: str = "y", *, largest: float, linthresh: float = 1.0) -> None:
    """A symmetric-log percentage axis from 0 to a little above `largest` (in %): linear
    near 0 (where most gaps are), log above.

    NOTE: the limits are set, not autoscaled: autoscaling's margin takes a symlog
    axis below 0 (a "-1%" tick on an overhead that cannot be negative) and, above,
    adds too little room in log space for the top marker. The top is placed in the
    axis's own (symlog) coordinates, HEADROOM above the largest value; an axis whose
    values stay within the linear part runs to `linthresh` so it still has two ticks.
    """
    from matplotlib.ticker import FuncFormatter, NullFormatter, SymmetricalLogLocator

    setter = ax.set_yscale if axis == "y" else ax.set_xscale
    setter("symlog", linthresh=linthresh, linscale=0.6)
    which = ax.yaxis if axis == "y" else ax.xaxis
    # Unlabelled 2x..9x ticks: a top that stops short of the next decade still reads.
    which.set_minor_locator(
        SymmetricalLogLocator(linthresh=linthresh, base=10, subs=tuple(range(2, 10)))
    )
    which.set_minor_formatter(NullFormatter())
    transform = which.get_transform()
    span = float(transform.transform(max(largest, linthresh)))
    top = float(transform.inverted().transform(span * (1 + HEADROOM)))
    (ax.set_ylim if axis == "y" else ax.set_xlim)(0, top)
    # `+ 0.0` turns a -0.0 into 0.0, so no "-0%" label.
    which.set_major_formatter(FuncFormatter(lambda v, _: f"{v + 0.0:g}%"))


def _note(ax: Axes, text: str) -> None:
    """Say in the panel itself why it shows no data (instead of an empty frame)."""
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        wrap=True,
        fontsize="small",
        color="#555555",
        transform=ax.transAxes,
    )


# -- overhead against budget -----------------------------------------------------------


def overhead_vs_budget(
    results: Sequence[Result],
    *,
    profiles: Sequence[str] | None = None,
    ncols: int = 3,
    min_fractions: Mapping[str, float] | None = None,
) -> Figure:
    """One panel per net: each method's overhead (%) against the budget (% of keep-all
    activation memory), with the lower bound dashed and the minimum budget shaded.

    Every net swept is drawn (`profiles` picks and orders them), at however many
    budgets it has; a net with no plan that fits says so in its panel.
    `min_fractions` (net -> minimum budget as a budget fraction) places the shading
    where the results alone cannot (a net swept at one budget). Raises
    `NothingToDraw` when no net has a plan or a bound to draw.
    """
    by_profile: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_profile[r.profile].append(r)
    if profiles is None:
        profiles = list(by_profile)
    profiles = list(dict.fromkeys(profiles))
    series_of = {name: _overhead_series(by_profile.get(name, [])) for name in profiles}
    if not any(series_of.values()):
        raise NothingToDraw(
            "no net has a plan that fits or a lower bound at any budget swept"
            if results
            else "no results"
        )
    largest = max(
        (y for series in series_of.values() for pts in series.values() for _, y in pts),
        default=0.0,
    )
    nrows = -(-len(profiles) // ncols)
    fig = _figure(4.2 * min(ncols, len(profiles)) + 1.8, 3.3 * nrows + 0.6)
    axes = fig.subplots(nrows, min(ncols, len(profiles)), squeeze=False, sharey=True)
    handles: dict[str, object] = {}
    shaded = False
    for ax, name in zip(axes.flat, profiles, strict=False):
        rs = by_profile.get(name, [])
        ax.set_xlim(0, 102)
        _pct_axis(ax, largest=largest)
        ax.grid(alpha=0.3)
        if not rs:
            ax.set_title(name, fontsize="small")
            _note(ax, "no results for this net")
            continue
        first = rs[0]
        if min_fractions is not None and name in min_fractions:
            min_fraction: float | None = min_fractions[name]
        else:
            min_fraction = _fraction_of(first.min_budget, rs)
        if min_fraction is not None and min_fraction > 0:
            ax.axvspan(0, 100 * min_fraction, color="#EEEEEE", zorder=0)
            ax.axvline(100 * min_fraction, color="#999999", linewidth=0.8, zorder=0)
            shaded = True
        series = series_of[name]
        for label, points in sorted(series.items(), key=lambda kv: _order(kv[0])):
            xs, ys = zip(*sorted(points), strict=True)
            if label == "lower bound":
                # One budget: a line of one point shows nothing, so a dash marks it.
                marker = {"marker": "_", "markersize": 10} if len(xs) == 1 else {}
                (line,) = ax.plot(xs, ys, color="#555555", linestyle="--", linewidth=1.2, **marker)
            else:
                style = method_style(label)
                if label in full_space():  # the optimum: drawn last, on top of the others
                    style.update(linewidth=1.3, zorder=5)
                # Unclipped: a marker at 0% sits on the frame, whole, not halved.
                (line,) = ax.plot(xs, ys, markersize=4, alpha=0.9, clip_on=False, **style)
            handles.setdefault(display_name(label), line)
        if not any(label != "lower bound" for label in series):
            _note(ax, "no method found a plan that fits at any budget swept")
        ax.set_title(f"{name} (L = {first.n_layers})", fontsize="small")
    for ax in axes.flat[len(profiles) :]:
        ax.set_visible(False)
    columns = axes.shape[1]
    for k, ax in enumerate(axes.flat[: len(profiles)]):
        if k + columns >= len(profiles):  # nothing drawn below it: the bottom of its column
            ax.set_xlabel("budget (% of keep-all activation memory)")
    for ax in axes[:, 0]:
        ax.set_ylabel("overhead T / T_ideal - 1 (%)")
    from matplotlib.patches import Patch

    if shaded:
        handles["below the minimum budget"] = Patch(color="#EEEEEE")
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside right center",
        fontsize="small",
        frameon=False,
    )
    fig.suptitle("Overhead against memory budget (lower is better)")
    return fig


def _overhead_series(rs: Sequence[Result]) -> dict[str, list[tuple[float, float]]]:
    """(budget %, overhead %) per method label, and the lower bound's; only points that
    exist (a plan that fits, a bound found), never below 0 (rounding)."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rs:
        if is_bound(r.method) and r.lower_bound is not None and r.t_ideal > 0:
            overhead = r.lower_bound / r.t_ideal - 1
            series["lower bound"].append((100 * r.budget_fraction, 100 * max(0.0, overhead)))
        elif r.fits and r.overhead is not None:
            series[r.label].append((100 * r.budget_fraction, 100 * max(0.0, r.overhead)))
    return dict(series)


def _fraction_of(nbytes: float, rs: Sequence[Result]) -> float | None:
    """A byte budget as a budget fraction, from two budgets of the same profile (None
    with a single budget: one point cannot place a line)."""
    a = min(rs, key=lambda r: r.budget_fraction)
    b = max(rs, key=lambda r: r.budget_fraction)
    if b.budget_fraction == a.budget_fraction:
        return None
    per = (b.budget - a.budget) / (b.budget_fraction - a.budget_fraction)
    static = a.budget - per * a.budget_fraction
    return (nbytes - static) / per if per > 0 else 0.0


def _order(label: str) -> tuple[int, str]:
    method = label.partition("[")[0]
    return (_KNOWN.index(method) if method in _KNOWN else len(_KNOWN), label)


# -- distribution of the gap --------------------------------------------------------------


def gap_distribution(gap_rows: Sequence[dict]) -> Figure:
    """ECDF of each heuristic's gap: to the proven optimum (left), and to the lower bound
    on nets too large to solve exactly (right; an upper bound on the true gap).

    A panel without instances says so; a method without a single plan keeps its legend
    entry ("no plan on n of n"). Raises `NothingToDraw` without any row.
    """
    if not gap_rows:
        raise NothingToDraw(
            "no heuristic ran (the gap compares heuristics with the optimum or the lower bound)"
        )
    fig = _figure(12, 4.6)
    axes = fig.subplots(1, 2, sharey=True)
    titles = {
        "optimum": "gap to the proven optimum",
        "lower bound": "gap to the lower bound (no optimum known)",
    }
    empty = {
        "optimum": "no instance with a proven optimum",
        "lower bound": "none: every instance has a proven optimum (left)",
    }
    for ax, kind in zip(axes, titles, strict=True):
        per_method: dict[str, list[float | None]] = defaultdict(list)
        for row in gap_rows:
            if row["reference"] == kind:
                per_method[row["method"]].append(row["gap"])
        n = max((len(gaps) for gaps in per_method.values()), default=0)
        ax.set_title(f"{titles[kind]}: {n} instances", fontsize="medium")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if not per_method:
            ax.set_xticks([])
            ax.grid(False)
            _note(ax, empty[kind])
            continue
        largest = max(
            (100 * g for gaps in per_method.values() for g in gaps if g is not None), default=0.0
        )
        for method, gaps in sorted(per_method.items(), key=lambda kv: _order(kv[0])):
            found = sorted(100 * g for g in gaps if g is not None)
            ys = [(k + 1) / len(gaps) for k in range(len(found))]
            style = method_style(method)
            style.pop("marker")
            missing = len(gaps) - len(found)
            if len(found) * 2 > len(gaps):  # the median instance has a plan
                note = f"median {median(found):.1f}%"
                if missing:
                    note += f", no plan on {missing}"
            else:
                note = f"no plan on {missing} of {len(gaps)}"
            # No plan at all: an empty line still gives the method its legend entry.
            ax.step(
                [0, *found] if found else [],
                [0, *ys] if found else [],
                where="post",
                label=f"{display_name(method)} ({note})",
                **style,
            )
        _pct_axis(ax, "x", largest=largest)
        ax.set_xlabel("gap T / T_ref - 1 (%)")
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.16),
            ncol=2,
            fontsize="small",
            frameon=False,
        )
    axes[0].set_ylabel("share of instances with gap <= x")
    fig.suptitle(
        "How far the heuristics are from the optimum (curves that reach 1 sooner are better; "
        "a curve below 1 at the right: no plan found)",
        fontsize="medium",
    )
    return fig


# -- solve time against L ------------------------------------------------------------------


def solve_time_vs_layers(
    results: Sequence[Result], *, methods: Sequence[str] | None = None
) -> Figure:
    """Log-log solve time against L: every solve as a faint point, medians joined;
    hollow markers are solves that ran into their time limit. Results that name a
    back-end (`exact[highs]`) get their own panel on the right."""
    chosen = [
        r for r in results if r.status != "error" and (methods is None or r.method in methods)
    ]
    if not chosen:
        raise NothingToDraw("no solve to time (results refused with an error are left out)")
    plain = [r for r in chosen if "backend" not in r.options]
    backends = [r for r in chosen if "backend" in r.options]
    panels = [
        (rs, title)
        for rs, title in (
            (plain, "every method (default options)"),
            (backends, "the exact method on each back-end"),
        )
        if rs
    ]
    widths = [2.2, 1.0][: len(panels)] if len(panels) == 2 else [1.0]
    fig = _figure(11.5 if len(panels) == 2 else 9.5, 5.8)
    axes = fig.subplots(1, len(panels), squeeze=False, gridspec_kw={"width_ratios": widths})[0]
    for ax, (rs, title) in zip(axes, panels, strict=True):
        _time_panel(ax, rs)
        ax.set_title(title, fontsize="medium")
    axes[0].set_ylabel("solve time (s, log scale)")
    fig.suptitle(
        "Solve time against network length: median per L joined, every solve a dot, "
        "hollow markers hit their time limit",
        fontsize="medium",
    )
    return fig


def _time_panel(ax: Axes, rs: Sequence[Result]) -> None:
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    per_label: dict[str, list[Result]] = defaultdict(list)
    for r in rs:
        per_label[r.label].append(r)
    limits = set()
    for label, mine in sorted(per_label.items(), key=lambda kv: _order(kv[0])):
        if is_bound(label):
            style = {"color": "#555555", "marker": "d", "linestyle": "--"}
        else:
            style = method_style(label)
        by_n: dict[int, list[float]] = defaultdict(list)
        for r in mine:
            by_n[r.n_layers].append(max(r.solve_seconds, 1e-5))
            if r.time_limit is not None and r.solve_seconds >= 0.95 * r.time_limit:
                limits.add(r.time_limit)
                ax.plot(
                    r.n_layers,
                    r.solve_seconds,
                    marker=style["marker"],
                    color=style["color"],
                    markerfacecolor="none",
                    markersize=8,
                    linestyle="none",
                )
        xs = sorted(by_n)
        pts = [(n, s) for n in xs for s in by_n[n]]
        ax.scatter(
            [p[0] for p in pts],
            [p[1] for p in pts],
            s=9,
            color=style["color"],
            alpha=0.25,
            linewidths=0,
        )
        ax.plot(
            xs,
            [median(by_n[n]) for n in xs],
            label=display_name(label),
            markersize=5,
            **style,
        )
    for limit in sorted(limits):
        ax.axhline(limit, color="#999999", linestyle=":", linewidth=1)
        ax.text(
            0.01,
            limit * 1.1,
            f"time limit {limit:g} s",
            fontsize="x-small",
            color="#666666",
            transform=ax.get_yaxis_transform(),
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    lengths = sorted({r.n_layers for r in rs})
    if len(lengths) <= 6:
        ax.set_xticks(lengths)
    else:
        ax.xaxis.set_major_locator(LogLocator(base=2))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("layers L (log scale)")
    ax.grid(alpha=0.3, which="major")
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        fontsize="small",
        ncol=3 if len(per_label) > 4 else 1,
        frameon=False,
    )


# -- robustness -------------------------------------------------------------------------------


def _sideways() -> dict:
    """Horizontal boxes: `orientation` from matplotlib 3.10, `vert` before it."""
    import matplotlib

    major, minor = (int(x) for x in matplotlib.__version__.split(".")[:2])
    return {"orientation": "horizontal"} if (major, minor) >= (3, 10) else {"vert": False}


def robustness_figure(rows: Sequence[dict], advantage: Sequence[dict]) -> Figure:
    """Left: share of re-scorings whose true peak breaks the budget, per method and noise.
    Right: share of the exact plan's nominal advantage kept under noise, per rival (the
    greedy's when no exact plan was re-scored). Raises `NothingToDraw` without rows."""
    if not rows:
        raise NothingToDraw(
            "no plan was re-scored on noisy profiles (draws = 0, or no method found a plan "
            "that fits)"
        )
    fig = _figure(13, 4.8)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1.0]})
    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    methods = sorted({r["method"] for r in rows}, key=_order)
    width = 0.8 / max(1, len(scenarios))
    hatches = ("", "///", "..", "xx")
    for k, scenario in enumerate(scenarios):
        shares = []
        for method in methods:
            mine = [r for r in rows if r["scenario"] == scenario and r["method"] == method]
            shares.append(100 * sum(not r["fits"] for r in mine) / len(mine) if mine else 0)
        xs = [i + (k - (len(scenarios) - 1) / 2) * width for i in range(len(methods))]
        left.bar(
            xs,
            shares,
            width,
            label=scenario,
            color=[method_style(m)["color"] for m in methods],
            hatch=hatches[k % len(hatches)],
            edgecolor="white",
            alpha=0.55 + 0.45 * (k == len(scenarios) - 1),
        )
    left.set_xticks(
        range(len(methods)),
        [display_name(m) for m in methods],
        rotation=30,
        ha="right",
        fontsize="small",
    )
    left.set_ylabel("re-scorings over budget (%)")
    left.set_ylim(0, 100)
    left.grid(axis="y", alpha=0.3)
    from matplotlib.patches import Patch

    left.legend(
        handles=[
            Patch(facecolor="#888888", hatch=hatches[k % len(hatches)], edgecolor="white", label=s)
            for k, s in enumerate(scenarios)
        ],
        fontsize="small",
        loc="upper left",
    )
    left.set_title("Which plans break the budget on a noisy profile", fontsize="medium")

    leaders = [a["leader"] for a in advantage]
    preferred = [m for m in joint_exact() if m in leaders]
    leader = preferred[0] if preferred else (leaders[0] if leaders else None)
    rivals = sorted({a["method"] for a in advantage if a["leader"] == leader}, key=_order)
    step = 0.8 / max(1, len(scenarios))
    for k, scenario in enumerate(scenarios):
        data, positions = [], []
        for i, method in enumerate(rivals):
            kept = [
                100 * a["kept"]
                for a in advantage
                if a["scenario"] == scenario and a["leader"] == leader and a["method"] == method
            ]
            if kept:
                data.append(kept)
                positions.append(i + (k - (len(scenarios) - 1) / 2) * step)
        if not data:
            continue
        box = right.boxplot(
            data,
            positions=positions,
            widths=step * 0.85,
            showfliers=False,
            patch_artist=True,
            **_sideways(),
        )
        for patch, pos in zip(box["boxes"], positions, strict=True):
            method = rivals[round(pos)]
            patch.set_facecolor(method_style(method)["color"])
            patch.set_alpha(0.35 + 0.4 * k / max(1, len(scenarios) - 1))
            patch.set_hatch(hatches[k % len(hatches)])
    right.set_yticks(range(len(rivals)), [f"over {display_name(m)}" for m in rivals])
    right.set_ylim(-0.6, max(len(rivals), 1) - 0.4)
    if not rivals:
        _note(right, "no other plan is 1% or more slower than the leader's: no advantage to keep")
    right.axvline(100, color="#333333", linewidth=0.8)
    right.axvline(0, color=_COLORS[1], linewidth=0.8, linestyle="--")
    hatched = f"; hatched: {scenarios[1]}" if len(scenarios) > 1 else ""
    right.set_xlabel(f"share of the nominal advantage kept (%)\nboxes: quartiles{hatched}")
    right.grid(axis="x", alpha=0.3)
    right.set_title(
        f"How much of {display_name(leader) if leader else 'the leader'}'s advantage "
        "survives the noise",
        fontsize="medium",
    )
    return fig
