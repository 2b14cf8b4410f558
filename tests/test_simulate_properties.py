"""Properties every simulated schedule must have, whatever the plan.

Most follow from the spec in one line each (comments say which). The
monotonicity ones follow from its structure: every start is the max of
earlier ends and every queue's order is fixed by the plan, not by the
times, so the makespan is a max-plus expression in the durations and can
only grow when a duration grows or a wait is added.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from strategies import plans, profile_and_plan, profiles

from planopt import Plan, Scorer, min_budget, simulate
from planopt.plan import KEEP, RECOMPUTE, SWAP, recompute_runs
from planopt.profile import Device

REL = 1e-9
EXAMPLES = settings(max_examples=80, deadline=None)


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def rebind(plan: Plan, profile) -> Plan:
    """The same decisions, for a modified copy of the profile it was made for."""
    return Plan(plan.actions, plan.prefetch_at, plan.swap_wait).for_profile(profile)


def recompute_fwd(profile, plan) -> float:
    return math.fsum(
        layer.fwd for layer, a in zip(profile.layers, plan.actions, strict=True) if a is RECOMPUTE
    )


@EXAMPLES
@given(profiles(exact=False))
def test_keep_all_makespan_is_t_ideal(profile):
    assert close(simulate(profile, Plan.keep_all(profile)).makespan, profile.t_ideal)


@EXAMPLES
@given(profile_and_plan(exact=False))
def test_no_plan_beats_t_ideal_plus_its_recomputation(pair):
    # The compute stream runs every F, B and R once, one at a time.
    profile, plan = pair
    s = simulate(profile, plan)
    assert s.makespan >= profile.t_ideal * (1 - REL)
    assert s.makespan >= (profile.t_ideal + recompute_fwd(profile, plan)) * (1 - REL)
    assert close(s.recompute_seconds, recompute_fwd(profile, plan))


@EXAMPLES
@given(profile_and_plan())
def test_peak_is_at_least_static_and_min_budget(pair):
    profile, plan = pair
    s = simulate(profile, plan)
    assert s.peak_bytes >= profile.static_bytes
    assert s.peak_bytes >= min_budget(profile)


@EXAMPLES
@given(st.data(), profiles(exact=False, infinite=True))
def test_free_copies_cost_nothing(data, profile):
    # Infinite bandwidth, zero latency: every copy takes no time, so no
    # forward waits on a copy out and no backward on a copy back; the
    # makespan is T_ideal plus the recomputation, whatever the prefetch steps.
    plan = data.draw(plans(profile))
    s = simulate(profile, plan)
    assert close(s.makespan, profile.t_ideal + recompute_fwd(profile, plan))
    swap_only = data.draw(plans(profile, actions=st.sampled_from([KEEP, SWAP])))
    assert close(simulate(profile, swap_only).makespan, profile.t_ideal)


@EXAMPLES
@given(st.data(), profiles(exact=False))
def test_plans_without_swap_cost_exactly_their_recomputation(data, profile):
    plan = data.draw(plans(profile, actions=st.sampled_from([KEEP, RECOMPUTE])))
    s = simulate(profile, plan)
    assert close(s.makespan, profile.t_ideal + recompute_fwd(profile, plan))


@EXAMPLES
@given(st.data(), profile_and_plan())
def test_faster_copies_never_lengthen_the_makespan(data, pair):
    profile, plan = pair
    n = len(profile.layers)
    scorer = Scorer(profile)
    args = (plan.actions, plan.prefetch_at, plan.swap_wait)
    some = data.draw(st.sets(st.integers(0, n - 1)))
    more = some | data.draw(st.sets(st.integers(0, n - 1)))
    base = scorer.makespan(*args)
    t_some = scorer.makespan(*args, free_copies=some)
    t_more = scorer.makespan(*args, free_copies=more)
    assert t_more <= t_some <= base
    # Free copies do not change the memory accounting's tensors, only times;
    # the time floor still holds.
    assert t_more >= profile.t_ideal + recompute_fwd(profile, plan) - 1e-9


@EXAMPLES
@given(st.data(), profile_and_plan())
def test_shorter_operations_or_faster_links_never_lengthen_the_makespan(data, pair):
    # Exact profiles: halving a dyadic time is exact, so the comparison is exact.
    profile, plan = pair
    before = simulate(profile, plan).makespan
    i = data.draw(st.integers(0, len(profile.layers) - 1))
    field = data.draw(st.sampled_from(["fwd", "bwd"]))
    layers = list(profile.layers)
    layers[i] = dataclasses.replace(layers[i], **{field: getattr(layers[i], field) / 2})
    faster = profile.replace_layers(layers)
    assert simulate(faster, rebind(plan, faster)).makespan <= before
    dev = profile.device
    link = Device(dev.name, dev.h2d_bandwidth * 2, dev.d2h_bandwidth * 2, dev.transfer_latency / 2)
    quicker = profile.replace_layers(profile.layers, device=link)
    assert simulate(quicker, rebind(plan, quicker)).makespan <= before


@EXAMPLES
@given(profile_and_plan())
def test_dropping_a_swap_wait_never_lengthens_the_makespan(pair):
    profile, plan = pair
    assume(any(w is not None for w in plan.swap_wait))
    relaxed = Plan.build(plan.actions, plan.prefetch_at, [None] * len(plan), profile=profile)
    assert simulate(profile, relaxed).makespan <= simulate(profile, plan).makespan


@EXAMPLES
@given(profile_and_plan())
def test_scaling_time_scales_the_makespan_and_keeps_the_peak(pair):
    # Doubling every duration (times, latency, 1/bandwidth) doubles every instant
    # exactly (dyadic values) and keeps every event order, so the peak is unchanged.
    profile, plan = pair
    dev = profile.device
    slow = profile.replace_layers(
        [dataclasses.replace(la, fwd=la.fwd * 2, bwd=la.bwd * 2) for la in profile.layers],
        device=Device(
            dev.name, dev.h2d_bandwidth / 2, dev.d2h_bandwidth / 2, dev.transfer_latency * 2
        ),
    )
    a = simulate(profile, plan)
    b = simulate(slow, rebind(plan, slow))
    assert b.makespan == 2 * a.makespan
    assert b.peak_bytes == a.peak_bytes


@EXAMPLES
@given(profile_and_plan())
def test_scaling_bytes_scales_the_activation_peak(pair):
    # Three times the bytes over three times the bandwidth: same times, and the
    # memory above static is three times larger at every instant.
    profile, plan = pair
    dev = profile.device
    big = profile.replace_layers(
        [
            dataclasses.replace(
                la,
                out_bytes=3 * la.out_bytes,
                saved_bytes=3 * la.saved_bytes,
                input_grad_bytes=3 * la.input_grad_bytes,
                param_grad_bytes=3 * la.param_grad_bytes,
                fwd_work_bytes=3 * la.fwd_work_bytes,
                bwd_work_bytes=3 * la.bwd_work_bytes,
            )
            for la in profile.layers
        ],
        device=Device(dev.name, dev.h2d_bandwidth * 3, dev.d2h_bandwidth * 3, dev.transfer_latency),
    )
    a = simulate(profile, plan)
    b = simulate(big, rebind(plan, big))
    assert close(b.makespan, a.makespan)
    assert b.peak_bytes - big.static_bytes == 3 * (a.peak_bytes - profile.static_bytes)


def _spec_compute_order(plan) -> list[tuple[str, int]]:
    n = len(plan)
    order = [("forward", i) for i in range(n)]
    tops = {top: first for first, top in recompute_runs(plan.actions)}
    for t in range(n - 1, -1, -1):
        if t in tops:
            order += [("recompute", j) for j in range(tops[t], t + 1)]
        order.append(("backward", t))
    return order


@EXAMPLES
@given(profile_and_plan())
def test_timeline_respects_resources_durations_and_dependencies(pair):
    profile, plan = pair
    s = simulate(profile, plan)
    rows = s.operations()
    n = len(plan)
    n_swap, n_rec = plan.count(SWAP), plan.count(RECOMPUTE)
    assert len(rows) == 2 * n + n_rec + 2 * n_swap
    by_resource: dict[str, list] = {}
    for op in rows:
        by_resource.setdefault(op.resource.value, []).append(op)
    # Each resource runs one operation at a time (ties: zero-length ops).
    for ops in by_resource.values():
        ordered = sorted(ops, key=lambda o: (o.start, o.end))
        for prev, cur in itertools.pairwise(ordered):
            assert cur.start >= prev.end
    # The compute stream runs in the spec's order: each op starts no earlier
    # than the previous one ends (zero-length ops may share an instant).
    compute = by_resource["compute"]
    order = _spec_compute_order(plan)
    assert sorted((o.kind.value, o.layer) for o in compute) == sorted(order)
    found = {(o.kind.value, o.layer): o for o in compute}
    seq = [found[key] for key in order]
    for prev, cur in itertools.pairwise(seq):
        assert cur.start >= prev.end, (prev, cur)
    assert seq[0].start == 0
    # Durations.
    dev = profile.device
    op = {(o.kind.value, o.layer): o for o in rows}
    for i, layer in enumerate(profile.layers):
        assert close(op["forward", i].end - op["forward", i].start, layer.fwd)
        assert close(op["backward", i].end - op["backward", i].start, layer.bwd)
        if plan.actions[i] is SWAP:
            co, cb = op["copy_out", i], op["copy_back", i]
            assert close(co.end - co.start, dev.d2h_seconds(layer.product_bytes))
            assert close(cb.end - cb.start, dev.h2d_seconds(layer.product_bytes))
            # Dependencies: copy out after F_i, copy back after copy out,
            # B_i after copy back, F_{swap_wait} after copy out.
            assert co.start >= op["forward", i].end
            assert cb.start >= co.end
            assert op["backward", i].start >= cb.end
            if plan.swap_wait[i] is not None:
                assert op["forward", plan.swap_wait[i]].start >= co.end
    # The copy-out queue is FIFO in forward order.
    outs = sorted(by_resource.get("d2h", []), key=lambda o: (o.start, o.end))
    assert [o.layer for o in outs] == sorted(o.layer for o in outs)
    assert close(s.makespan, max(o.end for o in rows))


@EXAMPLES
@given(profile_and_plan(), st.integers(0, 400))
def test_memory_curve_agrees_with_peak_and_budget(pair, budget):
    profile, plan = pair
    s = simulate(profile, plan, budget)
    curve = [int(b) for b in s.memory_bytes]
    if not curve:  # nothing but zero-byte tensors
        assert s.peak_bytes == profile.static_bytes
    else:
        assert max(curve) == s.peak_bytes
        assert curve[-1] == profile.static_bytes  # everything is freed
        assert min(curve) >= profile.static_bytes
        assert list(s.memory_times) == sorted(s.memory_times)
        assert s.peak_time in set(s.memory_times.tolist())
    assert s.feasible == (s.peak_bytes <= budget)
    assert simulate(profile, plan).feasible


@EXAMPLES
@given(profile_and_plan())
def test_scorer_and_schedule_agree_and_are_deterministic(pair):
    profile, plan = pair
    s = simulate(profile, plan)
    scorer = Scorer(profile)
    args = (plan.actions, plan.prefetch_at, plan.swap_wait)
    assert scorer.score(*args) == (s.makespan, s.peak_bytes)
    assert scorer.makespan(*args) == s.makespan
    assert scorer.peak(*args) == s.peak_bytes
    assert scorer.score_plan(plan) == (s.makespan, s.peak_bytes)
    again = simulate(profile, plan)
    assert (again.makespan, again.peak_bytes) == (s.makespan, s.peak_bytes)
    assert again.operations() == s.operations()
    if profile.t_ideal > 0:
        assert close(s.overhead, s.makespan / profile.t_ideal - 1)
    assert s.stall_seconds >= 0
