"""A Hugging Face model trained under a plan: the loss curve is plain training's, bit for bit.

Run from the repository root (needs the `torch` and `models` extras; no
weights are downloaded, the model is built from a small config):

    python -m experiments.hf_example                  # GPT-2, 20 AdamW steps, plan at 50%
    python -m experiments.hf_example --model llama --steps 5 --budget 70% --method remat-dp

Two copies of the same `transformers` model (same seed) train on the same
batches in a plain loop: `AdamW`, `zero_grad()`, dropout on. One runs as
written; the other runs each step under a plan made at `--budget` of its
activation memory (`planned_step`, the only planopt-specific part: profile,
solve, execute). The script prints both loss curves side by side and exits
1 if they differ in any bit.

The model is never rewritten: `plan_model` finds its blocks
(`transformer.h`, `model.layers`) and applies the plan to them in place.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

import planopt
from planopt.hardware import gpu
from planopt.report import human_bytes
from planopt.runtime import plan_model
from planopt.runtime.models import lm_loss

VOCAB, SEQ, BATCH, LAYERS = 512, 128, 8, 8
Step = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # forward + backward -> loss


def build_model(family: str, seed: int) -> nn.Module:
    """A small GPT-2 or Llama from `transformers`, random weights from `seed`."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    if family == "gpt2":
        config = GPT2Config(
            vocab_size=VOCAB,
            n_embd=128,
            n_head=4,
            n_layer=LAYERS,
            n_positions=SEQ,
            bos_token_id=None,
            eos_token_id=None,
        )
        config._attn_implementation = "sdpa"
        return GPT2LMHeadModel(config)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=LAYERS,
        max_position_embeddings=SEQ,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config._attn_implementation = "sdpa"
    return LlamaForCausalLM(config)


def batches(steps: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Next-token batches `(ids, targets)` of counting sequences (`start + k * stride` mod
    the vocabulary), which a model learns in a few steps, so the loss curve moves."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        start = torch.randint(VOCAB, (BATCH, 1), generator=gen)
        stride = torch.randint(1, 4, (BATCH, 1), generator=gen)
        ids = (start + stride * torch.arange(SEQ + 1)) % VOCAB
        out.append((ids[:, :-1].contiguous(), ids[:, 1:].contiguous()))
    return out


def plain_step(model: nn.Module) -> Step:
    def step(ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        loss = lm_loss(model(ids).logits, targets)
        loss.backward()
        return loss

    return step


@dataclass(frozen=True)
class Planned:
    step: Step
    summary: str


def planned_step(
    model: nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    budget: str,
    method: str = "greedy",
) -> Planned:
    """The planopt part: `plan_model` profiles the model where it is, solves for
    `budget` with `method` and applies the plan; the step itself is the plain one.

    Gradients are set to None between steps (`zero_grad()`'s default), so
    the profile is measured in that regime. On CPU the plan is made for an
    H100 PCIe's host link (there is no device link to measure here), which
    the copies emulate, so the plan changes memory and time, not the
    arithmetic.
    """
    link = None if batch[0].is_cuda else gpu("h100-pcie").device()

    def loss_fn(output, b: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return lm_loss(output.logits, b[1])

    handle = plan_model(model, batch, loss_fn, budget, method, link=link, iterations=1, warmup=0)
    solution = handle.solution
    if solution.plan is None:
        raise SystemExit(f"hf_example: no plan at {budget}: {solution.message}")
    prof = handle.inplace.profile
    acts = " ".join(a.value[0].upper() for a in solution.plan.actions)
    partial = sum(o is not None for o in solution.plan.options or ())
    options = f", {partial} kept on a partial option (cost model v3)" if partial else ""
    summary = (
        f"plan at {budget} ({solution.status.value}): {acts} (K keep, S swap, R recompute"
        f"{options}; the first and last are the model's code around its blocks); "
        f"predicted peak {human_bytes(solution.schedule.peak_bytes)} against "
        f"{human_bytes(planopt.keep_all_peak(prof))} keeping everything"
    )
    return Planned(plain_step(model), summary)


def train(model: nn.Module, step: Step, data: list, seed: int) -> list[torch.Tensor]:
    """A plain training loop: the losses it saw, one per step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    torch.manual_seed(seed)  # dropout's stream, the same for both runs
    losses = []
    for ids, targets in data:
        loss = step(ids, targets)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.detach())
    return losses


def run(
    family: str = "gpt2",
    steps: int = 20,
    budget: str = "50%",
    seed: int = 0,
    method: str = "greedy",
):
    """`(plain losses, planned losses, plan summary)`."""
    data = batches(steps, seed + 1)
    plain_model, planned_model = build_model(family, seed), build_model(family, seed)
    plain = train(plain_model, plain_step(plain_model), data, seed + 2)
    planned = planned_step(planned_model, data[0], budget, method)
    under_plan = train(planned_model, planned.step, data, seed + 2)
    return plain, under_plan, planned.summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=("gpt2", "llama"), default="gpt2")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--budget", default="50%")
    parser.add_argument("--method", default="greedy", help="see `planopt methods`")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # the same kernels (and sums) for both runs
    plain, planned, summary = run(args.model, args.steps, args.budget, args.seed, args.method)
    print(summary)
    print(f"{'step':>4}  {'plain loss':>12}  {'planned loss':>12}  bitwise equal")
    same = True
    for k, (a, b) in enumerate(zip(plain, planned, strict=True)):
        equal = torch.equal(a, b)
        same &= equal
        print(f"{k:>4}  {a.item():12.8f}  {b.item():12.8f}  {'yes' if equal else 'NO'}")
    print("loss curves identical" if same else "loss curves DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
