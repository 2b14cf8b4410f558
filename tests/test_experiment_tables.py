"""Tables from sweep results: references, gaps, joint savings, solve times, robustness.

The analysis is checked on hand-made results whose answers are worked out in
the comments, and the robustness study against the simulator run directly on
the perturbed profile.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

import planopt
from planopt.experiment import analysis, robustness
from planopt.experiment.jobs import make_jobs
from planopt.experiment.sweep import Result, SerialExecutor, run_sweep
from planopt.experiment.tables import Column, Table, write_tables
from planopt.report import percent as fmt_pct

LOWER_BOUND = "lower-bound"  # the registered bound method
T_IDEAL = 10.0


def res(
    method: str,
    makespan: float | None,
    *,
    status: str = "feasible",
    profile: str = "net",
    fraction: float = 0.5,
    lower_bound: float | None = None,
    peak: int | None = 100,
    budget: float = 1000.0,
    options: dict | None = None,
    n: int = 8,
    seconds: float = 0.1,
    time_limit: float | None = None,
) -> Result:
    return Result(
        key=f"{profile}-{fraction}-{method}-{options}",
        group="g",
        profile=profile,
        n_layers=n,
        t_ideal=T_IDEAL,
        budget_fraction=fraction,
        budget=budget,
        min_budget=10,
        method=method,
        options=options or {},
        time_limit=time_limit,
        seed=0,
        status=status,
        makespan=makespan,
        peak_bytes=None if makespan is None else peak,
        lower_bound=lower_bound,
        message="",
        solve_seconds=seconds,
    )


# -- references and gaps ---------------------------------------------------------------------


def test_reference_is_the_full_space_optimum_and_ignores_restricted_bounds():
    rs = [
        res("exact", 12.0, status="optimal", lower_bound=12.0),
        res("recompute-only", 15.0, status="optimal", lower_bound=15.0),  # its own space
        res("pooch", 13.5),
        res(LOWER_BOUND, None, status="bound", lower_bound=11.0),
    ]
    ref = analysis.reference(rs)
    assert ref.kind == "optimum" and ref.value == 12.0
    assert ref.bound == 12.0  # exact's bound, not recompute-only's 15
    assert ref.best == 12.0
    [row] = [r for r in analysis.gap_rows(rs) if r["method"] == "pooch"]
    assert row["gap"] == pytest.approx(13.5 / 12.0 - 1)


def test_reference_falls_back_to_the_best_lower_bound():
    rs = [
        res("exact", 14.0, status="feasible", lower_bound=11.0),  # time-limited
        res(LOWER_BOUND, None, status="bound", lower_bound=11.5),
        res("pooch", 13.8),
        res("sqrt-n", None, status="infeasible"),
    ]
    ref = analysis.reference(rs)
    assert ref.kind == "lower bound" and ref.value == 11.5
    rows = {r["method"]: r for r in analysis.gap_rows(rs)}
    assert rows["pooch"]["gap"] == pytest.approx(13.8 / 11.5 - 1)
    assert rows["sqrt-n"]["gap"] is None  # no plan
    assert set(rows) == {"pooch", "sqrt-n"}  # exact and the bound are references


def test_a_plan_at_t_ideal_is_optimal_whoever_found_it():
    rs = [res("pooch", T_IDEAL), res(LOWER_BOUND, None, status="bound", lower_bound=T_IDEAL)]
    assert analysis.reference(rs).optimum == T_IDEAL


def test_a_plan_over_budget_is_no_plan():
    rs = [res("exact", 12.0, status="optimal"), res("pooch", 11.0, peak=2000)]
    [row] = analysis.gap_rows(rs)
    assert row["gap"] is None and not row["fits"]


def test_gap_summary_counts():
    rs = []
    # four instances: greedy gaps 0, 0.5%, 20%, and one without a plan
    for k, greedy in enumerate([12.0, 12.06, 14.4, None]):
        rs.append(res("exact", 12.0, status="optimal", profile=f"n{k}"))
        rs.append(
            res("pooch", greedy, status="feasible" if greedy else "infeasible", profile=f"n{k}")
        )
    by_method = analysis.gap_tables(rs)[0]
    [row] = by_method.rows
    assert row["instances"] == 4 and row["no_plan"] == 1
    assert row["at_reference"] == 1 and row["within_1pct"] == 2
    assert row["median"] == pytest.approx(0.005)
    assert row["max"] == pytest.approx(0.2)


def test_bound_tightness():
    rs = [
        res("exact", 12.0, status="optimal", profile="a"),
        res(LOWER_BOUND, None, status="bound", lower_bound=11.0, profile="a"),
        res("exact", 10.0, status="optimal", profile="b"),
        res(LOWER_BOUND, None, status="bound", lower_bound=10.0, profile="b"),
    ]
    table = analysis.bound_table(rs)
    overall = next(r for r in table.rows if r["group"] == "all")
    assert overall["instances"] == 2 and overall["tight"] == 1
    assert overall["max"] == pytest.approx(12 / 11 - 1)


# -- joint against restricted ------------------------------------------------------------------


def test_joint_rows():
    rs = [
        res("exact", 12.0, status="optimal"),
        res("recompute-only", 15.0, status="optimal"),
        res("swap-only", None, status="infeasible"),
    ]
    [row] = analysis.joint_rows(rs)
    assert row["recompute-only_extra"] == pytest.approx(15 / 12 - 1)
    assert row["swap-only_state"] == "no plan" and row["swap-only_extra"] is None
    [summary, _] = analysis.joint_tables(rs)
    assert summary.rows[0]["swap-only_none"] == 1


# -- solve time --------------------------------------------------------------------------------


def test_solve_time_table_groups_by_method_backend_and_length():
    rs = [
        res(
            "exact",
            12.0,
            status="optimal",
            seconds=1.0,
            n=8,
            options={"backend": "cbc"},
            time_limit=2.0,
        ),
        res(
            "exact",
            12.0,
            status="feasible",
            seconds=2.0,
            n=8,
            options={"backend": "cbc"},
            time_limit=2.0,
            profile="other",
        ),
        res("exact", 12.0, status="optimal", seconds=0.5, n=8),
    ]
    rows = {(r["method"], r["n_layers"]): r for r in analysis.solve_time_table(rs).rows}
    cbc = rows[("exact[cbc]", 8)]
    assert cbc["solves"] == 2 and cbc["median_s"] == 1.5 and cbc["optimal"] == 1
    assert cbc["hit_limit"] == 1
    assert rows[("exact", 8)]["solves"] == 1


# -- table rendering ---------------------------------------------------------------------------


def test_markdown_and_csv(tmp_path):
    table = Table(
        "t",
        "A title",
        (Column("name", "name", right=False), Column("x", "share", fmt_pct)),
        ({"name": "a|b", "x": 0.1234}, {"name": "c", "x": None}),
    )
    md = table.to_markdown()
    assert "| a\\|b | 12.3% |" in md and "| c | - |" in md
    assert "|---|---:|" in md
    paths = write_tables([table], tmp_path, "out", title="Top")
    assert (tmp_path / "out.md").read_text().startswith("# Top")
    with open(tmp_path / "t.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert rows == [{"name": "a|b", "x": "0.1234"}, {"name": "c", "x": ""}]
    assert len(paths) == 2


# -- robustness --------------------------------------------------------------------------------


def test_perturb_scales_each_number_within_the_noise_and_is_deterministic():
    profile = planopt.random_chain(12, seed=2, family="uniform")
    noise = robustness.Noise("n", times=0.1, bandwidth=0.2, sizes=0.05)
    a = robustness.perturb(profile, noise, np.random.default_rng(7))
    b = robustness.perturb(profile, noise, np.random.default_rng(7))
    assert a == b
    for old, new in zip(profile.layers, a.layers, strict=True):
        assert 0.9 <= new.fwd / old.fwd <= 1.1 and 0.9 <= new.bwd / old.bwd <= 1.1
        if old.product_bytes:
            assert abs(new.product_bytes / old.product_bytes - 1) <= 0.05 + 1e-6
    ratio = a.device.h2d_bandwidth / profile.device.h2d_bandwidth
    assert 0.8 <= ratio <= 1.2
    assert a.static_bytes == profile.static_bytes
    same = robustness.perturb(profile, robustness.Noise("zero", 0, 0, 0), np.random.default_rng(1))
    assert same.layers == profile.layers and same.device == profile.device


@pytest.fixture(scope="module")
def swept():
    profiles = [planopt.random_chain(6, seed=s, family="uniform") for s in range(2)]
    jobs = make_jobs(profiles, (0.9, 0.6), ["sqrt-n", "greedy", "all-swap"], time_limit=10)
    results = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    return {p.name: p for p in profiles}, results


def test_rescoring_matches_the_simulator_on_the_perturbed_profile(swept):
    profiles, results = swept
    noise = robustness.Noise("t", times=0.1, bandwidth=0.1, sizes=0.1)
    rows = robustness.robustness_rows(results, profiles, scenarios=[noise], draws=3, seed=5)
    assert rows
    plans = {(r.profile, r.budget_fraction, r.label): r for r in results if r.fits}
    assert {(r["profile"], r["budget_fraction"], r["method"]) for r in rows} == set(plans)
    for row in rows[:12]:
        r = plans[(row["profile"], row["budget_fraction"], row["method"])]
        true = robustness.perturb(
            profiles[row["profile"]],
            noise,
            robustness._rng(profiles[row["profile"]], noise, 5, row["draw"]),
        )
        p = r.plan_object()
        unbound = planopt.Plan(p.actions, p.prefetch_at, p.swap_wait, p.names, None)
        schedule = planopt.simulate(true, unbound, r.budget)
        assert row["makespan_s"] == pytest.approx(schedule.makespan, rel=1e-12)
        assert row["fits"] == schedule.feasible
        assert row["overhead"] == pytest.approx(schedule.overhead, rel=1e-9, abs=1e-12)


def test_without_noise_nothing_changes(swept):
    profiles, results = swept
    rows = robustness.robustness_rows(
        results, profiles, scenarios=[robustness.Noise("none", 0, 0, 0)], draws=2
    )
    assert all(r["fits"] for r in rows)
    for row in rows:
        assert row["makespan_s"] == pytest.approx(row["nominal_makespan_s"], rel=1e-12)
    budget = robustness.budget_table(rows)
    assert all(r["broken_share"] == 0 for r in budget.rows)


def test_advantage_rows():
    rows = []
    for draw, (lead, other) in enumerate([(10.0, 12.0), (10.0, 9.0)]):
        for method, nominal, noisy in (("exact", 10.0, lead), ("pooch", 11.0, other)):
            rows.append(
                {
                    "profile": "p",
                    "budget_fraction": 0.5,
                    "scenario": "s",
                    "draw": draw,
                    "method": method,
                    "nominal_makespan_s": nominal,
                    "makespan_s": noisy,
                }
            )
    pairs = robustness.advantage_rows(rows)
    assert [p["kept"] for p in pairs] == pytest.approx([2.0, -1.0])  # 20% / 10%, -10% / 10%
    assert [p["still_faster"] for p in pairs] == [True, False]


def test_gap_pivot_puts_each_method_in_a_column():
    rs = []
    for k, (greedy, other) in enumerate([(13.2, 12.0), (12.6, None)]):
        rs.append(res("exact", 12.0, status="optimal", profile=f"n{k}"))
        rs.append(res("pooch", greedy, profile=f"n{k}"))
        rs.append(res("blocks", other, profile=f"n{k}", status="feasible" if other else "timeout"))
    pivot = next(t for t in analysis.gap_tables(rs) if t.name == "gap_by_net_method")
    [row] = pivot.rows
    assert row["pooch"] == "7.5%"  # median of 10% and 5%
    assert row["blocks"] == "0.0% (no plan: 1)"
    assert row["instances"] == 2


def test_quantile_matches_numpy():
    rng = np.random.default_rng(3)
    values = list(rng.normal(size=17))
    for q in (0.0, 0.1, 0.5, 0.9, 1.0):
        assert analysis.quantile(values, q) == pytest.approx(float(np.quantile(values, q)))
    assert analysis.quantile([], 0.5) is None
