"""Hand-worked cases, one or more per rule of the spec's Execution and Memory sections.

Every expected number below was worked out by hand from the spec text (the
working is in the comments), and is checked against both `planopt.simulate`
and the reference simulator. Times are small dyadic numbers so that every
sum is exact. Notation: F_i forward, B_i backward, R_i recomputation,
co_i copy out, cb_i copy back, (start, end).
"""

from __future__ import annotations

import math

import pytest
from reference_sim import reference_run

from planopt import Device, Layer, Plan, Profile, simulate
from planopt.errors import InvalidPlanError

INF = math.inf


def chain(
    fwd,
    bwd,
    saved,
    *,
    static=0,
    d2h=INF,
    h2d=INF,
    latency=0.0,
    fwd_work=None,
    bwd_work=None,
) -> Profile:
    n = len(fwd)
    fw = fwd_work or [0] * n
    bw = bwd_work or [0] * n
    return Profile(
        name="hand",
        device=Device("dev", h2d_bandwidth=h2d, d2h_bandwidth=d2h, transfer_latency=latency),
        static_bytes=static,
        layers=tuple(Layer.v1(f"l{i}", fwd[i], bwd[i], saved[i], fw[i], bw[i]) for i in range(n)),
    )


def run(profile, actions, prefetch=None, wait=None):
    """Simulate; also check the reference agrees on every figure used below."""
    plan = Plan.build(actions, prefetch, wait, profile=profile)
    schedule = simulate(profile, plan)
    ref = reference_run(profile, plan)
    assert ref.makespan == schedule.makespan
    assert ref.peak_bytes == schedule.peak_bytes
    return schedule


def ops(schedule) -> dict[str, tuple[float, float]]:
    """Operations keyed 'F0', 'B2', 'R1', 'co0', 'cb1'."""
    short = {
        "forward": "F",
        "backward": "B",
        "recompute": "R",
        "copy_out": "co",
        "copy_back": "cb",
    }
    out = {}
    for op in schedule.operations():
        key = f"{short[op.kind.value]}{op.layer}"
        assert key not in out, f"{key} appears twice"
        out[key] = (op.start, op.end)
    return out


def compute_order(schedule) -> list[str]:
    """Compute-stream operations in execution order."""
    rows = [op for op in schedule.operations() if op.resource.value == "compute"]
    rows.sort(key=lambda op: (op.start, op.end))
    return [f"{op.kind.value[0].upper()}{op.layer}" for op in rows]


def level_at(schedule, t: float) -> int:
    """Device memory at instant `t`: the level after the last event at or before `t`."""
    level = schedule.static_bytes
    for time, nbytes in zip(schedule.memory_times, schedule.memory_bytes, strict=True):
        if time <= t:
            level = int(nbytes)
    return level


# -- Execution -------------------------------------------------------------------


def test_forward_then_backward_in_order():
    # keep-all, fwd 1,2,3 bwd 4,5,6: F0 (0,1) F1 (1,3) F2 (3,6), then backward
    # steps 2,1,0: B2 (6,12) B1 (12,17) B0 (17,21). T = 21 = T_ideal.
    p = chain([1, 2, 3], [4, 5, 6], [10, 20, 30], static=100)
    s = run(p, ["keep"] * 3)
    assert ops(s) == {
        "F0": (0, 1),
        "F1": (1, 3),
        "F2": (3, 6),
        "B2": (6, 12),
        "B1": (12, 17),
        "B0": (17, 21),
    }
    assert compute_order(s) == ["F0", "F1", "F2", "B2", "B1", "B0"]
    assert s.makespan == 21 == p.t_ideal


