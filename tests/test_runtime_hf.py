"""Hugging Face models built from a config (the `models` extra) run as chains under any plan.

The chain must compute what the model computes (its logits, from the same
weights), train exactly like plain PyTorch under a plan that swaps and
recomputes, and the tracker's peak must be the predicted one.
"""

from __future__ import annotations

import copy
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers", reason="needs the models extra (pip install transformers)")
pytestmark = pytest.mark.torch

import planopt  # noqa: E402
from planopt.plan import KEEP, RECOMPUTE, SWAP, need_indices  # noqa: E402
from planopt.runtime import Executor  # noqa: E402
from planopt.runtime.hf import HF_MODELS, hf_model  # noqa: E402
from planopt.runtime.measure import measure  # noqa: E402
from planopt.runtime.profiler import profile  # noqa: E402

INSTANT = planopt.Device("instant", math.inf, math.inf, 0.0)


def test_gpt2_chain_computes_the_models_logits():
    from transformers import GPT2LMHeadModel

    ref = hf_model("gpt2", "tiny")
    chain = ref.chain.eval()
    embed, head = chain.layers[0], chain.layers[-1]
    model = GPT2LMHeadModel(_gpt2_config(ref))
    model.transformer.wte, model.transformer.wpe = embed.wte, embed.wpe
    model.transformer.h = torch.nn.ModuleList(b.block for b in chain.layers[1:-1])
    model.transformer.ln_f, model.lm_head = head.norm, head.head
    model.eval()
    ids, _ = ref.batch()
    with torch.no_grad():
        assert torch.allclose(chain(ids), model(ids).logits, atol=1e-5)


def _gpt2_config(ref):
    from transformers import GPT2Config

    embed = ref.chain.layers[0]
    config = GPT2Config(
        vocab_size=embed.wte.num_embeddings,
        n_embd=embed.wte.embedding_dim,
        n_head=ref.chain.layers[1].block.attn.num_heads,
        n_layer=len(ref.chain) - 2,
        n_positions=embed.wpe.num_embeddings,
        bos_token_id=None,
        eos_token_id=None,
    )
    config._attn_implementation = "sdpa"
    return config


@pytest.mark.parametrize("name", HF_MODELS)
def test_hf_chain_trains_like_plain_pytorch_and_its_peak_is_predicted(name):
    ref = hf_model(name, "tiny")
    batch = ref.batch()
    prof = profile(ref.chain, batch, ref.loss_fn, iterations=1, warmup=0, link=INSTANT)
    n = len(prof)
    acts = [SWAP, RECOMPUTE, KEEP, RECOMPUTE][:n] + [KEEP] * (n - 4)
    plan = planopt.Plan.build(acts, need_indices(acts, prof), profile=prof)
    plain, mine = copy.deepcopy(ref.chain), copy.deepcopy(ref.chain)
    torch.manual_seed(0)
    loss_a = plain.loss(*batch, ref.loss_fn)
    loss_a.backward()
    ex = Executor(mine, plan, profile=prof, loss_fn=ref.loss_fn)
    torch.manual_seed(0)
    with ex:
        loss_b = ex(*batch)
        loss_b.backward()
    assert torch.equal(loss_a, loss_b)  # dropout on: the same mask, replayed
    for p, q in zip(plain.parameters(), mine.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)
    for plan_ in (planopt.Plan.keep_all(prof), plan):
        measured = measure(ref.chain, plan_, batch, ref.loss_fn, profile=prof, iterations=0)
        predicted = planopt.simulate(prof, plan_).peak_bytes
        assert measured.peak_bytes * 0.995 <= predicted <= measured.peak_bytes * 1.02
