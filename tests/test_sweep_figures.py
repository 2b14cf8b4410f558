"""The sweep's figures at any scale: every figure drawn or its absence explained.

Synthetic results (hand-made `Result`s whose overheads we choose) cover the
shapes a sweep can take: one, two and three budgets, a net that lacks a
budget, nets where nothing fits. Each figure is built under
`warnings.simplefilter("error")` (and pytest's `recwarn` checks that nothing
was even recorded), and its axes are read back from the matplotlib objects:
limits, tick positions, lines, texts. No image is compared.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

import planopt
from planopt import cli
from planopt.experiment import plots
from planopt.experiment.analysis import gap_rows
from planopt.experiment.jobs import make_jobs
from planopt.experiment.outputs import _min_fractions, write_figures, write_outputs
from planopt.experiment.robustness import advantage_rows, robustness_rows
from planopt.experiment.sweep import Result, SerialExecutor, run_sweep

pytest.importorskip("matplotlib")

STATIC = 100e6  # bytes
ACTIVATION = 200e6  # keep-all activation bytes: budget = STATIC + fraction * ACTIVATION
MIN_FRACTION = 0.25


def result(profile, fraction, method, overhead=None, *, status=None, bound=None, seconds=0.01):
    """One synthetic result: `overhead` None means no plan that fits; `bound` is a
    lower-bound job's overhead."""
    budget = STATIC + fraction * ACTIVATION
    makespan = None if overhead is None else 1.0 + overhead
    if method == "lower-bound":
        status = "bound" if bound is not None else "infeasible"
    elif status is None:
        status = "feasible" if overhead is not None else "infeasible"
    return Result(
        key=f"{profile}/{fraction}/{method}",
        group="synthetic",
        profile=profile,
        n_layers=6,
        t_ideal=1.0,
        budget_fraction=fraction,
        budget=budget,
        min_budget=int(STATIC + MIN_FRACTION * ACTIVATION),
        method=method,
        options={},
        time_limit=10.0,
        seed=0,
        status=status,
        makespan=makespan,
        peak_bytes=None if makespan is None else int(0.9 * budget),
        lower_bound=None if bound is None else 1.0 + bound,
        message="",
        solve_seconds=seconds,
    )


def net(name, overheads, *, bound=True):
    """Results of one net: `overheads` maps budget fraction -> {method: overhead or None};
    exact's overhead is the optimum and, with `bound`, the lower bound is 80% of it."""
    out = []
    for fraction, per_method in overheads.items():
        for method, overhead in per_method.items():
            status = "optimal" if method == "exact" and overhead is not None else None
            out.append(result(name, fraction, method, overhead, status=status))
        optimum = per_method.get("exact")
        if bound and optimum is not None:
            out.append(result(name, fraction, "lower-bound", bound=0.8 * optimum))
    return out


GOOD = {0.9: {"exact": 0.0, "pooch": 0.0, "sqrt-n": 0.02}}
GOOD |= {0.7: {"exact": 0.01, "pooch": 0.03, "sqrt-n": 0.2}}
GOOD |= {0.5: {"exact": 0.2, "pooch": 3.5, "sqrt-n": None}}
NOTHING = {f: {"exact": None, "pooch": None, "sqrt-n": None} for f in (0.9, 0.7, 0.5)}

SHAPES = {
    "one budget": net("a", {0.7: GOOD[0.7]}) + net("b", {0.7: GOOD[0.7]}),
    "two budgets": net("a", {f: GOOD[f] for f in (0.9, 0.7)}),
    "three budgets": net("a", GOOD) + net("b", GOOD),
    # b was swept at 0.9 and 0.7 only: 0.5 lies below its minimum budget.
    "a net lacks a budget": net("a", GOOD) + net("b", {f: GOOD[f] for f in (0.9, 0.7)}),
    "one net fits nowhere": net("a", GOOD) + net("b", NOTHING),
    "nothing fits anywhere": net("a", NOTHING) + net("b", NOTHING),
}