@pytest.mark.parametrize(
    ("wait", "expected_ops", "makespan", "peak"),
    [
        # co0 lasts 3/1 = 3 s: (1,4). No wait: F1 (1,2) F2 (2,3) B2 (3,4) B1 (4,5);
        # step 0 issued at 5, cb0 (5,5) (infinite h2d), B0 (5,6). s0 lives until
        # max(co0 end 4, F1 end 2) = 4, so at t=2..4: s0+s1+s2 = 3+1+1 = 5.
        (None, {"F1": (1, 2), "F2": (2, 3), "B0": (5, 6)}, 6, 5),
        # swap_wait=1: F1 waits for co0: (4,5), F2 (5,6), B2 (6,7), B1 (7,8),
        # B0 (8,9). s0 freed at max(4, 5) = 5, when s2 is allocated (tie: free
        # first), so the peak is s0+s1 = 4 on [4,5).
        (1, {"F1": (4, 5), "F2": (5, 6), "B0": (8, 9)}, 9, 4),
        # swap_wait=2: F1 (1,2), F2 waits: (4,5); B2 (5,6) B1 (6,7) B0 (7,8).
        # s0 freed at 4 = start of F2: peak s0+s1 = 4 on [1,4).
        (2, {"F1": (1, 2), "F2": (4, 5), "B0": (7, 8)}, 8, 4),
    ],
)
def test_swap_wait_delays_the_forward(wait, expected_ops, makespan, peak):
    p = chain([1, 1, 1], [1, 1, 1], [3, 1, 1], d2h=1.0)
    s = run(p, ["swap", "keep", "keep"], [0, None, None], [wait, None, None])
    got = ops(s)
    assert got["co0"] == (1, 4)
    for key, value in expected_ops.items():
        assert got[key] == value, key
    assert s.makespan == makespan
    assert s.peak_bytes == peak


def test_copy_out_queue_is_fifo_and_lasts_latency_plus_size_over_bandwidth():
    # d2h = h2d = 10 B/s, latency 0.5. co0: enqueued at F0 end 1, lasts
    # 0.5 + 20/10 = 2.5: (1, 3.5). co1: enqueued at F1 end 2 but waits for co0:
    # (3.5, 3.5 + 0.5 + 30/10 = 7).
    # Step 2 issued at F2 end 3: cb1 then cb0 enqueued. cb1 waits for co1:
    # (7, 10.5); cb0 behind it: (10.5, 10.5 + 2.5 = 13).
    # B2 (3,4); B1 waits for cb1: (10.5, 11.5); B0 waits for cb0: (13, 14).
    p = chain([1, 1, 1], [1, 1, 1], [20, 30, 10], d2h=10.0, h2d=10.0, latency=0.5)
    s = run(p, ["swap", "swap", "keep"], [2, 2, None])
    assert ops(s) == {
        "F0": (0, 1),
        "F1": (1, 2),
        "F2": (2, 3),
        "co0": (1, 3.5),
        "co1": (3.5, 7),
        "B2": (3, 4),
        "cb1": (7, 10.5),
        "cb0": (10.5, 13),
        "B1": (10.5, 11.5),
        "B0": (13, 14),
    }
    assert s.makespan == 14
    # Memory: s0 [0, max(3.5, F1 end 2)) = [0, 3.5); s1 [1, max(7, F2 end 3)) =
    # [1, 7); s2 kept [2, B2 end 4); cb1 copy [7, B1 end 11.5); cb0 [10.5, 14).
    # Levels: 20 @0, 50 @1, 60 @2, 40 @3.5, 30 @4, 30 @7 (free s1 then alloc
    # its copy), 50 @10.5, 20 @11.5, 0 @14. Peak 60.
    expected = {0: 20, 1: 50, 2: 60, 3.5: 40, 4: 30, 6.9: 30, 7: 30, 10.5: 50, 11.5: 20, 14: 0}
    assert {t: level_at(s, t) for t in expected} == expected
    assert s.peak_bytes == 60


@pytest.mark.parametrize(
    ("prefetch", "cb0", "b0", "makespan"),
    [
        (3, (4, 5), (10, 12), 12),  # issued at F3 end 4
        (2, (6, 7), (10, 12), 12),  # issued at B3 end 6
        (1, (8, 9), (10, 12), 12),  # issued at B2 end 8
        (0, (10, 11), (11, 13), 13),  # issued at B1 end 10: B0 stalls 1 s
    ],
)
def test_copy_back_is_enqueued_when_step_prefetch_at_is_issued(prefetch, cb0, b0, makespan):
    # fwd 1 each, bwd 2 each: F ends at 4, B3 (4,6) B2 (6,8) B1 (8,10).
    # co0 is instant (infinite d2h); cb0 lasts 8/8 = 1 s.
    p = chain([1] * 4, [2] * 4, [8, 1, 1, 1], h2d=8.0)
    s = run(p, ["swap", "keep", "keep", "keep"], [prefetch, None, None, None])
    got = ops(s)
    assert got["cb0"] == cb0
    assert got["B0"] == b0
    assert s.makespan == makespan


