"""Block menus on real blocks: the exact front, what the tracker sees, what the replay costs.

    python -m experiments.bench_menus            # results/menus.md (a few minutes on CPU)

For each block (the reference GPT block, transformers' GPT2Block and
LlamaDecoderLayer called with the keyword arguments their models pass them,
`small` sizes on CPU):

1. `trace_block` (thread-time clock, median of 5 runs): operators,
   internal storages, the replay's cut, the whole layer's internals `s`,
   and the exact front (`OpProfile.menu`).
2. every entry of the front run under `torch.utils.checkpoint` with its SAC
   policy (`planopt.runtime.sac.held_under_policy`): the live-storage
   tracker's bytes held between forward and backward against `h_k`
   (equal / over / under counts: the test suite fails on any difference).
3. the front thinned to 8 entries (what `profile()` attaches): `h_k`,
   predicted `r_k`, and the replay checkpoint really runs, timed on the
   thread's CPU clock (median of 5), beside the block's plain forward.
4. the same blocks at GPT-2 size (d=768, batch 8, sequence 1024) traced
   under `FakeTensorMode` as `profile-model` traces them (sizes as the CUDA
   allocator rounds them, the GPU's attention and dropout kernels, bf16
   autocast), roofline times on an H100: the thinned front against the
   block's roofline forward.

Timing is reported, never asserted (the machine is shared).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

import torch

from planopt.hardware import gpu
from planopt.runtime.models import reference_model
from planopt.runtime.opprofile import called_with, trace_block
from planopt.runtime.sac import held_under_policy
from planopt.sacmenu import thin

RESULTS = Path(__file__).parent / "results"


def _hf(kind: str, d: int, heads: int, seq: int, batch: int, fake=None):
    import transformers

    if kind == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=97,
            n_embd=d,
            n_head=heads,
            n_layer=1,
            n_positions=seq,
            bos_token_id=None,
            eos_token_id=None,
        )
    else:
        config = transformers.LlamaConfig(
            vocab_size=97,
            hidden_size=d,
            intermediate_size=4 * d,
            num_attention_heads=heads,
            num_key_value_heads=max(1, heads // 2),
            num_hidden_layers=1,
            max_position_embeddings=seq,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
        )
    config._attn_implementation = "sdpa"
    model = (transformers.GPT2Model if kind == "gpt2" else transformers.LlamaModel)(config)
    layer = model.h[0] if kind == "gpt2" else model.layers[0]
    ids = torch.randint(97, (batch, seq))
    args, kwargs = called_with(model.train(), layer, input_ids=ids, use_cache=False)
    return layer, args[0].detach(), kwargs


def blocks():
    torch.manual_seed(0)
    yield (
        "reference GPT block (d=128, b=8, s=64)",
        reference_model("gpt", "small").chain.layers[1],
        torch.randn(8, 64, 128),
        {},
    )
    yield ("transformers GPT2Block (d=128, b=8, s=64)", *_hf("gpt2", 128, 4, 64, 8))
    yield ("transformers LlamaDecoderLayer (d=128, b=8, s=64)", *_hf("llama", 128, 4, 64, 8))


def _tensors(kwargs):
    out = []
    for v in kwargs.values():
        items = v if isinstance(v, tuple) else (v,)
        out += [t for t in items if isinstance(t, torch.Tensor)]
    return out


def _plain_forward(block, x, kwargs, repeats=5) -> float:
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        with torch.no_grad():
            block(x, **kwargs)
        times.append(time.thread_time() - start)
    return statistics.median(times)


def measured(lines: list[str]) -> None:
    for name, block, x, kwargs in blocks():
        block.train()
        x = x.requires_grad_(True)
        ops = trace_block(block, (x,), kwargs, static=_tensors(kwargs), repeats=5, timer="thread")
        front = ops.menu()
        equal = over = under = 0
        for entry in front:
            run = held_under_policy(
                block, x.detach().clone().requires_grad_(True), entry.policy, kwargs
            )
            equal += run.held == entry.saved_bytes
            over += run.held < entry.saved_bytes
            under += run.held > entry.saved_bytes
        forward = _plain_forward(block, x, kwargs)
        lines += [
            f"### {name}",
            "",
            f"{len(ops.ops)} operators (as SAC's policy sees them), {len(ops.storage_bytes)} "
            f"internal storages, replay cut at {ops.cut}; whole layer keeps s = "
            f"{ops.saved_bytes:,} B; plain forward {forward * 1e3:.3f} ms (thread time); "
            f"Python between operators (always replayed) {ops.overhead() * 1e3:.3f} ms.",
            "",
            f"Exact front: **{len(front)} entries**. Tracker under checkpoint with each entry's "
            f"policy: **{equal} equal, {over} over-predicted, {under} under-predicted**.",
            "",
            "| entry | h_k (B) | h_k / s | r_k predicted (ms) | replay measured (ms) | saved ops |",
            "|---|---|---|---|---|---|",
        ]
        for k, entry in enumerate(thin(front, 8)):
            replays = []
            for _ in range(5):
                xx = x.detach().clone().requires_grad_(True)
                replays.append(held_under_policy(block, xx, entry.policy, kwargs, "thread").replay)
            lines.append(
                f"| sac{k} | {entry.saved_bytes:,} | {entry.saved_bytes / ops.saved_bytes:.1%} | "
                f"{entry.recompute * 1e3:.3f} | {statistics.median(replays) * 1e3:.3f} | "
                f"{len(entry.policy)} |"
            )
        lines.append("")


def traced(lines: list[str]) -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from planopt.runtime.attention import gpu_kernels
    from planopt.runtime.fake import faked
    from planopt.runtime.tracker import tracing_for

    record = gpu("h100-pcie")
    for kind, title in (("gpt2", "GPT2Block"), ("llama", "LlamaDecoderLayer")):
        torch.manual_seed(0)
        mode = FakeTensorMode()
        layer, x, kwargs = _hf(kind, 768, 12, 1024, 8)
        with faked(layer, mode), tracing_for("cuda"), gpu_kernels(), mode:
            fx = mode.from_tensor(x).requires_grad_(True)
            fk = {k: _fake(v, mode) for k, v in kwargs.items()}
            with torch.autocast("cpu", dtype=torch.bfloat16):
                ops = trace_block(
                    functools.partial(layer, **fk),
                    (fx,),
                    static=[*layer.parameters(), *_tensors(fk)],
                    gpu=record,
                )
        front = ops.menu()
        total = sum(o.seconds for o in ops.ops)
        lines += [
            f"### {title}, d=768, batch 8, sequence 1024, bf16 autocast, roofline on {record.name}",
            "",
            f"{len(ops.ops)} operators, whole layer keeps s = {ops.saved_bytes / 2**20:.1f} MiB, "
            f"roofline forward {total * 1e3:.3f} ms; exact front: **{len(front)} entries**.",
            "",
            "| entry | h_k (MiB) | h_k / s | r_k (ms) | r_k / forward |",
            "|---|---|---|---|---|",
        ]
        for k, entry in enumerate(thin(front, 8)):
            lines.append(
                f"| sac{k} | {entry.saved_bytes / 2**20:.1f} | "
                f"{entry.saved_bytes / ops.saved_bytes:.1%} | {entry.recompute * 1e3:.3f} | "
                f"{entry.recompute / total:.1%} |"
            )
        lines.append("")


def _fake(value, mode):
    if isinstance(value, torch.Tensor):
        return mode.from_tensor(value)
    if isinstance(value, tuple):
        return tuple(_fake(v, mode) for v in value)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "menus.md")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    lines = [
        "# Block menus: exact fronts, tracker agreement, replay time",
        "",
        "Made by `python -m experiments.bench_menus` (torch "
        f"{torch.__version__}, CPU, one thread). h_k: bytes a block holds between its forward "
        "and backward under `torch.utils.checkpoint` with the entry's SAC policy; r_k: "
        "predicted replay seconds (the unsaved operators before the cut, plus the Python "
        "between operators, which every replay runs).",
        "",
        "## Real blocks on CPU",
        "",
    ]
    measured(lines)
    lines += ["## GPT-2-size blocks traced for a GPU (FakeTensorMode, roofline)", ""]
    traced(lines)
    args.out.write_text("\n".join(lines))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
