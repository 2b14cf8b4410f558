"""From sweep results to the tables that answer the open questions.

An *instance* is one profile at one budget. Its reference makespan is the
proven optimum where a full-space exact method proved one (or any plan
reached `T_ideal`, which nothing beats), else the best proven lower bound
(from `planopt.lower_bound` or a time-limited exact solve). A gap to a lower
bound is an upper bound on the true gap; tables say which reference a row
uses.

Which method plays which part (full-space optimum, restricted optimum,
bound, the greedy) is read from the registry (`planopt.experiment.roles`).

NOTE (size): the four questions' tables (overhead, gap, solve time, joint)
share the instance and reference machinery above them; each is a short
section, and splitting them would spread one reading of the results over
four files.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from planopt.experiment.roles import full_space, greedy, is_bound, is_exact, joint_exact, restricted
from planopt.experiment.sweep import Result
from planopt.experiment.tables import Column, Table
from planopt.report import (
    fmt_budget,
    fmt_int,
    fmt_ratio,
    fmt_seconds,
    fmt_text,
    gib,
    percent,
)
from planopt.result import Status

# NOTE: keep-all ignores the budget and fits only when nothing needs planning,
# so its "gap" says nothing; no registry field marks that, hence its name here.
NOT_PLANNERS = ("keep-all",)
OPTIMAL_TOLERANCE = 1e-9  # relative: makespans this close are equal

InstanceKey = tuple[str, float]


def instance_key(result: Result) -> InstanceKey:
    return (result.profile, result.budget_fraction)


def by_instance(results: Iterable[Result]) -> dict[InstanceKey, list[Result]]:
    groups: dict[InstanceKey, list[Result]] = defaultdict(list)
    for result in results:
        groups[instance_key(result)].append(result)
    return dict(groups)


def is_heuristic(method: str) -> bool:
    """Methods whose gap the tables report: every planner that is not exact (the exact
    methods are references), not a bound, and not keep-all."""
    return not (is_exact(method) or is_bound(method) or method in NOT_PLANNERS)


@dataclass(frozen=True)
class Reference:
    """The best known figures of one instance."""

    optimum: float | None  # proven optimal makespan (s)
    bound: float  # best proven lower bound (s), at least T_ideal
    best: float | None  # fastest plan found by any method

    @property
    def kind(self) -> str:
        return "optimum" if self.optimum is not None else "lower bound"

    @property
    def value(self) -> float:
        return self.optimum if self.optimum is not None else self.bound


def reference(results: Sequence[Result]) -> Reference:
    """Optimum, bound and best plan of one instance's results (see the module doc)."""
    t_ideal = results[0].t_ideal
    full = full_space()
    optima = []
    bounds = [t_ideal]
    plans = [r.makespan for r in results if r.fits and r.makespan is not None]
    for r in results:
        if not r.fits or r.makespan is None:
            continue
        at_ideal = r.makespan <= t_ideal * (1 + OPTIMAL_TOLERANCE)
        if at_ideal or (r.method in full and r.status == Status.OPTIMAL.value):
            optima.append(r.makespan)
    for r in results:
        if r.lower_bound is not None and (is_bound(r.method) or r.method in full):
            bounds.append(r.lower_bound)
    return Reference(
        optimum=min(optima) if optima else None,
        bound=max(bounds),
        best=min(plans) if plans else None,
    )


def gap(result: Result, ref: Reference) -> float | None:
    """`T / T_ref - 1` (>= 0), or None without a plan that fits."""
    if not result.fits or result.makespan is None:
        return None
    return max(0.0, result.makespan / ref.value - 1.0)


def median(values: Sequence[float]) -> float | None:
    """The median, or None for no values (the one median of the experiment code)."""
    return statistics.median(values) if values else None


