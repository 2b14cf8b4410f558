"""The version-2 reference simulator (`tests/reference_v2.py`) against the spec.

Three kinds of evidence:
- the spec's hand-made cases (`v2-cases.json`) reproduced exactly;
- small chains worked by hand here from the spec text, each figure derived in
  a comment (sizes in bytes, times in seconds, `static_bytes` 0 unless said);
- on `planopt.profile/1` chains, agreement with the independent version-1
  reference `tests/reference_sim.py` (that side imports planopt, as it must).
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from reference_sim import reference_simulate
from reference_v2 import (
    BACKWARD,
    COPY_BACK,
    COPY_OUT,
    FORWARD,
    PLAN_FORMAT,
    PROFILE_V1,
    PROFILE_V2,
    RECOMP,
    V2_KINDS,
    random_v2_chain,
    random_valid_plan,
    read_plan,
    read_profile,
    reference_v2,
)
from strategies import random_plan, random_profile

from planopt import io
from planopt.random_chain import FAMILIES, random_chain

ROOT = Path(__file__).resolve().parents[1]
COMMITTED_CASES = ROOT / "tests" / "data" / "v2-cases.json"


def _shared_cases() -> Path:
    """`../shared/spec/v2-cases.json` beside the checkout; in a git worktree (whose
    `.git` is a file naming the main repository's git dir) beside the main checkout."""
    candidates = [ROOT.parent / "shared" / "spec" / "v2-cases.json"]
    dot_git = ROOT / ".git"
    if dot_git.is_file() and dot_git.read_text().startswith("gitdir:"):
        git_dir = Path(dot_git.read_text().split(":", 1)[1].strip())  # <main>/.git/worktrees/<x>
        if git_dir.parent.name == "worktrees":
            main = git_dir.parents[2]
            candidates.append(main.parent / "shared" / "spec" / "v2-cases.json")
    return next((c for c in candidates if c.exists()), candidates[0])


SHARED_CASES = _shared_cases()


def _cases_path() -> Path:
    """The committed copy (CI clones may lack `../shared`), else the spec's folder."""
    return COMMITTED_CASES if COMMITTED_CASES.exists() else SHARED_CASES


CASES = json.loads(_cases_path().read_text())["cases"]


def _case(index: int) -> tuple[dict, dict]:
    """A copy of the spec's case `index`: (profile, plan)."""
    return copy.deepcopy(CASES[index]["profile"]), copy.deepcopy(CASES[index]["plan"])


def _case_named(fragment: str) -> tuple[dict, dict]:
    """The one spec case whose `what` contains `fragment`."""
    (index,) = [i for i, c in enumerate(CASES) if fragment in c["what"]]
    return _case(index)


# -- building documents by hand ---------------------------------------------------


def layer(
    name: str,
    fwd: float,
    bwd: float,
    out: int,
    *,
    saved: int = 0,
    si: bool = False,
    so: bool = False,
    g: int = 0,
    pg: int = 0,
    fw: int = 0,
    bw: int = 0,
) -> dict:
    """A `/2` layer: `si`/`so` are saves_input/saves_output, `g`/`pg` the gradients."""
    return {
        "name": name,
        "fwd": fwd,
        "bwd": bwd,
        "out_bytes": out,
        "saved_bytes": saved,
        "saves_input": si,
        "saves_output": so,
        "input_grad_bytes": g,
        "param_grad_bytes": pg,
        "fwd_work_bytes": fw,
        "bwd_work_bytes": bw,
    }


def profile(*layers: dict, static: int = 0, bandwidth: float = 1.0, latency: float = 0.0) -> dict:
    return {
        "format": PROFILE_V2,
        "name": "hand",
        "device": {
            "name": "link",
            "h2d_bandwidth": bandwidth,
            "d2h_bandwidth": bandwidth,
            "transfer_latency": latency,
        },
        "static_bytes": static,
        "layers": list(layers),
    }


def plan(*entries: Any) -> dict:
    """`"keep"`, `"recompute"` or `("swap", prefetch_at, swap_wait)` per layer."""
    out = []
    for entry in entries:
        if isinstance(entry, tuple):
            out.append({"action": "swap", "prefetch_at": entry[1], "swap_wait": entry[2]})
        else:
            out.append({"action": entry})
    return {"format": PLAN_FORMAT, "layers": out}


def times(result, kind: str, layer_index: int) -> tuple[float, float]:
    op = result.op(kind, layer_index)
    return op.start, op.end


# -- the spec's cases -------------------------------------------------------------


@pytest.mark.parametrize(
    "case", CASES, ids=[c["profile"]["name"] + ": " + c["what"] for c in CASES]
)
def test_spec_case(case):
    got = reference_v2(case["profile"], case["plan"])
    want = case["expected"]
    assert math.isclose(got.makespan, want["makespan"], rel_tol=1e-12), case["what"]
    assert got.peak_bytes == want["peak_bytes"], case["what"]
    assert list(got.need) == want["need"], case["what"]


@pytest.mark.skipif(
    not (COMMITTED_CASES.exists() and SHARED_CASES.exists()),
    reason="needs both the committed copy and ../shared/spec/v2-cases.json",
)
def test_committed_cases_are_a_verbatim_copy():
    assert COMMITTED_CASES.read_bytes() == SHARED_CASES.read_bytes()


# -- hand-worked chains -----------------------------------------------------------


def test_gradient_memory_at_the_start_of_backward():
    # l0: linear (reads x_0, the batch), out 10, pg 3. l1: linear, out 4, g 10, pg 5.
    # static 100, keep-all. fwd 1, bwd 2 each.
    # F0 [0,1): o0 10 -> 110 (o0 read by B_1). F1 [1,2): o1 4 -> 114.
    # t=2: o1 freed (last layer, no reader) *before* B_1 allocates g1 10 + pg1 5:
    #   100 + 10 + 10 + 5 = 125 (129 if the free came after the allocations).
    # t=4: B_1 ends, o0 freed; B_0 [4,6) allocates pg0 3: 100 + g1 10 + pg1 5 + pg0 3 = 118.
    # t=6: B_0 ends: g1 freed (end of B_{i-1}); parameter gradients are held to the end of
    #   the step, so at t=6: 100 + 5 + 3 = 108.
    prof = profile(
        layer("lin0", 1, 2, 10, si=True, pg=3),
        layer("lin1", 1, 2, 4, si=True, g=10, pg=5),
        static=100,
    )
    got = reference_v2(prof, plan("keep", "keep"))
    assert got.makespan == 6
    assert got.peak_bytes == 125
    assert [got.memory_at(t) for t in (0, 1, 2, 4, 5.9, 6)] == [110, 114, 125, 118, 118, 108]
    grad = {(t.what, t.layer): (t.alloc, t.free) for t in got.tensors}
    assert grad[("input_grad", 1)] == (2, 6)
    assert grad[("param_grad", 1)] == (2, math.inf)
    assert grad[("param_grad", 0)] == (4, math.inf)


def test_parameter_gradients_of_a_zero_time_last_backward_count():
    # One layer, fwd 1, bwd 0, param gradients 7, backward scratch 5, static 10.
    # B_0 runs at [1,1]: its scratch is allocated and freed at 1, so never counts;
    # its parameter gradients are held to the end of the step: at t=1, 10 + 7 = 17.
    got = reference_v2(
        profile(layer("lin0", 1, 0, 0, si=True, pg=7, bw=5), static=10), plan("keep")
    )
    assert got.makespan == 1
    assert got.peak_bytes == 17


def _relu_sandwich(top_saves_input: bool) -> dict:
    # conv0 (reads the batch) out 8; relu1 out 8 reads its output, g 8;
    # layer 2 out 2, g 8, reads its input or not. fwd 1 each, bwd 2, 1, 2.
    return profile(
        layer("conv0", 1, 2, 8, si=True),
        layer("relu1", 1, 1, 8, so=True, g=8),
        layer("top2", 1, 2, 2, si=top_saves_input, g=8),
    )


def test_recompute_block_moves_to_the_step_above_when_it_reads_the_top():
    # relu1 recomputed: run 1..1 (t = 1), base x_1 = conv0's output.
    # Layer 2 reads its input (x_2 = relu1's output), so u = t+1 = 2:
    # F0 [0,1) F1 [1,2) F2 [2,3) | step 2: F1' [3,4) B2 [4,6) | B1 [6,7) | B0 [7,9).
    # Memory: [0,1) o0 8; [1,2) +o1 8 = 16; [2,3) +o2 2 = 18; t=3 o1 (recompute:
    # end of F2) and o2 (no reader) freed: 8; F1' [3,4) regenerated o1 8: 16;
    # t=4 o0 freed (its only reader, the block, ends its first forward), then B2
    # [4,6) allocates g2 8: 8 + 8 = 16; B1 [6,7) g1 8: 24; t=7 g2 and o1 (last
    # reader B_1) freed.
    got = reference_v2(_relu_sandwich(True), plan("keep", "recompute", "keep"))
    assert times(got, RECOMP, 1) == (3, 4)
    assert times(got, BACKWARD, 2) == (4, 6)
    assert got.makespan == 9
    assert got.peak_bytes == 24
    assert got.memory_at(3.5) == 16 and got.memory_at(4) == 16
    regenerated = next(t for t in got.tensors if t.what == "regen_output")
    assert (regenerated.alloc, regenerated.free) == (3, 7)
    forward_output = next(t for t in got.tensors if t.what == "output" and t.layer == 0)
    assert forward_output.free == 4


def test_recompute_block_stays_at_its_top_when_the_layer_above_does_not_read_it():
    # Same chain, layer 2 does not read its input: u = t = 1.
    # F0 [0,1) F1 [1,2) F2 [2,3) | B2 [3,5) | step 1: F1' [5,6) B1 [6,7) | B0 [7,9).
    got = reference_v2(_relu_sandwich(False), plan("keep", "recompute", "keep"))
    assert times(got, BACKWARD, 2) == (3, 5)
    assert times(got, RECOMP, 1) == (5, 6)
    assert got.makespan == 9
    # [5,6): o0 8 + g2 8 + regenerated o1 8 = 24; t=6 o0 freed; B1: g2 8 + o1 8 + g1 8 = 24.
    assert got.memory_at(5) == 24 and got.memory_at(6) == 24
    assert got.peak_bytes == 24


def test_a_base_read_by_the_block_and_by_the_backward_above_waits_for_that_backward():
    # The spec's "blocks 1-2 recomputed" chain: block0's output is the base of the
    # run 1..2 (block at u = 3, as head3 reads block2's output) and block1 reads its
    # input. The block runs first in time (step 3), B_1 later: the last reader is
    # B_1, so block0's output (kept) and its copied-back output (swapped) are freed
    # at the end of B_1, not at the end of F_1 in the block.
    # F0 [0,2) F1 [2,4) F2 [4,6) F3 [6,7) | F1' [7,9) F2' [9,11) B3 [11,13) |
    # B2 [13,17) | B1 [17,21) | B0 [21,25) (milliseconds).
    prof, pl = _case_named("blocks 1-2 recomputed")
    got = reference_v2(prof, pl)
    b1 = got.op(BACKWARD, 1)
    assert math.isclose(b1.end, 0.021, rel_tol=1e-12)
    assert math.isclose(got.op(RECOMP, 1).start, 0.007, rel_tol=1e-12)
    (kept,) = [t for t in got.tensors if t.what == "output" and t.layer == 0]
    assert kept.free == b1.end
    prof, pl = _case_named("block0 swapped as the base")
    got = reference_v2(prof, pl)
    (copied,) = [t for t in got.tensors if t.what == "copied_output" and t.layer == 0]
    assert copied.free == got.op(BACKWARD, 1).end > got.op(RECOMP, 1).end


def _dropout_under_add(second: str) -> tuple[dict, dict]:
    # l0: internals 4 (a mask), out 6, no flags, swapped. l1: out 6, no flags
    # (an add), `second`. l2: out 1, no flags. fwd = bwd = 1; link 2 bytes/s, no latency.
    prof = profile(
        layer("drop0", 1, 1, 6, saved=4),
        layer("add1", 1, 1, 6),
        layer("add2", 1, 1, 1),
        bandwidth=2.0,
    )
    prefetch = 1 if second == "recompute" else 0
    return prof, plan(("swap", prefetch, None), second, "keep")


def test_swap_copies_the_output_only_because_the_layer_above_is_recomputed():
    # add1 recomputed: run 1..1, layer 2 does not read its input, so u = 1; its
    # block reads x_1 = drop0's output, the output's only reader. So
    # c_0 = s_0 + o_0 = 10 (5 s each way) and need(0) = max(0, u) = 1.
    # F0 [0,1), copy out [1,6); F1 [1,2), F2 [2,3); B2 [3,4); step 1 issued at 4,
    # copy back waits for the copy out: [6,11); F1' waits for it: [11,12);
    # B1 [12,13); B0 [13,14).
    # Memory: [0,1) s0 4 + o0 6 = 10; [1,2) + o1 6 = 16; [2,3) + o2 1 = 17;
    # t=3 o1, o2 freed: 10 (s0 and o0 held until the copy out ends at 6);
    # t=6 both freed, c_0 = 10 allocated at the start of the copy back: 10;
    # F1' [11,12): + regenerated o1 6 = 16 (no reader: freed at the end of its
    # own forward, the top of the run); t=12 it and the copied o0 (last reader:
    # the block's F1') freed: 4; t=14 the copied s0 (read by B_0) freed.
    prof, pl = _dropout_under_add("recompute")
    got = reference_v2(prof, pl)
    assert got.need == (1, None, None)
    assert times(got, COPY_OUT, 0) == (1, 6)
    assert times(got, COPY_BACK, 0) == (6, 11)
    assert times(got, RECOMP, 1) == (11, 12)
    assert got.makespan == 14
    assert got.peak_bytes == 17
    assert [got.memory_at(t) for t in (3, 6, 11, 12, 13.5)] == [10, 10, 16, 4, 4]


def test_swap_copies_internals_only_when_the_output_has_no_reader():
    # add1 kept: drop0's output has no reader, so c_0 = s_0 = 4 (2 s each way), need(0) = 0.
    # F0 [0,1), copy out [1,3); F1 [1,2), F2 [2,3); B2 [3,4), B1 [4,5);
    # step 0 issued at 5: copy back [5,7); B0 waits for it: [7,8).
    # Memory: [0,1) 10; [1,2) s0 4 + o0 6 + o1 6 = 16 (o1 has no reader either);
    # t=2 o0 freed (end of F1, not waiting for the copy out): [2,3) s0 4 + o1 6 + o2 1 = 11.
    prof, pl = _dropout_under_add("keep")
    got = reference_v2(prof, pl)
    assert got.need == (0, None, None)
    assert times(got, COPY_OUT, 0) == (1, 3)
    assert times(got, COPY_BACK, 0) == (5, 7)
    assert got.makespan == 8
    assert got.peak_bytes == 16
    assert got.memory_at(2) == 11 and got.memory_at(5) == 4


def test_shared_output_is_counted_once():
    # add0 out 10 (no flags); relu1 out 5 reads its output, g 10; lin2 out 1 reads
    # its input (x_2 = relu1's output), g 5. fwd = bwd = 1, keep-all.
    # [0,1) o0 10; [1,2) + o1 5 = 15; t=2 o0 freed (no reader): [2,3) o1 5 + o2 1 = 6;
    # t=3 o2 freed, B2 g2 5: 10; B1 [4,5) g1 10: o1 5 + g2 5 + g1 10 = 20 (25 if o1
    # were held once per reader); t=5 o1 (last reader B_1) and g2 freed: 10.
    prof = profile(
        layer("add0", 1, 1, 10),
        layer("relu1", 1, 1, 5, so=True, g=10),
        layer("lin2", 1, 1, 1, si=True, g=5),
    )
    got = reference_v2(prof, plan("keep", "keep", "keep"))
    assert got.peak_bytes == 20
    outputs = [t for t in got.tensors if t.what == "output" and t.layer == 1]
    assert [(t.nbytes, t.alloc, t.free) for t in outputs] == [(5, 1, 5)]
    assert got.memory_at(1.5) == 15 and got.memory_at(2) == 6


def test_forward_and_backward_scratch():
    # One relu, out 3, scratch 7 forward and 11 backward, static 2, keep.
    # F0 [0,1): 2 + o 3 + 7 = 12; t=1 scratch freed: 5; B0 [1,2): + 11 = 16.
    got = reference_v2(
        profile(layer("relu0", 1, 1, 3, so=True, fw=7, bw=11), static=2), plan("keep")
    )
    assert got.peak_bytes == 16
    assert [got.memory_at(t) for t in (0, 1)] == [12, 16]


def test_forward_scratch_in_a_recompute_block():
    # lin0 out 3 (reads the batch); relu1 out 4 reads its output, scratch 7/11, g 3,
    # recomputed: run 1..1, no layer above, u = 1. fwd = bwd = 1.
    # F0 [0,1) o0 3; F1 [1,2) o1 4 + scratch 7 = 14; t=2 both freed: 3;
    # F1' [2,3): regenerated o1 4 + scratch 7 = 14; t=3 scratch and o0 (the block's
    # base, its only reader done) freed: 4; B1 [3,4): g1 3 + scratch 11 = 18;
    # t=4 o1 freed: 3 (g1 until the end of B0); B0 [4,5).
    prof = profile(
        layer("lin0", 1, 1, 3, si=True), layer("relu1", 1, 1, 4, so=True, g=3, fw=7, bw=11)
    )
    got = reference_v2(prof, plan("keep", "recompute"))
    assert got.makespan == 5
    assert got.peak_bytes == 18
    assert [got.memory_at(t) for t in (1, 2, 3, 4)] == [14, 14, 18, 3]


def _three_relus(bwd_above: float) -> dict:
    # relu0 out 8, relu1 and relu2 out 2, each reading its output; fwd 1, bwd of
    # layers 1 and 2 `bwd_above`, of layer 0 1. Link 2 bytes/s, latency 0.5:
    # a copy of relu0 takes 0.5 + 8/2 = 4.5, of relu1 0.5 + 2/2 = 1.5.
    return profile(
        layer("relu0", 1, 1, 8, so=True),
        layer("relu1", 1, bwd_above, 2, so=True),
        layer("relu2", 1, bwd_above, 2, so=True),
        bandwidth=2.0,
        latency=0.5,
    )


@pytest.mark.parametrize(
    ("prefetch", "wait", "makespan", "b0"),
    [
        # F [0,3), copy out [1,5.5), B2 [3,7), B1 [7,11).
        # Issued at step 2 (t=3): copy back [5.5,10), B0 [11,12) without waiting.
        (2, None, 12, (11, 12)),
        # Issued at step 1 (t=7): copy back [7,11.5), B0 waits: [11.5,12.5).
        (1, None, 12.5, (11.5, 12.5)),
        # Issued at step 0 (t=11): copy back [11,15.5), B0 [15.5,16.5).
        (0, None, 16.5, (15.5, 16.5)),
        # swap_wait 1: F1 waits for the copy out: F1 [5.5,6.5), F2 [6.5,7.5),
        # B2 [7.5,11.5), copy back [7.5,12), B1 [11.5,15.5), B0 [15.5,16.5).
        (2, 1, 16.5, (15.5, 16.5)),
        # swap_wait 2: F2 [5.5,6.5), B2 [6.5,10.5), copy back [6.5,11),
        # B1 [10.5,14.5), B0 [14.5,15.5).
        (2, 2, 15.5, (14.5, 15.5)),
    ],
)
def test_prefetch_and_swap_wait(prefetch, wait, makespan, b0):
    got = reference_v2(_three_relus(4), plan(("swap", prefetch, wait), "keep", "keep"))
    assert got.makespan == makespan
    assert times(got, BACKWARD, 0) == b0
    assert times(got, COPY_OUT, 0) == (1, 5.5)


def test_copies_back_of_one_step_go_higher_layer_first_and_in_order():
    # relu0 and relu1 swapped, both prefetched at step 1; B2 takes 1.
    # F0 [0,1), F1 [1,2), F2 [2,3); copy out 0 [1,5.5), copy out 1 [5.5,7).
    # B2 [3,4); step 1 issued at 4: copy back 1 enqueued, then copy back 0.
    # Copy back 1 waits for its copy out: [7,8.5); copy back 0, behind it in the
    # queue, [8.5,13) although its own copy out ended at 5.5.
    # B1 waits for copy back 1: [8.5,12.5); B0 for copy back 0: [13,14).
    prof = _three_relus(4.0)
    prof["layers"][2]["bwd"] = 1
    got = reference_v2(prof, plan(("swap", 1, None), ("swap", 1, None), "keep"))
    assert times(got, COPY_OUT, 1) == (5.5, 7)
    assert times(got, COPY_BACK, 1) == (7, 8.5)
    assert times(got, COPY_BACK, 0) == (8.5, 13)
    assert times(got, BACKWARD, 1) == (8.5, 12.5)
    assert times(got, BACKWARD, 0) == (13, 14)
    assert got.makespan == 14


# -- version 1 ------------------------------------------------------------------


def _v1(*layers: tuple[int, int, int], static: int = 0, bandwidth=1.0, latency=0.0) -> dict:
    """A `/1` profile: each layer `(fwd, bwd, saved_bytes)` (plus no scratch)."""
    return {
        "format": PROFILE_V1,
        "name": "hand-v1",
        "device": {
            "h2d_bandwidth": bandwidth,
            "d2h_bandwidth": bandwidth,
            "transfer_latency": latency,
        },
        "static_bytes": static,
        "layers": [
            {"name": f"l{i}", "fwd": f, "bwd": b, "saved_bytes": s}
            for i, (f, b, s) in enumerate(layers)
        ],
    }


def _as_v2(v1: dict) -> dict:
    """The spec's reading of a `/1` profile, written out as a `/2` document."""
    out = copy.deepcopy(v1)
    out["format"] = PROFILE_V2
    out["layers"] = [
        {
            "name": raw["name"],
            "fwd": raw["fwd"],
            "bwd": raw["bwd"],
            "out_bytes": raw["saved_bytes"],
            "saved_bytes": 0,
            "saves_input": False,
            "saves_output": True,
            "input_grad_bytes": 0,
            "param_grad_bytes": 0,
            "fwd_work_bytes": raw.get("fwd_work_bytes", 0),
            "bwd_work_bytes": raw.get("bwd_work_bytes", 0),
        }
        for raw in v1["layers"]
    ]
    return out


def test_v1_keep_all_by_hand():
    # l0 saves 10, l1 saves 20 (fwd 1, bwd 2); static 5; l1 has forward scratch 3.
    # F0 [0,1): 15; F1 [1,2): 15 + 20 + 3 = 38; B1 [2,4): 35; t=4 o1 freed;
    # B0 [4,6): 15. Makespan 6, peak 38.
    prof = _v1((1, 2, 10), (1, 2, 20), static=5)
    prof["layers"][1]["fwd_work_bytes"] = 3
    got = reference_v2(prof, plan("keep", "keep"))
    assert (got.makespan, got.peak_bytes) == (6, 38)
    assert [got.memory_at(t) for t in (0, 1, 2, 4)] == [15, 38, 35, 15]


def test_v1_recompute_by_hand():
    # l0 recomputed: run 0..0; l1 does not read its input (v1), so u = 0.
    # F0 [0,1) F1 [1,2) | B1 [2,4) | F0' [4,5) B0 [5,7). Peak 5 + 10 + 20 = 35 in F1;
    # t=2 o0 freed (end of F1); t=4 o1 freed; F0' regenerates o0 10 until the end of B0.
    got = reference_v2(_v1((1, 2, 10), (1, 2, 20), static=5), plan("recompute", "keep"))
    assert (got.makespan, got.peak_bytes) == (7, 35)
    assert times(got, RECOMP, 0) == (4, 5)
    assert [got.memory_at(t) for t in (2, 4, 5)] == [25, 15, 15]


def test_v1_swap_by_hand():
    # l0 swapped, prefetched at step 1; link 10 bytes/s, latency 0.5: copies 1.5.
    # F0 [0,1), copy out [1,2.5); F1 [1,2); B1 [2,4); step 1 issued at 2, copy back
    # waits for the copy out: [2.5,4); B0 [4,6). o0 freed at max(2.5, end of F1 2);
    # at 2.5 it is freed before the copy back allocates: 5 + o1 20 + c0 10 = 35.
    got = reference_v2(
        _v1((1, 2, 10), (1, 2, 20), static=5, bandwidth=10.0, latency=0.5),
        plan(("swap", 1, None), "keep"),
    )
    assert (got.makespan, got.peak_bytes) == (6, 35)
    assert times(got, COPY_BACK, 0) == (2.5, 4)
    assert got.need == (0, None)
    assert got.memory_at(2.5) == 35


@pytest.mark.parametrize("seed", range(40))
def test_v1_reads_as_its_v2_reading(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 8)
    v1 = _v1(
        *[(rng.randint(0, 16) / 8, rng.randint(0, 16) / 8, rng.randint(0, 50)) for _ in range(n)],
        static=rng.randint(0, 50),
        bandwidth=rng.choice([1.0, 4.0, 16.0]),
        latency=rng.choice([0.0, 0.125]),
    )
    for raw in v1["layers"]:
        raw["fwd_work_bytes"] = rng.randint(0, 20)
        raw["bwd_work_bytes"] = rng.randint(0, 20)
    for _ in range(4):
        pl = random_valid_plan(rng, v1)
        a, b = reference_v2(v1, pl), reference_v2(_as_v2(v1), pl)
        assert (a.makespan, a.peak_bytes, a.need) == (b.makespan, b.peak_bytes, b.need)
        assert a.operations == b.operations and a.tensors == b.tensors


def _v1_dict(prof) -> dict:
    """A planopt `/1`-read Profile written back as the `/1` document it came from."""
    dev = prof.device
    return {
        "format": PROFILE_V1,
        "name": prof.name,
        "device": {
            "h2d_bandwidth": dev.h2d_bandwidth,
            "d2h_bandwidth": dev.d2h_bandwidth,
            "transfer_latency": dev.transfer_latency,
        },
        "static_bytes": prof.static_bytes,
        "layers": [
            {
                "name": x.name,
                "fwd": x.fwd,
                "bwd": x.bwd,
                "saved_bytes": x.out_bytes,
                "fwd_work_bytes": x.fwd_work_bytes,
                "bwd_work_bytes": x.bwd_work_bytes,
            }
            for x in prof.layers
        ],
    }


def _random_v1_profile(rng: random.Random, seed: int):
    """Chains of all kinds: planopt's families, and general/dyadic ones with ties,
    zero times and infinite bandwidths."""
    if seed % 3 == 0:
        family = FAMILIES[seed // 3 % len(FAMILIES)]
        return random_chain(rng.randint(1, 24), seed=seed, family=family)
    return random_profile(rng, rng.randint(1, 12), exact=seed % 3 == 1)


@pytest.mark.parametrize("seed", range(150))
def test_agrees_with_the_v1_reference_on_v1_chains(seed):
    rng = random.Random(seed)
    v1 = _v1_dict(_random_v1_profile(rng, seed))
    v1_profile = io.load_profile(v1)
    for k in range(4):
        if k % 2:  # planopt's plan generator (its need(i)), as the v1 tests draw them
            pl = io.plan_to_dict(random_plan(rng, v1_profile))
            pl.pop("profile")
        else:
            pl = random_valid_plan(rng, v1)
        got = reference_v2(v1, pl)
        want_time, want_peak = reference_simulate(v1_profile, io.load_plan(pl))
        assert math.isclose(got.makespan, want_time, rel_tol=1e-9, abs_tol=1e-12), pl
        assert got.peak_bytes == want_peak, pl


# -- validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefetch", "wait", "message"),
    [
        (1, None, r"prefetch_at must be in \[need\(0\) = 2, 2\], got 1"),
        (3, None, "prefetch_at must be in"),
        (None, None, "prefetch_at is required"),
        (2, 0, r"swap_wait must be null or in \[1, 2\], got 0"),
        (2, 3, "swap_wait must be null or in"),
        (True, None, "must be an integer layer index"),
    ],
)
def test_plan_ranges_are_checked(prefetch, wait, message):
    # conv0 swapped, relu1 recomputed: the block runs at step 2, so need(0) = 2.
    prof, pl = _case_named("copied only because relu1 above is recomputed")
    pl["layers"][0].update(prefetch_at=prefetch, swap_wait=wait)
    with pytest.raises(ValueError, match=message):
        reference_v2(prof, pl)


def test_bad_documents_are_refused():
    prof, pl = _case(0)
    bad = copy.deepcopy(prof)
    bad["layers"][0]["input_grad_bytes"] = 8
    with pytest.raises(ValueError, match="input_grad_bytes must be 0 for layer 0"):
        reference_v2(bad, pl)
    bad = copy.deepcopy(prof)
    bad["layers"][1]["saves_input"] = 1
    with pytest.raises(ValueError, match="saves_input must be a boolean"):
        reference_v2(bad, pl)
    with pytest.raises(ValueError, match="one entry per profile layer"):
        reference_v2(prof, {"format": PLAN_FORMAT, "layers": pl["layers"][:2]})
    with pytest.raises(ValueError, match="action must be one of"):
        reference_v2(prof, plan("keep", "drop", "keep"))
    with pytest.raises(ValueError, match="only for action swap"):
        reference_v2(
            prof, {"format": PLAN_FORMAT, "layers": [{"action": "keep", "prefetch_at": 1}] * 3}
        )
    with pytest.raises(ValueError, match="name must match"):
        reference_v2(prof, {"format": PLAN_FORMAT, "layers": [{"name": "x", "action": "keep"}] * 3})


# -- the random generators -------------------------------------------------------


@pytest.mark.parametrize("seed", range(60))
def test_random_v2_chains_and_plans_are_valid(seed):
    rng = random.Random(seed)
    prof = random_v2_chain(rng, rng.randint(1, 10), exact=seed % 2 == 0)
    json.dumps(prof)  # plain JSON
    chain = read_profile(prof)
    assert chain.layers[0].input_grad_bytes == 0
    for raw in prof["layers"]:
        saves_in, saves_out, _, _ = V2_KINDS[raw["signature"]]
        assert (raw["saves_input"], raw["saves_output"]) == (saves_in, saves_out)
    io.load_profile(prof)  # planopt reads it too
    t_ideal = sum(x.fwd + x.bwd for x in chain.layers)
    for _ in range(5):
        pl = random_valid_plan(rng, prof)
        read_plan(pl, chain)  # accepted by the reference's own validation
        got = reference_v2(prof, pl)
        assert got.makespan >= t_ideal * (1 - 1e-12)  # spec: no plan is faster than T_ideal
    keep_all = reference_v2(prof, plan(*["keep"] * len(chain.layers)))
    assert math.isclose(keep_all.makespan, t_ideal, rel_tol=1e-12, abs_tol=1e-12)


def test_random_plans_reach_both_ends_of_the_prefetch_range():
    rng = random.Random(7)
    seen_low = seen_high = seen_wait = False
    for _ in range(200):
        prof = random_v2_chain(rng, 6)
        pl = random_valid_plan(rng, prof)
        got = reference_v2(prof, pl)
        for i, entry in enumerate(pl["layers"]):
            if entry["action"] == "swap":
                seen_low |= entry["prefetch_at"] == got.need[i]
                seen_high |= entry["prefetch_at"] == 5
                seen_wait |= entry["swap_wait"] is not None
    assert seen_low and seen_high and seen_wait


def test_kinds_cover_the_flag_mix_of_real_nets():
    flags = {(si, so, inner > 0) for si, so, inner, _ in V2_KINDS.values()}
    # reads its input / its output / internals only / internals and input / nothing
    assert {
        (True, False, False),
        (False, True, False),
        (False, False, True),
        (True, False, True),
    } <= flags


def test_operations_are_event_ordered_and_one_at_a_time():
    rng = random.Random(3)
    for _ in range(50):
        prof = random_v2_chain(rng, rng.randint(1, 8))
        got = reference_v2(prof, random_valid_plan(rng, prof))
        for resource in ("compute", "d2h", "h2d"):
            ops = [o for o in got.operations if o.resource == resource]
            for a, b in itertools.pairwise(ops):
                assert a.end <= b.start
        assert got.op(FORWARD, 0).start == 0
