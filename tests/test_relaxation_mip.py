"""The relaxation's MIP (`solvers.model.relaxation_mip`): a work limit stops it within one
counting step, no stretch of HiGHS's work between two checks outruns the root LP the work
gate pays for, and a bound cut short by its work limit is the same every time."""

from __future__ import annotations

import highspy
import pytest

import planopt
from planopt.bundled import resolve_profile
from planopt.certificate import MIP, T_IDEAL
from planopt.work import WorkMeter
from solvers.model import relaxation_highs, relaxation_mip

RESNET = "resnet50-ops-b128-a100-pcie4-roofline"  # 175 layers, 8,393 rows
# Its MIP cut short raises the LP bound at 50% (GPT-12's did at 70% before the
# relaxation's hanging-run rows, which now give its LP the same bound).
GPT24 = "gpt-24blk-b8-s1024-h100-pcie5-roofline"


def _model(name: str, fraction: float):
    profile = resolve_profile(name)
    model, _ = relaxation_highs._CACHE.get(profile)
    return model, model.coeffs.capacity(planopt.budget_from_fraction(profile, fraction))


def test_a_work_limit_stops_the_root_within_one_step():
    # NOTE (the bug): with HiGHS's sub-MIP heuristics on (as before issue 25, item
    # 12), this MIP made 14,300 LP iterations in about 9 s between two callbacks at
    # its root: one step of 4.8 counts, 8.1 charged against a limit of 4 (and the
    # old count, per callback, did not see them at all). Now: 4.0, in 1.5 s.
    model, capacity = _model(RESNET, 0.4)
    limit = 4.0
    solved = relaxation_mip.solve(model, capacity, limit, float("inf"))
    counter = solved.counter
    assert solved.run.status == highspy.HighsModelStatus.kInterrupt and counter.interrupted
    # every LP iteration HiGHS made was seen at a callback, so was charged
    assert counter.iterations == solved.run.lp_iterations > 0
    # the step past the limit, and the LP HiGHS may finish after the interrupt (seen
    # at its last callback: 2,489 of 4,854 iterations once the relaxation got its
    # hanging-run rows)
    assert limit <= counter.units <= limit + 2 * counter.largest_step
    assert counter.largest_step <= relaxation_mip.root_units(model)
    assert not solved.complete


def test_the_same_work_limit_gives_the_same_bound_and_work():
    profile = resolve_profile(GPT24)
    budget = planopt.budget_from_fraction(profile, 0.5)
    lp = planopt.solve(profile, budget, "lower-bound", relax=True).lower_bound
    runs = []
    for _ in range(2):
        relaxation_highs.clear_cache()
        runs.append(planopt.solve(profile, budget, "lower-bound", work_limit=1.0))
    first, second = runs
    assert first.bound_provenance.source == MIP and not first.bound_provenance.complete
    assert first.lower_bound > lp  # the MIP cut short raised the LP's bound
    assert (first.lower_bound, first.work_used) == (second.lower_bound, second.work_used)
    assert first.bound_provenance.work == second.bound_provenance.work