def quantile(values: Sequence[float], q: float) -> float | None:
    """The `q` quantile with linear interpolation (numpy's default), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _labels(results: Iterable[Result], keep) -> list[str]:
    return list(dict.fromkeys(r.label for r in results if keep(r)))


# -- overhead and peak per method per budget ------------------------------------------


def overhead_tables(results: Sequence[Result]) -> list[Table]:
    """Per instance group (a named net, or a random family at one L) and budget:
    each method's median overhead and peak over the group's members."""
    labels = _labels(results, lambda r: not is_bound(r.method))
    cells: dict[tuple[str, int, float], dict[str, list[Result]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for r in results:
        if not is_bound(r.method):
            cells[(r.group, r.n_layers, r.budget_fraction)][r.label].append(r)
    overhead_rows, peak_rows, long_rows = [], [], []
    for (group, n, fraction), per_label in sorted(
        cells.items(), key=lambda kv: (kv[0][0], kv[0][1], -kv[0][2])
    ):
        members = {r.profile for rs in per_label.values() for r in rs}
        base = {"group": group, "n_layers": n, "budget_fraction": fraction, "n": len(members)}
        o_row, p_row = dict(base), dict(base)
        for label in labels:
            rs = per_label.get(label, [])
            fits = [r for r in rs if r.fits]
            o_row[label] = _cell(
                [r.overhead for r in fits if r.overhead is not None], len(rs) - len(fits)
            )
            p_row[label] = _cell(
                [r.peak_bytes / 2**30 for r in fits if r.peak_bytes is not None],
                len(rs) - len(fits),
                fmt="{:.2f}",
            )
        overhead_rows.append(o_row)
        peak_rows.append(p_row)
    for r in results:
        if is_bound(r.method):
            continue
        long_rows.append(
            {
                "group": r.group,
                "profile": r.profile,
                "n_layers": r.n_layers,
                "budget_fraction": r.budget_fraction,
                "budget_gib": r.budget / 2**30,
                "method": r.label,
                "status": r.status,
                "fits": r.fits,
                "overhead": r.overhead,
                "peak_gib": None if r.peak_bytes is None else r.peak_bytes / 2**30,
                "peak_over_budget": None if r.peak_bytes is None else r.peak_bytes / r.budget,
                "solve_seconds": r.solve_seconds,
            }
        )
    head = (
        Column("group", "net / family", right=False),
        Column("n_layers", "L", fmt_int),
        Column("budget_fraction", "budget", fmt_budget),
        Column("n", "nets", fmt_int),
    )
    method_cols = tuple(Column(label, label) for label in labels)
    return [
        Table(
            "overhead",
            "Overhead T / T_ideal - 1 (median over the group's nets)",
            head + method_cols,
            tuple(overhead_rows),
            note=(
                "Budget: static memory + that share of keep-all's activation memory. "
                "'no plan (k)': k nets where the method returned no plan that fits. "
                "Per-net figures: overhead_long.csv."
            ),
        ),
        Table(
            "peak",
            "Peak device memory in GiB (median over the group's nets)",
            head + method_cols,
            tuple(peak_rows),
        ),
        Table(
            "overhead_long",
            "Every plan: overhead and peak",
            (
                Column("profile", "profile", right=False),
                Column("budget_fraction", "budget", fmt_budget),
                Column("budget_gib", "budget GiB", gib),
                Column("method", "method", right=False),
                Column("status", "status", right=False),
                Column("overhead", "overhead", percent),
                Column("peak_gib", "peak GiB", fmt_ratio),
                Column("peak_over_budget", "peak / budget", fmt_ratio),
                Column("solve_seconds", "solve", fmt_seconds),
            ),
            tuple(long_rows),
            extra_csv_keys=("group", "n_layers", "fits"),
            markdown=False,
        ),
    ]


def _cell(values: list[float], failed: int, fmt: str | None = None) -> str:
    """Median of `values`, with the number of members that found no plan."""
    if not values:
        return f"no plan ({failed})" if failed else "-"
    mid = statistics.median(values)
    text = f"{100 * mid:.1f}%" if fmt is None else fmt.format(mid)
    return f"{text} (no plan: {failed})" if failed else text


# -- the greedy's gap to the optimum ----------------------------------------------------


def gap_rows(results: Sequence[Result]) -> list[dict]:
    """One row per instance and heuristic: its gap to the instance's reference."""
    rows = []
    for (profile, fraction), rs in sorted(by_instance(results).items()):
        ref = reference(rs)
        for r in rs:
            if not is_heuristic(r.method) or r.status == "error":
                continue
            rows.append(
                {
                    "group": r.group,
                    "profile": profile,
                    "n_layers": r.n_layers,
                    "budget_fraction": fraction,
                    "method": r.label,
                    "reference": ref.kind,
                    "t_ideal_s": r.t_ideal,
                    "reference_s": ref.value,
                    "best_known_s": ref.best,
                    "makespan_s": r.makespan,
                    "gap": gap(r, ref),
                    "fits": r.fits,
                }
            )
    return rows