def strict(draw, *args, **kwargs):
    """`draw(...)` with every warning an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return draw(*args, **kwargs)


def _lines_y(ax) -> list[float]:
    return [float(y) for line in ax.lines for y in line.get_ydata()]


def check_overhead_axis(ax, largest: float) -> None:
    """From 0 to a little above the largest value: no negative tick, room above the top
    marker (at most 96% of the axis height, in the axis's own symlog coordinates)."""
    low, high = ax.get_ylim()
    assert low == 0
    visible = [t for t in ax.get_yticks() if low <= t <= high]
    assert visible and min(visible) >= 0
    assert high > largest
    to_axis = ax.yaxis.get_transform().transform
    assert (to_axis(largest) - to_axis(low)) / (to_axis(high) - to_axis(low)) <= 0.96


# -- overhead against budget ---------------------------------------------------------------


@pytest.mark.parametrize("shape", [s for s in SHAPES if s != "nothing fits anywhere"])
def test_every_net_gets_a_panel_at_any_number_of_budgets(shape, recwarn):
    results = SHAPES[shape]
    fig = strict(plots.overhead_vs_budget, results)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    names = sorted({r.profile for r in results})
    assert [ax.get_title().split(" ")[0] for ax in panels] == names
    largest = max(y for ax in panels for y in _lines_y(ax))
    for ax in panels:
        check_overhead_axis(ax, largest)
    assert len(recwarn) == 0


def test_each_point_of_a_net_is_drawn_where_it_was_measured():
    fig = strict(plots.overhead_vs_budget, SHAPES["a net lacks a budget"])
    panel_b = next(ax for ax in fig.axes if ax.get_title().startswith("b "))
    texts = {t.get_text() for t in fig.legends[0].texts}
    assert {"exact", "pooch (greedy)", "sqrt-n", "lower bound"} <= texts
    pooch = next(
        line
        for line in panel_b.lines
        if line.get_color() == plots.method_style("pooch")["color"] and len(line.get_xdata())
    )
    assert list(pooch.get_xdata()) == [70, 90]
    assert list(pooch.get_ydata()) == pytest.approx([3, 0])


def test_the_overhead_axis_has_no_negative_tick_and_room_above_the_top_point():
    results = net("a", {0.9: {"pooch": 0.0}, 0.7: {"pooch": 0.2}, 0.5: {"pooch": 3.5}})
    fig = strict(plots.overhead_vs_budget, results)
    check_overhead_axis(fig.axes[0], 350)
    # Everything below 1%: the axis still runs to 1% (two ticks, not "-0.02%").
    fig = strict(plots.overhead_vs_budget, net("a", {0.9: {"pooch": 0.0}, 0.7: {"pooch": 0.004}}))
    ax = fig.axes[0]
    check_overhead_axis(ax, 0.4)
    assert [t for t in ax.get_yticks() if 0 <= t <= ax.get_ylim()[1]] == [0, 1]


def test_a_net_where_nothing_fits_says_so_in_its_panel():
    fig = strict(plots.overhead_vs_budget, SHAPES["one net fits nowhere"])
    panel_b = next(ax for ax in fig.axes if ax.get_title().startswith("b"))
    (minimum,) = panel_b.lines  # only the minimum budget's line
    assert list(minimum.get_xdata()) == pytest.approx([100 * MIN_FRACTION] * 2)
    assert any("no method found a plan" in t.get_text() for t in panel_b.texts)


def test_one_budget_places_the_minimum_budget_from_the_profile():
    results = net("a", {0.7: GOOD[0.7]})
    fig = strict(plots.overhead_vs_budget, results)
    assert not fig.axes[0].patches  # one budget cannot place the shading by itself
    fig = strict(plots.overhead_vs_budget, results, min_fractions={"a": MIN_FRACTION})
    (shade,) = fig.axes[0].patches
    assert shade.get_x() + shade.get_width() == pytest.approx(100 * MIN_FRACTION)
    # Two budgets place it from the results: the same place.
    fig = strict(plots.overhead_vs_budget, SHAPES["two budgets"])
    (shade,) = fig.axes[0].patches
    assert shade.get_x() + shade.get_width() == pytest.approx(100 * MIN_FRACTION)


def test_nothing_to_draw_is_an_explained_refusal():
    with pytest.raises(plots.NothingToDraw, match="no net has a plan that fits"):
        strict(plots.overhead_vs_budget, net("a", NOTHING, bound=False))


# -- the other figures ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", list(SHAPES))
def test_gap_and_solve_time_figures_draw_every_shape_without_warnings(shape, recwarn):
    results = SHAPES[shape]
    rows = gap_rows(results)
    fig = strict(plots.gap_distribution, rows)
    for ax, kind in zip(fig.axes[:2], ("optimum", "lower bound"), strict=True):
        mine = [r for r in rows if r["reference"] == kind]
        if not mine:  # an empty panel says why, and has no legend to warn about
            assert ax.get_legend() is None and ax.texts
            continue
        # Every method keeps its legend entry, even one without a single plan.
        assert len(ax.get_legend().texts) == len({r["method"] for r in mine})
        low, high = ax.get_xlim()
        assert low == 0 and min(t for t in ax.get_xticks() if low <= t <= high) >= 0
        gaps = [100 * r["gap"] for r in mine if r["gap"] is not None]
        assert high > max(gaps, default=0)
    fig = strict(plots.solve_time_vs_layers, results)
    assert len(fig.axes) == 1 and fig.axes[0].get_legend() is not None
    assert len(recwarn) == 0


def test_no_plan_anywhere_lists_every_method_as_without_plan():
    rows = gap_rows(SHAPES["nothing fits anywhere"])
    assert {r["reference"] for r in rows} == {"lower bound"}
    fig = strict(plots.gap_distribution, rows)
    left, right = fig.axes[:2]
    assert any("no instance with a proven optimum" in t.get_text() for t in left.texts)
    texts = sorted(t.get_text() for t in right.get_legend().texts)
    assert texts == ["pooch (greedy) (no plan on 6 of 6)", "sqrt-n (no plan on 6 of 6)"]


def test_a_net_solved_everywhere_explains_the_empty_lower_bound_panel():
    fig = strict(plots.gap_distribution, gap_rows(SHAPES["three budgets"]))
    right = fig.axes[1]
    assert right.get_legend() is None
    assert any("every instance has a proven optimum" in t.get_text() for t in right.texts)
    with pytest.raises(plots.NothingToDraw, match="no heuristic ran"):
        plots.gap_distribution([])


def test_the_back_end_panel_alone_draws_one_panel():
    results = [_with_backend(r) for r in SHAPES["two budgets"] if r.method == "exact"]
    fig = strict(plots.solve_time_vs_layers, results)
    (ax,) = fig.axes
    assert ax.get_title() == "the exact method on each back-end"
    assert [t.get_text() for t in ax.get_legend().texts] == ["exact[highs]"]


def _with_backend(r: Result) -> Result:
    return dataclasses.replace(r, options={"backend": "highs"}, key=r.key + "/highs")


@pytest.fixture(scope="module")
def greedy_only_sweep():
    profiles = [planopt.random_chain(6, seed=s, family="uniform") for s in range(2)]
    jobs = make_jobs(profiles, (1.0, 0.7), ["greedy", "sqrt-n", "all-swap"], time_limit=10)
    results = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    return {p.name: p for p in profiles}, results


def test_robustness_without_exact_measures_the_greedys_advantage(greedy_only_sweep, recwarn):
    profiles, results = greedy_only_sweep
    rows = robustness_rows(results, profiles, draws=2)
    advantage = advantage_rows(rows)
    assert advantage and {a["leader"] for a in advantage} == {"pooch"}
    fig = strict(plots.robustness_figure, rows, advantage)
    right = fig.axes[1]
    rivals = {a["method"] for a in advantage}
    assert [t.get_text() for t in right.get_yticklabels()] == [
        f"over {m}" for m in sorted(rivals, key=plots._order)
    ]
    assert "pooch (greedy)'s advantage" in right.get_title()
    with pytest.raises(plots.NothingToDraw, match="no plan was re-scored"):
        plots.robustness_figure([], [])
    assert len(recwarn) == 0


# -- what the sweep writes and says ----------------------------------------------------------


def test_write_figures_draws_or_explains_every_figure(tmp_path, recwarn):
    results = SHAPES["nothing fits anywhere"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        written, skipped = write_figures(results, results, [], [], tmp_path)
    drawn = sorted({p.stem for p in written})
    assert drawn == ["gap_distribution", "solve_time_vs_layers"]
    assert [name for name, _ in skipped] == ["overhead_vs_budget", "robustness"]
    assert all(reason for _, reason in skipped)
    assert len(recwarn) == 0


def test_sweep_at_two_budgets_draws_the_overhead_figure_and_says_what_it_skips(
    tmp_path, capsys, recwarn
):
    out = tmp_path / "sweep"
    argv = ["experiment", "sweep", "--random", "uniform:6:1", "--budgets", "90%", "70%"]
    argv += ["--methods", "pooch", "sqrt-n", "--draws", "0", "--no-cache", "--quiet"]
    code = cli.main([*argv, "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"wrote {out / 'figures' / 'overhead_vs_budget.png'}" in captured.out
    skipped = [line for line in captured.out.splitlines() if line.startswith("no figure ")]
    assert skipped == [
        "no figure robustness: no plan was re-scored on noisy profiles (draws = 0, or no "
        "method found a plan that fits)"
    ]
    assert "No artists" not in captured.err
    assert not [w for w in recwarn if "legend" in str(w.message)]


def test_write_outputs_reports_skipped_figures_and_places_the_minimum_budget(tmp_path):
    profile = planopt.random_chain(6, seed=1, family="uniform")
    jobs = make_jobs([profile], (0.9,), ["pooch"], time_limit=10, bound=False)
    results = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    headline = write_outputs(
        results, {profile.name: profile}, tmp_path / "t", tmp_path / "f", draws=0
    )
    assert [name for name, _ in headline["figures_skipped"]] == ["robustness"]
    assert (tmp_path / "f" / "overhead_vs_budget.png").is_file()
    # One budget: the shading comes from the profile, where the minimum budget lies.
    fraction = _min_fractions(results, {profile.name: profile})[profile.name]
    assert planopt.budget_from_fraction(profile, fraction) == pytest.approx(
        planopt.min_budget(profile)
    )