def test_a_share_below_the_root_lp_keeps_the_lp_bound_and_runs_no_mip(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("ran a MIP the work left cannot pay the root LP of")

    profile = resolve_profile(RESNET)
    budget = planopt.budget_from_fraction(profile, 0.4)
    model, _ = relaxation_highs._CACHE.get(profile)
    lp_only = model.build_units() + model.lp_units() + relaxation_mip.lp_surcharge(model)
    monkeypatch.setattr(relaxation_mip, "solve", never)
    bound, cert = relaxation_highs.highs_bound(
        profile, budget, mip=True, work_limit=lp_only + 0.5 * relaxation_mip.root_units(model)
    )
    assert cert.source == "lp" and "root LP" in cert.detail
    assert bound == relaxation_highs.highs_bound(profile, budget)[0]


def test_each_step_is_charged_by_what_highs_did_since_the_last():
    # NOTE (the rule, issue 25, item 12, second fit): presolve by rows at the first
    # callback, the root LP by its iterations and rows times them (third fit; by its
    # iterations alone before), a later LP re-solve by columns, by rows times its first
    # CUT_ITERATIONS iterations (half that at a node) and by its iterations, a callback
    # with no LP iterations by rows. Before, every re-solve was charged by rows alone
    # (a GPT-48 cut round 0.10 units for 0.17-0.19 s).
    m = relaxation_mip
    rows, cols = 1000, 400
    counter = m.MipCounter(rows=rows, cols=cols, limit=None)
    calls = [(0, 0), (0, 300), (0, 300), (0, 350), (0, 650), (3, 660), (5, 660)]
    steps = []
    for nodes, iterations in calls:
        before = counter.units
        assert counter.on_interrupt(nodes, iterations) is False
        steps.append(counter.units - before)

    def resolve(iterations: int, share: float = 1.0) -> float:
        cut = m.CUT_UNITS_PER_COLUMN * cols
        cut += m.CUT_UNITS_PER_ROW_ITERATION * rows * min(iterations, m.CUT_ITERATIONS)
        return share * cut + m.ITERATION_UNITS * iterations

    expected = [
        (m.PRESOLVE_UNITS_PER_ROW + m.CHECK_UNITS_PER_ROW) * rows,  # presolve
        (m.ROOT_ITERATION_UNITS + m.ROOT_UNITS_PER_ROW_ITERATION * rows) * 300,  # the root LP
        m.CHECK_UNITS_PER_ROW * rows,  # probing: no LP iterations
        resolve(50),  # a cut round
        resolve(300),  # a longer one: rows times its first CUT_ITERATIONS only
        resolve(10, m.NODE_SHARE),  # a node's LP
        m.CHECK_UNITS_PER_ROW * rows,
    ]
    assert steps == pytest.approx(expected)
    assert counter.iterations == 660 and counter.callbacks == len(calls)
    assert counter.largest_step == pytest.approx(max(expected))


def test_the_iterations_after_the_last_callback_are_charged():
    # NOTE (the bug): this MIP solves its root LP (404 iterations) and finishes with
    # no callback after it, so it was charged its presolve alone; on random 1,000
    # layers, 0.008 units for 1.07 CPU-seconds.
    profile = planopt.random_chain(80, seed=0, family="mixed", version=2)
    model, _ = relaxation_highs._CACHE.get(profile)
    capacity = model.coeffs.capacity(planopt.budget_from_fraction(profile, 0.4))
    solved = relaxation_mip.solve(model, capacity, 1e9, float("inf"))
    counter = solved.counter
    assert solved.complete and solved.run.lp_iterations > 0
    assert counter.iterations == solved.run.lp_iterations
    m = relaxation_mip
    per_iteration = m.ROOT_ITERATION_UNITS + m.ROOT_UNITS_PER_ROW_ITERATION * model.rows
    assert counter.units >= per_iteration * solved.run.lp_iterations
    again = relaxation_mip.solve(model, capacity, 1e9, float("inf")).counter
    assert (again.units, again.callbacks) == (counter.units, counter.callbacks)


def test_settle_charges_nothing_when_the_callbacks_saw_every_iteration():
    counter = relaxation_mip.MipCounter(rows=100, cols=40)
    counter.on_interrupt(0, 0)
    counter.on_interrupt(0, 80)
    units, callbacks = counter.units, counter.callbacks
    counter.settle(0, 80)
    assert (counter.units, counter.callbacks) == (units, callbacks)
    expected = counter.step(15)  # 15 iterations after the last callback: a cut round
    counter.settle(0, 95)
    assert counter.units - units == pytest.approx(expected) and expected > 0
    assert counter.iterations == 95 and counter.callbacks == callbacks + 1


def test_an_error_in_the_callback_stops_the_solve_and_is_raised():
    # (ctypes would print and drop it, and the MIP would run on unlimited)
    from solvers.backends.highs_capi import solve_mip

    model, _ = _model(RESNET, 0.4)
    calls = []

    def failing(nodes, iterations):
        calls.append(iterations)
        raise ValueError("counter failed")

    lower = model.lp.row_lower_
    with pytest.raises(ValueError, match="counter failed"):
        solve_mip(model.lp, model.integer_cols, lower, model.lp.row_upper_, {}, failing)
    assert len(calls) == 1


def test_the_sub_mips_are_off_only_under_a_work_limit(monkeypatch):
    from solvers.backends.highs_capi import MipRun

    seen = []

    def spy(lp, cols, lower, upper, options, on_interrupt):
        seen.append(dict(options))
        return MipRun(highspy.HighsModelStatus.kInterrupt, float("nan"), 0, 0)

    monkeypatch.setattr(relaxation_mip, "solve_mip", spy)
    model, capacity = _model(RESNET, 0.4)
    relaxation_mip.solve(model, capacity, 1.0, 5.0)
    relaxation_mip.solve(model, capacity, None, float("inf"))
    limited, unlimited = seen
    assert limited == {**relaxation_mip.OPTIONS, "time_limit": 5.0}
    assert limited["mip_heuristic_run_rins"] is False and unlimited == {}


def test_the_root_lp_is_charged_by_its_iterations_and_rows_times_them():
    # NOTE (third fit, after the hanging-run rows): a root-LP iteration costs more on
    # more rows (90 us on 7,800 rows, 156 us on 16,300, ~170 us on 26,000); charged by
    # iterations alone, GPT-48's root LP read 1.23 CPU-s a unit and random 300's 0.71.
    m = relaxation_mip
    steps = []
    for rows in (4000, 8000):
        counter = m.MipCounter(rows=rows, cols=rows // 2)
        counter.on_interrupt(0, 0)
        steps.append(counter.step(1000))
        per_iteration = m.ROOT_ITERATION_UNITS + m.ROOT_UNITS_PER_ROW_ITERATION * rows
        assert steps[-1] == pytest.approx(1000 * per_iteration)
    assert steps[1] > 1.2 * steps[0]  # the same iterations cost more on twice the rows


def test_the_lp_before_the_mip_is_charged_by_rows_squared_and_hanging_columns():
    # NOTE (the bug, third fit): the hanging-run rows doubled the cold LP on GPT-48
    # per operator (0.73 s, 5,159 iterations, against 0.33 s and 3,459 on random 600
    # of as many rows), and lower-bound charged it by rows alone: 0.40 units for
    # 0.87 CPU-s at work limit 1. On the MIP's path the LP now also pays
    # `lp_surcharge`; the LP-only bound (blocks, lns) is charged as before.
    profile = resolve_profile(GPT24)
    budget = planopt.budget_from_fraction(profile, 0.4)
    model, _ = relaxation_highs._CACHE.get(profile)
    rows = model.rows
    hanging = sum(1 for slope in model.coeffs.hang_slope if slope > 0)
    assert hanging > 0
    surcharge = relaxation_mip.lp_surcharge(model)
    assert surcharge == pytest.approx(
        rows * rows * relaxation_mip.LP_UNITS_PER_ROW_SQUARED
        + rows * hanging * relaxation_mip.LP_UNITS_PER_ROW_HANG
    )
    lp_only = model.build_units() + model.lp_units()
    meter = WorkMeter()
    relaxation_highs.highs_bound(profile, budget, meter=meter)
    assert meter.raw_used() == pytest.approx(lp_only)
    # a share that pays the LP by rows but not its surcharge: no LP on the MIP's path
    bound, cert = relaxation_highs.highs_bound(
        profile, budget, mip=True, work_limit=lp_only + 0.5 * surcharge
    )
    assert cert.source == T_IDEAL and bound == profile.t_ideal