def test_copy_backs_of_one_step_go_higher_layer_first_and_queue_fifo():
    # bw 10, sizes 10: every copy lasts 1 s. co0 (1,2), co1 (2,3).
    # Step 1 issued at F1 end 2 enqueues cb1 then cb0. cb1 waits for co1: (3,4);
    # cb0 (its copy out ended at 2) still waits behind cb1 in the queue: (4,5).
    # B1 (4,5), B0 (5,6).
    p = chain([1, 1], [1, 1], [10, 10], d2h=10.0, h2d=10.0)
    s = run(p, ["swap", "swap"], [1, 1])
    got = ops(s)
    assert got["co0"] == (1, 2)
    assert got["co1"] == (2, 3)
    assert got["cb1"] == (3, 4)
    assert got["cb0"] == (4, 5)
    assert got["B1"] == (4, 5)
    assert got["B0"] == (5, 6)
    assert s.makespan == 6


def test_copy_back_waits_for_its_copy_out_and_backward_for_its_copy_back():
    # One layer, swap. co0: 10/5 = 2 s: (1,3). Step 0 issued at F0 end 1, but
    # cb0 waits for co0: (3, 3 + 10/10 = 4). B0 waits for cb0: (4,5).
    # Memory, last-layer rule: s0 freed at max(co0 end 3, F0 end 1) = 3, when
    # cb0 allocates its copy (free first): the peak is 10, never 20.
    p = chain([1], [1], [10], d2h=5.0, h2d=10.0)
    s = run(p, ["swap"], [0])
    assert ops(s) == {"F0": (0, 1), "co0": (1, 3), "cb0": (3, 4), "B0": (4, 5)}
    assert s.makespan == 5
    assert s.peak_bytes == 10
    assert level_at(s, 2.9) == 10 and level_at(s, 3) == 10 and level_at(s, 5) == 0


def test_recompute_run_is_regenerated_as_one_block_before_the_top_backward():
    # [keep, recompute, recompute, keep], fwd 1,2,3,4 bwd 10,20,30,40.
    # F0 (0,1) F1 (1,3) F2 (3,6) F3 (6,10); step 3: B3 (10,50); step 2 (top of
    # run 1..2): R1 (50,52) R2 (52,55) B2 (55,85); B1 (85,105); B0 (105,115).
    # T = T_ideal 110 + fwd1 + fwd2 = 115.
    p = chain([1, 2, 3, 4], [10, 20, 30, 40], [1, 2, 4, 8], static=1000)
    s = run(p, ["keep", "recompute", "recompute", "keep"])
    assert ops(s) == {
        "F0": (0, 1),
        "F1": (1, 3),
        "F2": (3, 6),
        "F3": (6, 10),
        "B3": (10, 50),
        "R1": (50, 52),
        "R2": (52, 55),
        "B2": (55, 85),
        "B1": (85, 105),
        "B0": (105, 115),
    }
    assert compute_order(s) == ["F0", "F1", "F2", "F3", "B3", "R1", "R2", "B2", "B1", "B0"]
    assert s.makespan == 115 == p.t_ideal + 2 + 3
    # Memory: s0 kept [0,115); s1 recomputed, freed at F2 end: [1,6); s2 freed at
    # F3 end: [3,10); s3 kept [6,50); regenerated s1 [50, B1 end 105), s2 [52, 85).
    # Levels: 1001 @0, 1003 @1, 1007 @3, 1013 @6 (s1 freed, s3 allocated),
    # 1009 @10, 1003 @50 (s3 freed, s1 regenerated), 1007 @52, 1003 @85,
    # 1001 @105, 1000 @115. Peak 1013.
    expected = {
        0: 1001,
        1: 1003,
        3: 1007,
        5.9: 1007,
        6: 1013,
        10: 1009,
        50: 1003,
        52: 1007,
        85: 1003,
        105: 1001,
        115: 1000,
    }
    assert {t: level_at(s, t) for t in expected} == expected
    assert s.peak_bytes == 1013


