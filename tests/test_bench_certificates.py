"""The certificate benchmark's pieces: decoders regrouped per block, and the verdicts."""

from __future__ import annotations

from experiments.bench_certificates import _verdict, per_block
from planopt.certificate import LP, T_IDEAL, Certificate
from planopt.zoo import gpt


def test_per_block_merges_each_decoder_blocks_operators():
    net = gpt(3, 1, 64, vocab=100)
    merged = per_block(net)
    assert [g.name for g in merged.groups] == [
        "embed", "block0", "block1", "block2", "ln_f", "lm_head", "loss"
    ]  # fmt: skip
    assert sum(len(g.ops) for g in merged.groups) == sum(len(g.ops) for g in net.groups)


def test_verdicts_name_the_target_and_why_a_row_misses():
    lp = Certificate(LP, True)
    assert _verdict(600, 0.030, 0.025, None, None, lp, 1.0) == "bound: meets"
    missed = _verdict(940, 0.19, 0.12, None, None, Certificate(T_IDEAL, False), 0.4)
    assert missed.startswith("bound: misses (7.00 pp behind; at 5 s t-ideal, cut short")
    assert "n/a (> 1,000 layers; it misses it)" in _verdict(2000, 0.2, 0.1, None, None, lp, 1)
    assert _verdict(100, 0.01, 0.01, 0.02, 0.005, lp, 1) == "bound: meets; blocks: meets"
    assert "blocks: misses" in _verdict(100, 0.01, 0.01, 0.05, 0.005, lp, 1)
    assert "blocks: n/a" in _verdict(100, 0.01, 0.01, 0.05, 0.02, lp, 1)