def _gap_summary(rows: list[dict], key_fn, key_cols: tuple[Column, ...], name: str, title: str):
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[key_fn(row)].append(row)
    out = []
    for key, members in sorted(groups.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        gaps = [m["gap"] for m in members if m["gap"] is not None]
        row = {col.key: value for col, value in zip(key_cols, key, strict=True)}
        row.update(
            {
                "instances": len(members),
                "median": median(gaps),
                "p90": quantile(gaps, 0.9),
                "max": max(gaps) if gaps else None,
                "within_1pct": sum(1 for g in gaps if g <= 0.01),
                "at_reference": sum(1 for g in gaps if g <= 1e-6),
                "no_plan": len(members) - len(gaps),
            }
        )
        out.append(row)
    return Table(
        name,
        title,
        (
            *key_cols,
            Column("instances", "instances", fmt_int),
            Column("median", "median gap", percent),
            Column("p90", "90th pct", percent),
            Column("max", "max gap", percent),
            Column("within_1pct", "gap <= 1%", fmt_int),
            Column("at_reference", "gap = 0", fmt_int),
            Column("no_plan", "no plan", fmt_int),
        ),
        tuple(out),
    )


def gap_tables(results: Sequence[Result], *, focus: str | None = None) -> list[Table]:
    """Every heuristic's gap summarised by reference kind; the focus method (default: the
    greedy) by budget and net size; how far the lower bound sits below proven optima."""
    focus = greedy() if focus is None else focus
    rows = gap_rows(results)
    ref_col = Column("reference", "reference", right=False)
    by_method = _gap_summary(
        rows,
        lambda r: (r["reference"], r["method"]),
        (ref_col, Column("method", "method", right=False)),
        "gap_by_method",
        "Gap T / T_ref - 1 of every heuristic (T_ref: proven optimum, else lower bound)",
    )
    focus_rows = [r for r in rows if r["method"] == focus]
    by_budget = _gap_summary(
        focus_rows,
        lambda r: (r["reference"], r["budget_fraction"]),
        (ref_col, Column("budget_fraction", "budget", fmt_budget)),
        "gap_greedy_by_budget",
        f"The greedy ({focus}) by budget",
    )
    by_net = _gap_summary(
        focus_rows,
        lambda r: (r["reference"], r["group"]),
        (ref_col, Column("group", "net / family", right=False)),
        "gap_greedy_by_net",
        f"The greedy ({focus}) by net or family",
    )
    per_instance = Table(
        "gap_instances",
        "Every instance",
        (
            Column("profile", "profile", right=False),
            Column("budget_fraction", "budget", fmt_budget),
            Column("method", "method", right=False),
            Column("reference", "reference", right=False),
            Column("gap", "gap", percent),
        ),
        tuple(rows),
        extra_csv_keys=(
            "group",
            "n_layers",
            "t_ideal_s",
            "reference_s",
            "best_known_s",
            "makespan_s",
            "fits",
        ),
        markdown=False,
    )
    return [by_method, by_budget, by_net, gap_pivot(rows), bound_table(results), per_instance]


def gap_pivot(rows: list[dict]) -> Table:
    """Median gap of every heuristic (columns) per net or family (rows): which method
    wins where, e.g. whether a block-aware method wins on nets of repeated blocks."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    cells: dict[tuple[str, str], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    sizes: dict[tuple[str, str], set[int]] = defaultdict(set)
    for r in rows:
        cells[(r["reference"], r["group"])][r["method"]].append(r)
        sizes[(r["reference"], r["group"])].add(r["n_layers"])
    out = []
    for (ref, group), per in sorted(cells.items()):
        lengths = sorted(sizes[(ref, group)])
        row = {
            "reference": ref,
            "group": group,
            "n_layers": str(lengths[0]) if len(lengths) == 1 else f"{lengths[0]}-{lengths[-1]}",
            "instances": max(len(v) for v in per.values()),
        }
        for method in methods:
            mine = per.get(method, [])
            gaps = [m["gap"] for m in mine if m["gap"] is not None]
            row[method] = _cell(gaps, len(mine) - len(gaps))
        out.append(row)
    return Table(
        "gap_by_net_method",
        "Median gap of every heuristic per net or family",
        (
            Column("reference", "reference", right=False),
            Column("group", "net / family", right=False),
            Column("n_layers", "L"),
            Column("instances", "instances", fmt_int),
            *(Column(m, m) for m in methods),
        ),
        tuple(out),
    )


def bound_table(results: Sequence[Result]) -> Table:
    """Where an optimum is proven: how far below it `planopt.lower_bound` sits.

    This calibrates every gap quoted against the bound on nets too large to
    solve exactly: such a gap overstates the true one by about this much.
    """
    rows = []
    for (profile, fraction), rs in sorted(by_instance(results).items()):
        ref = reference(rs)
        lbs = [r for r in rs if is_bound(r.method) and r.lower_bound is not None]
        if ref.optimum is None or not lbs:
            continue
        lb = max(r.lower_bound for r in lbs)
        rows.append(
            {
                "group": rs[0].group,
                "profile": profile,
                "budget_fraction": fraction,
                "optimum_overhead": ref.optimum / rs[0].t_ideal - 1,
                "bound_overhead": lb / rs[0].t_ideal - 1,
                "optimum_over_bound": ref.optimum / lb - 1,
            }
        )
    summary = []
    by_group: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_group[row["group"]].append(row)
        by_group["all"].append(row)
    for group, members in sorted(by_group.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        slack = [m["optimum_over_bound"] for m in members]
        summary.append(
            {
                "group": group,
                "instances": len(members),
                "median": median(slack),
                "p90": quantile(slack, 0.9),
                "max": max(slack),
                "tight": sum(1 for s in slack if s <= 1e-6),
            }
        )
    return Table(
        "bound_tightness",
        "How tight planopt.lower_bound is: T_opt / bound - 1 where the optimum is proven",
        (
            Column("group", "net / family", right=False),
            Column("instances", "instances", fmt_int),
            Column("median", "median", percent),
            Column("p90", "90th pct", percent),
            Column("max", "max", percent),
            Column("tight", "bound = optimum", fmt_int),
        ),
        tuple(summary),
    )


# -- solve time against L -----------------------------------------------------------------


def solve_time_table(results: Sequence[Result]) -> Table:
    """Median and max solve time per method (and back-end) per L."""
    groups: dict[tuple[str, int], list[Result]] = defaultdict(list)
    for r in results:
        if r.status != "error":
            groups[(r.label, r.n_layers)].append(r)
    rows = []
    for (label, n), rs in sorted(groups.items()):
        secs = [r.solve_seconds for r in rs]
        limits = [r.time_limit for r in rs if r.time_limit is not None]
        rows.append(
            {
                "method": label,
                "n_layers": n,
                "solves": len(rs),
                "median_s": median(secs),
                "max_s": max(secs),
                "optimal": sum(1 for r in rs if r.status == Status.OPTIMAL.value),
                "hit_limit": sum(
                    1
                    for r in rs
                    if r.time_limit is not None and r.solve_seconds >= 0.95 * r.time_limit
                ),
                "time_limit_s": max(limits) if limits else None,
            }
        )
    return Table(
        "solve_time",
        "Solve time against the number of layers L",
        (
            Column("method", "method", right=False),
            Column("n_layers", "L", fmt_int),
            Column("solves", "solves", fmt_int),
            Column("median_s", "median", fmt_seconds),
            Column("max_s", "max", fmt_seconds),
            Column("optimal", "proven optimal", fmt_int),
            Column("hit_limit", "hit time limit", fmt_int),
            Column("time_limit_s", "limit", fmt_seconds),
        ),
        tuple(rows),
        note=(
            "Wall time of planopt.solve (model building included) or planopt.lower_bound; "
            "'proven optimal' counts status optimal (for heuristics: a plan at T_ideal)."
        ),
    )


# -- what joint keep/swap/recompute buys ------------------------------------------------------


def joint_rows(results: Sequence[Result]) -> list[dict]:
    """Per instance solved by `exact` and a restricted method: the restricted optimum's
    extra time over the joint one (None when the restricted space has no plan)."""
    rows = []
    joint_methods, restricted_methods = joint_exact(), restricted()
    for (profile, fraction), rs in sorted(by_instance(results).items()):
        joint = [r for r in rs if r.method in joint_methods and r.fits]
        if not joint:
            continue
        best = min(joint, key=lambda r: r.makespan or float("inf"))
        row = {
            "group": best.group,
            "profile": profile,
            "n_layers": best.n_layers,
            "budget_fraction": fraction,
            "joint_overhead": best.overhead,
            "joint_proven": best.status == Status.OPTIMAL.value,
        }
        present = False
        for method in restricted_methods:
            mine = [r for r in rs if r.method == method and r.status != "error"]
            if not mine:
                row[f"{method}_overhead"] = row[f"{method}_extra"] = None
                row[f"{method}_state"] = "not run"
                continue
            present = True
            fits = [r for r in mine if r.fits]
            if not fits:
                row[f"{method}_overhead"] = row[f"{method}_extra"] = None
                row[f"{method}_state"] = "no plan"
                continue
            r = min(fits, key=lambda r: r.makespan or float("inf"))
            row[f"{method}_overhead"] = r.overhead
            row[f"{method}_extra"] = r.makespan / best.makespan - 1 if best.makespan else None
            row[f"{method}_state"] = r.status
        if present:
            rows.append(row)
    return rows


def joint_tables(results: Sequence[Result]) -> list[Table]:
    rows = joint_rows(results)
    spaces = restricted()
    summary = []
    by_budget: dict[float, list[dict]] = defaultdict(list)
    for row in rows:
        by_budget[row["budget_fraction"]].append(row)
    for fraction, members in sorted(by_budget.items(), reverse=True):
        out: dict = {"budget_fraction": fraction, "instances": len(members)}
        out["joint"] = median([m["joint_overhead"] for m in members])
        for method in spaces:
            extra = [m[f"{method}_extra"] for m in members if m[f"{method}_extra"] is not None]
            out[f"{method}_median"] = median(extra)
            out[f"{method}_max"] = max(extra) if extra else None
            out[f"{method}_none"] = sum(1 for m in members if m[f"{method}_state"] == "no plan")
        summary.append(out)
    cols: list[Column] = [
        Column("budget_fraction", "budget", fmt_budget),
        Column("instances", "instances", fmt_int),
        Column("joint", "joint optimum: median overhead", percent),
    ]
    for method, space in spaces.items():
        cols += [
            Column(f"{method}_median", f"{space} only: median extra time", percent),
            Column(f"{method}_max", f"{space}: max extra", percent),
            Column(f"{method}_none", f"{space}: no plan", fmt_int),
        ]
    detail_cols: list[Column] = [
        Column("profile", "profile", right=False),
        Column("budget_fraction", "budget", fmt_budget),
        Column("joint_overhead", "joint overhead", percent),
    ]
    for method, space in spaces.items():
        detail_cols += [
            Column(f"{method}_overhead", f"{space} overhead", percent),
            Column(f"{method}_extra", f"{space} extra", percent),
            Column(f"{method}_state", f"{space} status", fmt_text, right=False),
        ]
    return [
        Table(
            "joint_summary",
            "What joint keep/swap/recompute buys over one mechanism",
            tuple(cols),
            tuple(summary),
            note=(
                "Extra time = T_restricted_optimum / T_joint_optimum - 1 on the same instance "
                "(both from the exact planner). 'no plan': the restricted space cannot fit "
                "the budget at all."
            ),
        ),
        Table(
            "joint_instances",
            "Every instance",
            tuple(detail_cols),
            tuple(rows),
            extra_csv_keys=("group", "n_layers", "joint_proven"),
            markdown=False,
        ),
    ]