@pytest.mark.parametrize(
    ("prefetch", "cb0", "r1", "makespan"),
    [
        # step 1 issued at B2 end 4: cb0 (4,5); the block waits for it: R1 (5,6),
        # B1 (6,7), B0 (7,8).
        (1, (4, 5), (5, 6), 8),
        # step 2 issued at F2 end 3: cb0 (3,4); R1 (4,5) right after B2 (3,4),
        # B1 (5,6), B0 (6,7) = T_ideal 6 + fwd1.
        (2, (3, 4), (4, 5), 7),
    ],
)
def test_recompute_block_waits_for_the_copy_back_of_its_swapped_base(prefetch, cb0, r1, makespan):
    # [swap, recompute, keep]; every copy 10/10 = 1 s: co0 (1,2).
    p = chain([1, 1, 1], [1, 1, 1], [10, 5, 5], d2h=10.0, h2d=10.0)
    s = run(p, ["swap", "recompute", "keep"], [prefetch, None, None])
    got = ops(s)
    assert got["co0"] == (1, 2)
    assert got["B2"] == (3, 4)
    assert got["cb0"] == cb0
    assert got["R1"] == r1
    assert s.makespan == makespan


def test_swap_base_of_a_recompute_run_cannot_prefetch_after_need():
    # need(0) = 1 (layer 1 is recompute, top of its run), so prefetch_at 0 is invalid.
    p = chain([1, 1, 1], [1, 1, 1], [10, 5, 5])
    with pytest.raises(InvalidPlanError, match=r"prefetch_at must be in \[1, 2\], got 0"):
        Plan.build(["swap", "recompute", "keep"], [0, None, None], profile=p)


def test_makespan_is_the_latest_end_of_any_operation():
    # The copy-out case above: compute ends last at B0 = 14.
    p = chain([1, 1, 1], [1, 1, 1], [20, 30, 10], d2h=10.0, h2d=10.0, latency=0.5)
    s = run(p, ["swap", "swap", "keep"], [2, 2, None])
    assert s.makespan == max(end for _, end in ops(s).values()) == ops(s)["B0"][1]


# -- Memory ------------------------------------------------------------------------


def test_keep_is_freed_at_the_end_of_its_backward():
    # keep-all of the first case: static 100, s = 10, 20, 30. All live from
    # t=3 (160) until B2 ends at 12 (130), B1 at 17 (110), B0 at 21 (100).
    p = chain([1, 2, 3], [4, 5, 6], [10, 20, 30], static=100)
    s = run(p, ["keep"] * 3)
    expected = {0: 110, 1: 130, 3: 160, 11.9: 160, 12: 130, 17: 110, 21: 100}
    assert {t: level_at(s, t) for t in expected} == expected
    assert s.peak_bytes == 160
    assert s.peak_time == 3


def test_recompute_last_layer_is_freed_at_the_end_of_its_own_forward():
    # [keep, recompute]: s1 lives [1, F1 end 2). Step 1 (top of run {1}) is
    # issued at 2: R1 (2,3) regenerates s1 [2, B1 end 4); B1 (3,4), B0 (4,5).
    # At t=2 s1 is freed before its regeneration is allocated: peak 4+8 = 12.
    p = chain([1, 1], [1, 1], [4, 8])
    s = run(p, ["keep", "recompute"])
    assert ops(s)["R1"] == (2, 3)
    assert s.makespan == 5
    assert s.peak_bytes == 12
    assert level_at(s, 1) == 12 and level_at(s, 2) == 12 and level_at(s, 4) == 4


