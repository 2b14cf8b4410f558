"""Write a sweep's tables (CSV + Markdown) and figures (PNG + SVG) to folders.

One function, `write_outputs`, shared by `planopt experiment sweep` (a
user's own profiles) and `planopt experiment suite` (the report's), so both
produce the same files:

    <tables>/results.csv                      every result, one row each
    <tables>/overhead.md   (+ overhead.csv, peak.csv, overhead_long.csv)
    <tables>/gap.md        (+ gap_*.csv, bound_tightness.csv)
    <tables>/solve_time.md (+ solve_time.csv)
    <tables>/joint.md      (+ joint_*.csv)      when exact and restricted methods ran
    <tables>/robustness.md (+ robustness_*.csv) when draws > 0
    <figures>/overhead_vs_budget, gap_distribution, solve_time_vs_layers, robustness
                                              each one the results can show; the
                                              summary's `figures_skipped` says why not
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from planopt.budget import keep_all_peak
from planopt.experiment import analysis, robustness
from planopt.experiment.roles import greedy, restricted
from planopt.experiment.sweep import Result
from planopt.experiment.tables import write_rows_csv, write_tables
from planopt.profile import Profile


def unique(results: Sequence[Result]) -> list[Result]:
    """Results with duplicate jobs (same cache key) dropped, first kept."""
    seen: dict[str, Result] = {}
    for r in results:
        seen.setdefault(r.key, r)
    return list(seen.values())


def write_outputs(
    results: Sequence[Result],
    profiles: Mapping[str, Profile],
    tables_dir: str | Path,
    figures_dir: str | Path | None,
    *,
    draws: int = 20,
    noise_seed: int = 0,
    scenarios: Sequence[robustness.Noise] = robustness.DEFAULT_SCENARIOS,
    overhead_profiles: Sequence[str] | None = None,
    time_results: Sequence[Result] | None = None,
    time_note: str = "",
    preamble: str = "",
) -> dict:
    """Write every table and (with `figures_dir`) figure; returns the headline figures,
    with `files` (every file written) and `figures_skipped` ([figure, reason] for each
    figure the results cannot show).

    `time_results` (default: all) are the results the solve-time table and
    figure use (results naming a `backend` option get the figure's second
    panel), `time_note` says which they are; `overhead_profiles` picks the
    panels of the overhead figure.
    """
    results = unique(results)
    tables_dir = Path(tables_dir)
    written: list[Path] = [
        write_rows_csv((r.to_row() for r in results), tables_dir / "results.csv")
    ]
    written += write_tables(
        analysis.overhead_tables(results),
        tables_dir,
        "overhead",
        title="Overhead and peak per method per budget",
        preamble=preamble,
    )
    written += write_tables(
        analysis.gap_tables(results),
        tables_dir,
        "gap",
        title="The heuristics' gap to the optimum",
        preamble=preamble,
    )
    timed = unique(time_results) if time_results is not None else results
    written += write_tables(
        [analysis.solve_time_table(timed)],
        tables_dir,
        "solve_time",
        title="Solve time against L",
        preamble=(preamble + "\n\n" + time_note).strip(),
    )
    joint = analysis.joint_tables(results)
    if joint[1].rows:
        written += write_tables(
            joint,
            tables_dir,
            "joint",
            title="Joint keep/swap/recompute against one mechanism",
            preamble=preamble,
        )
    rows: list[dict] = []
    advantage: list[dict] = []
    if draws > 0:
        rows = robustness.robustness_rows(
            results, profiles, scenarios=scenarios, draws=draws, seed=noise_seed
        )
        advantage = robustness.advantage_rows(rows)
        noise = ", ".join(
            f"{s.name} (times {s.times:.0%}, bandwidths {s.bandwidth:.0%}, sizes {s.sizes:.0%})"
            for s in scenarios
        )
        written += write_tables(
            robustness.robustness_tables(rows),
            tables_dir,
            "robustness",
            title="Robustness: plans re-scored on noisy profiles",
            preamble=(
                f"{preamble}\n\n{draws} draws per scenario and plan, seed {noise_seed}: {noise}. "
                "Every number is scaled by its own factor drawn uniformly in [1 - r, 1 + r]."
            ).strip(),
        )
    skipped: list[tuple[str, str]] = []
    if figures_dir is not None:
        figures, skipped = write_figures(
            results,
            timed,
            rows,
            advantage,
            figures_dir,
            overhead_profiles=overhead_profiles,
            profiles=profiles,
        )
        written += figures
    headline = headline_figures(results, timed, rows, advantage)
    headline["files"] = [str(p) for p in written]
    headline["figures_skipped"] = [list(pair) for pair in skipped]
    return headline


def write_figures(
    results: Sequence[Result],
    timed: Sequence[Result],
    rows: Sequence[dict],
    advantage: Sequence[dict],
    folder: str | Path,
    *,
    overhead_profiles: Sequence[str] | None = None,
    profiles: Mapping[str, Profile] | None = None,
) -> tuple[list[Path], list[tuple[str, str]]]:
    """Every figure the results can show, and (figure, reason) for each one they cannot.

    NOTE: a figure is never dropped silently: the reason goes to the sweep's summary
    (`figures_skipped`), which the command line prints next to the files written.
    """
    from planopt.experiment import plots

    Path(folder).mkdir(parents=True, exist_ok=True)  # the output folder the caller fills
    drawers = {
        "overhead_vs_budget": lambda: plots.overhead_vs_budget(
            results,
            profiles=overhead_profiles,
            min_fractions=_min_fractions(results, profiles or {}),
        ),
        "gap_distribution": lambda: plots.gap_distribution(analysis.gap_rows(results)),
        "solve_time_vs_layers": lambda: plots.solve_time_vs_layers(timed),
        "robustness": lambda: plots.robustness_figure(rows, advantage),
    }
    written: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for stem, draw in drawers.items():
        try:
            fig = draw()
        except plots.NothingToDraw as why:
            skipped.append((stem, str(why)))
            continue
        written += plots.save_both(fig, folder, stem)
    return written, skipped


def _min_fractions(results: Sequence[Result], profiles: Mapping[str, Profile]) -> dict:
    """Each profile's minimum budget as a budget fraction (where the overhead figure
    shades), from the profile itself: results at a single budget cannot place it."""
    out: dict[str, float] = {}
    for r in results:
        profile = profiles.get(r.profile)
        if profile is None or r.profile in out:
            continue
        activation = keep_all_peak(profile) - profile.static_bytes
        if activation > 0:
            out[r.profile] = (r.min_budget - profile.static_bytes) / activation
    return out


def headline_figures(
    results: Sequence[Result],
    timed: Sequence[Result],
    rows: Sequence[dict],
    advantage: Sequence[dict],
) -> dict:
    """The numbers the report quotes, computed from the same results as the tables."""
    out: dict = {}
    gaps = [r for r in analysis.gap_rows(results) if r["method"] == greedy()]
    for kind in ("optimum", "lower bound"):
        mine = [r for r in gaps if r["reference"] == kind]
        found = [r["gap"] for r in mine if r["gap"] is not None]
        out[f"greedy_vs_{kind.replace(' ', '_')}"] = {
            "instances": len(mine),
            "median": analysis.median(found),
            "p90": analysis.quantile(found, 0.9),
            "max": max(found) if found else None,
            "within_1pct": sum(1 for g in found if g <= 0.01),
            "no_plan": len(mine) - len(found),
        }
    bound = analysis.bound_table(results)
    overall = [row for row in bound.rows if row["group"] == "all"]
    out["bound_slack"] = overall[0] if overall else None
    per_method = {}
    for r in timed:
        if r.status != "error":
            per_method.setdefault(r.label, {}).setdefault(r.n_layers, []).append(r)
    out["solve_time"] = {
        label: {
            n: {
                "median_s": analysis.median([r.solve_seconds for r in rs]),
                "optimal": sum(1 for r in rs if r.status == "optimal"),
                "solves": len(rs),
            }
            for n, rs in sorted(by_n.items())
        }
        for label, by_n in per_method.items()
    }
    joint = analysis.joint_rows(results)
    for method in restricted():
        extra = [j[f"{method}_extra"] for j in joint if j[f"{method}_extra"] is not None]
        out[f"joint_over_{method}"] = {
            "instances": len(joint),
            "median_extra": analysis.median(extra),
            "max_extra": max(extra) if extra else None,
            "share_over_1pct": (sum(1 for e in extra if e > 0.01) / len(extra)) if extra else None,
            "no_plan": sum(1 for j in joint if j[f"{method}_state"] == "no plan"),
        }
    broken: dict = {}
    for row in rows:
        cell = broken.setdefault(row["scenario"], {}).setdefault(row["method"], [0, 0])
        cell[0] += not row["fits"]
        cell[1] += 1
    out["budget_broken_share"] = {
        s: {m: b / n for m, (b, n) in per.items()} for s, per in broken.items()
    }
    kept: dict = {}
    for a in advantage:
        kept.setdefault(a["scenario"], {}).setdefault(
            f"{a['leader']} over {a['method']}", []
        ).append(a["kept"])
    out["advantage_kept_median"] = {
        s: {pair: analysis.median(v) for pair, v in per.items()} for s, per in kept.items()
    }
    return out
