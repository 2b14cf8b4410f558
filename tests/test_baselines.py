"""Baselines: each plan has the structure its rule says and fits whenever the method says so."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import budgets, profiles

import planopt
from planopt import Device, Layer, Profile, SolverOptionError, simulate
from planopt.budget import keep_all_peak, min_budget
from planopt.plan import KEEP, RECOMPUTE, SWAP
from planopt.problem import Problem
from planopt.result import Status
from solvers import baselines, pooch

SMALL = settings(max_examples=60, deadline=None)
METHODS = {
    "keep-all": baselines.keep_all,
    "all-swap": baselines.all_swap,
    "sqrt-n": baselines.sqrt_n,
    "superneurons": baselines.superneurons,
    "pooch": pooch.pooch,
}


def problem_for(profile: Profile, budget: float) -> Problem:
    return Problem(profile, budget, min_budget(profile))


def chain(sizes, fwd=1.0, bwd=1.0, bandwidth=4.0, names=None) -> Profile:
    names = names or [f"l{i}" for i in range(len(sizes))]
    return Profile(
        "hand",
        Device("d", bandwidth, bandwidth, 0.0),
        0,
        tuple(Layer.v1(n, fwd, bwd, s) for n, s in zip(names, sizes, strict=True)),
    )


# -- the conformance property every method shares ---------------------------


@SMALL
@pytest.mark.parametrize("method", sorted(METHODS))
@given(data=st.data())
def test_a_feasible_answer_fits_when_re_simulated(method, data):
    profile = data.draw(profiles(1, 7))
    budget = data.draw(budgets(profile))
    out = METHODS[method](problem_for(profile, budget))
    if out.status in (Status.FEASIBLE, Status.OPTIMAL):
        schedule = simulate(profile, out.plan, budget)  # independent re-score, validates too
        assert schedule.peak_bytes <= budget
    else:
        # `infeasible` only when proven: a fixed rule's one plan does not fit, or the
        # budget is below min_budget; the searching ones (sqrt-n, the greedy) otherwise
        # say `no plan found`
        proven = method in ("keep-all", "all-swap", "superneurons") or budget < min_budget(profile)
        assert out.status is (Status.INFEASIBLE if proven else Status.NO_PLAN), out.message
        assert out.plan is None
        assert "budget" in out.message


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_is_registered_and_solves_through_the_api(method):
    profile = planopt.bundled_profile("vgg16-b128-pipedream")
    solution = planopt.solve(profile, keep_all_peak(profile), method)
    assert solution.status in (Status.FEASIBLE, Status.OPTIMAL)
    assert solution.schedule.feasible


# -- keep-all and all-swap ------------------------------------------------------


@SMALL
@given(data=st.data())
def test_keep_all_is_feasible_exactly_when_its_peak_fits(data):
    profile = data.draw(profiles(1, 7))
    budget = data.draw(budgets(profile))
    out = baselines.keep_all(problem_for(profile, budget))
    assert (out.status is Status.FEASIBLE) == (keep_all_peak(profile) <= budget)
    if out.plan is not None:
        assert set(out.plan.actions) == {KEEP}


@SMALL
@given(profiles(1, 7))
def test_all_swap_swaps_all_but_the_last_and_prefetches_one_step_ahead(profile):
    n = len(profile.layers)
    out = baselines.all_swap(problem_for(profile, math.inf))
    plan = out.plan
    assert out.status is Status.FEASIBLE
    assert plan.actions == (SWAP,) * (n - 1) + (KEEP,)
    assert plan.prefetch_at == (*(min(i + 1, n - 1) for i in range(n - 1)), None)
    assert plan.swap_wait == (None,) * n


def test_all_swap_reports_its_peak_when_it_does_not_fit():
    # Copies (1 s) outlast a forward (0.5 s): s0, s1 and s2 are all live when
    # F2 starts at 1.0 (copy of s0 ends 1.5, of s1 later), 12 bytes > 8.
    profile = chain([4, 4, 4], fwd=0.5)
    out = baselines.all_swap(problem_for(profile, 8))
    assert out.status is Status.INFEASIBLE
    assert "got 12 bytes" in out.message


# -- sqrt-n -------------------------------------------------------------------------


def test_uniform_checkpoints_end_each_segment():
    assert baselines.uniform_checkpoints(10, 3) == [3, 6, 9]
    assert baselines.uniform_checkpoints(10, 1) == [9]
    assert baselines.uniform_checkpoints(4, 4) == [0, 1, 2, 3]
    assert baselines.uniform_checkpoints(9, 3) == [2, 5, 8]


def test_chen_scan_marks_a_checkpoint_once_the_bytes_exceed_b():
    # running sums 3, 6 > 5 -> checkpoint 1; restart: 3, 6 > 5 -> checkpoint 3
    assert baselines.chen_greedy_checkpoints([3, 3, 3, 3], 5) == [1, 3]
    assert baselines.chen_greedy_checkpoints([3, 3, 3, 3], 100) == []
    assert baselines.chen_greedy_checkpoints([1, 9, 1], 5) == [1]


@SMALL
@given(profiles(1, 9), st.data())
def test_sqrt_n_with_k_segments_keeps_the_segment_ends_and_recomputes_the_rest(profile, data):
    n = len(profile.layers)
    k = data.draw(st.integers(min_value=1, max_value=n))
    out = baselines.sqrt_n(problem_for(profile, math.inf), segments=k)
    kept = [i for i, a in enumerate(out.plan.actions) if a is KEEP]
    assert kept == baselines.uniform_checkpoints(n, k)
    assert len(kept) == k and kept[-1] == n - 1
    assert all(a is RECOMPUTE for i, a in enumerate(out.plan.actions) if i not in kept)


@SMALL
@given(data=st.data())
def test_sqrt_n_search_is_no_slower_than_the_sqrt_plan_it_tries(data):
    profile = data.draw(profiles(1, 9))
    budget = data.draw(budgets(profile))
    n = len(profile.layers)
    problem = problem_for(profile, budget)
    default = baselines.sqrt_n(problem, segments=max(1, round(math.sqrt(n))))
    searched = baselines.sqrt_n(problem)
    if searched.plan is not None:
        assert set(searched.plan.actions) <= {KEEP, RECOMPUTE}
    if default.status is Status.FEASIBLE:
        assert searched.status is Status.FEASIBLE
        fast = simulate(profile, searched.plan).makespan
        assert fast <= simulate(profile, default.plan).makespan


def test_sqrt_n_keeps_everything_when_keep_all_fits():
    profile = chain([4, 4, 4, 4])
    out = baselines.sqrt_n(problem_for(profile, keep_all_peak(profile)))
    assert set(out.plan.actions) == {KEEP}


@pytest.mark.parametrize("segments", [0, 5, 1.5, True])
def test_sqrt_n_refuses_a_segment_count_outside_the_chain(segments):
    with pytest.raises(SolverOptionError, match=r"segments must be an integer in \[1, 4\]"):
        baselines.sqrt_n(problem_for(chain([1, 1, 1, 1]), math.inf), segments=segments)


# -- SuperNeurons -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "signature", "role"),
    [
        ("conv1+relu", "conv:128 64 55 55", SWAP),  # checkpoint keyword wins
        ("op3:conv2d+relu", "Conv2d(64,64,k=(3,3))", SWAP),
        ("fc6", "fc:128 4096", SWAP),
        ("op34:linear+relu+dropout", None, SWAP),
        ("attn.c_proj", None, SWAP),
        ("blocks.3.qkv", None, SWAP),
        ("matmul", None, SWAP),
        ("conv2_1.add", None, SWAP),
        ("residual", None, SWAP),
        ("concat_3", None, SWAP),
        ("pool1/3x3_s2", "pool:128 64 27 27", RECOMPUTE),
        ("op5:maxpool2d", "MaxPool2d(k=2,s=2)", RECOMPUTE),
        ("avgpool(padding=1)", None, RECOMPUTE),  # "add" inside "padding" is no join
        ("relu", None, RECOMPUTE),
        ("bn1", None, RECOMPUTE),
        ("LayerNorm", None, RECOMPUTE),
        ("dropout", None, RECOMPUTE),
        ("softmax", None, RECOMPUTE),
        ("GELU", None, RECOMPUTE),
        ("mystery_op", None, SWAP),  # unmatched: treated as a checkpoint
        ("stem", "stem", SWAP),
    ],
)
def test_superneurons_rule_reads_names_and_signatures(name, signature, role):
    layer = Layer.v1(name, 1.0, 1.0, 1, signature=signature)
    assert baselines.superneurons_role(layer) is role


def test_superneurons_plan_on_vgg16_swaps_convs_and_linears_and_recomputes_pools():
    profile = planopt.bundled_profile("vgg16-b128-pipedream")
    out = baselines.superneurons(problem_for(profile, math.inf))
    for i, (layer, action) in enumerate(zip(profile.layers, out.plan.actions, strict=True)):
        if "maxpool" in layer.name:
            assert action is RECOMPUTE, layer.name
        elif i == len(profile.layers) - 1:
            assert action is KEEP  # a last-layer checkpoint is kept, as in all-swap
        else:
            assert action is SWAP, layer.name
    need = out.plan.need()
    for i, action in enumerate(out.plan.actions):
        if action is SWAP:
            assert out.plan.prefetch_at[i] == min(need[i] + 1, len(need) - 1)


def test_superneurons_says_when_its_plan_breaks_the_budget():
    profile = planopt.bundled_profile("vgg16-b128-pipedream")
    out = baselines.superneurons(problem_for(profile, min_budget(profile)))
    assert out.status is Status.INFEASIBLE
    assert out.message.startswith("superneurons")
    assert "must be at most the budget" in out.message