def test_swap_is_freed_at_the_end_of_the_next_forward_when_its_copy_out_is_faster():
    # [swap, keep, keep], fwd 1,2,1, sizes 4,2,1, d2h 8: co0 (1, 1.5) but F1
    # runs (1,3), so s0 stays until 3, when F2 allocates s2 (free first).
    # Levels: 4 @0, 6 @1, still 6 @2.9, 3 @3 (s1 + s2).
    p = chain([1, 2, 1], [1, 1, 1], [4, 2, 1], d2h=8.0, h2d=8.0)
    s = run(p, ["swap", "keep", "keep"], [0, None, None])
    assert ops(s)["co0"] == (1, 1.5)
    expected = {0: 4, 1: 6, 1.5: 6, 2.9: 6, 3: 3}
    assert {t: level_at(s, t) for t in expected} == expected
    assert s.peak_bytes == 6


def test_free_happens_before_allocate_at_the_same_instant():
    # [recompute, keep, keep], sizes 10 each, all times 1. s0 is freed at F1 end
    # 2, exactly when F2 allocates s2; in backward s1 is freed at B1 end 5
    # exactly when R0 regenerates s0. Free first: the peak is 20 (two
    # tensors), never 30.
    p = chain([1, 1, 1], [1, 1, 1], [10, 10, 10])
    s = run(p, ["recompute", "keep", "keep"])
    assert ops(s)["R0"] == (5, 6)
    assert s.makespan == 7
    assert s.peak_bytes == 20
    assert level_at(s, 2) == 20 and level_at(s, 5) == 10


def test_scratch_bytes_are_held_only_while_their_operation_runs():
    # keep-all, sizes 10, 20, fwd scratch 5, 100, bwd scratch 7, 3, times 1.
    # F0 (0,1): 10+5 = 15; F1 (1,2): 10+20+100 = 130 (F0's scratch freed at 1
    # before F1's is allocated); B1 (2,3): 30+3 = 33; B0 (3,4): 10+7 = 17.
    p = chain([1, 1], [1, 1], [10, 20], fwd_work=[5, 100], bwd_work=[7, 3])
    s = run(p, ["keep", "keep"])
    expected = {0: 15, 1: 130, 2: 33, 3: 17, 4: 0}
    assert {t: level_at(s, t) for t in expected} == expected
    assert s.peak_bytes == 130


def test_forward_scratch_is_also_held_in_a_recompute_block():
    # [keep, recompute, keep], sizes 10, 20, 40, fwd scratch of layer 1 = 50.
    # F1 (1,2): 10+20+50 = 80. F2 (2,3): s1 still live until F2 end: 10+20+40 = 70.
    # At 3 s1 is freed: 10+40 = 50 during B2 (3,4), which frees s2; step 1:
    # R1 (4,5) holds s0 + regenerated s1 + scratch = 10+20+50 = 80; B1 (5,6): 30;
    # B0 (6,7): 10.
    p = chain([1, 1, 1], [1, 1, 1], [10, 20, 40], fwd_work=[0, 50, 0])
    s = run(p, ["keep", "recompute", "keep"])
    assert ops(s)["R1"] == (4, 5)
    expected = {1: 80, 2: 70, 3: 50, 4: 80, 5: 30, 6: 10, 7: 0}
    assert {t: level_at(s, t) for t in expected} == expected
    assert s.peak_bytes == 80


def test_a_zero_lifetime_tensor_is_never_present():
    # Present means allocated and not yet freed, frees first: a tensor lives on
    # [alloc, free), so one allocated and freed at the same instant never counts.
    # F0 takes no time: s0 (10) lives [0, B0 end 1); F0's scratch (100) is
    # allocated and freed at 0: the peak is 10.
    s = run(chain([0], [1], [10], fwd_work=[100]), ["keep"])
    assert (s.makespan, s.peak_bytes) == (1, 10)
    # B0 takes no time: s0 lives [0, 1); B0's scratch (50) is allocated at 1,
    # after s0's free at 1, and freed at 1: the peak is 10, never 60.
    s = run(chain([1], [0], [10], bwd_work=[50]), ["keep"])
    assert (s.makespan, s.peak_bytes) == (1, 10)
    # Everything at t=0: nothing is ever present; the peak is static (7).
    s = run(chain([0], [0], [10], static=7, fwd_work=[100], bwd_work=[50]), ["keep"])
    assert (s.makespan, s.peak_bytes) == (0, 7)
