"""The fidelity benchmark's signed-scratch study, checked against the tracker.

`signed_scratch_peak` answers a question for the next cost-model version
(what a signed backward scratch would predict); its answer must match what
PyTorch really holds, measured by the live-storage tracker, not by planopt.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import planopt  # noqa: E402
from experiments.bench_fidelity import INSTANT, signed_scratch_peak  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE, SWAP, Plan  # noqa: E402
from planopt.runtime import reference_model  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.profiler import profile_with_release  # noqa: E402

ACTIONS = {"k": KEEP, "r": RECOMPUTE, "s": SWAP}


def _plan(prof: planopt.Profile, actions: str) -> Plan:
    acts = [ACTIONS[c] for c in actions]
    prefetch = [len(acts) - 1 if a is SWAP else None for a in acts]
    return Plan.build(acts, prefetch, [None] * len(acts), profile=prof)


@pytest.mark.parametrize("name", ["mlp", "gpt"])
@pytest.mark.parametrize("actions", ["kkkk", "rkrk", "sksk"])
def test_signed_scratch_predicts_the_tracker_where_v2_over_predicts(name, actions):
    torch.set_num_threads(1)
    ref = reference_model(name, "tiny")
    batch = ref.batch(seed=1)
    prof, release = profile_with_release(
        ref.chain, batch, ref.loss_fn, iterations=1, warmup=0, link=INSTANT, grads_to_none=True
    )
    assert any(release), "these nets have multi-node layers that free inside their backward"
    plan = _plan(prof, actions)
    schedule = planopt.simulate(prof, plan)
    measured = measure(ref.chain, plan, batch, ref.loss_fn, profile=prof, iterations=0, warmup=0)
    assert schedule.peak_bytes > measured.peak_bytes  # v2: safe, but over
    assert signed_scratch_peak(schedule, release) == measured.peak_bytes


def test_signed_scratch_without_release_is_the_v2_peak():
    prof = planopt.random_chain(12, seed=3, version=2)
    for actions in ("k" * 12, "rk" * 6, "ks" * 6):
        schedule = planopt.simulate(prof, _plan(prof, actions))
        assert signed_scratch_peak(schedule, (0,) * 12) == schedule.peak_bytes
