"""The GPU run's models: the reference chains, and transformers decoders at real training sizes.

Every model is built from a config with random weights (no download; the
device machine reaches no network): the four reference models
(`planopt.runtime.models`, size `gpu`, or `tiny` for the CPU smoke run) and
three decoders from `transformers`, cut into chains by `planopt.runtime.hf`:

* `hf-gpt2`: GPT-2 small (124M; d 768, 12 layers, vocab 50257), 8 x 1024 tokens;
* `hf-llama`: Llama-3.2-1B-shaped (d 2048, 16 layers, 32 heads, 8 KV heads,
  MLP 8192, vocab 128256, tied head), 4 x 2048 tokens;
* `hf-qwen2`: Qwen2-0.5B-shaped (d 896, 24 layers, 14 heads, 2 KV heads, MLP
  4864, vocab 151936, tied head), 4 x 2048 tokens;

each in bf16 autocast. NOTE (autocast): the executor has no autocast
option, and a `torch.autocast` around a whole step keeps every cast weight
to its end, which the profiler's per-layer autocast does not; so each layer
and the loss are wrapped in their own `torch.autocast` (`Autocast`), and the
profile, the executor and plain PyTorch all run exactly the same forward.

`gpu_record(name)` finds the `planopt.hardware` record of the GPU torch
reports (by name); `environment()` names the GPU, driver, CUDA and torch.
"""

from __future__ import annotations

import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from planopt.hardware import GPU, H100_PCIE5, H100_SXM, H200_SXM
from planopt.runtime import Chain, reference_model
from planopt.runtime.hf import chain_of_llama, gpt2_chain, hf_available, llama_chain
from planopt.runtime.models import REFERENCE_MODELS, ReferenceModel, lm_loss

HF_GPU = ("hf-gpt2", "hf-llama", "hf-qwen2")

# name -> (real size, tiny size): config and batch
_HF_SIZES: dict[str, tuple[dict, dict]] = {
    "hf-gpt2": (
        dict(vocab=50257, d=768, heads=12, layers=12, seq=1024, batch=8),
        dict(vocab=97, d=32, heads=2, layers=2, seq=16, batch=2),
    ),
    "hf-llama": (
        dict(vocab=128256, d=2048, heads=32, kv_heads=8, layers=16, seq=2048, batch=4,
             intermediate=8192, tie=True),
        dict(vocab=97, d=32, heads=4, kv_heads=2, layers=2, seq=16, batch=2, intermediate=64,
             tie=True),
    ),
    "hf-qwen2": (
        dict(vocab=151936, d=896, heads=14, kv_heads=2, layers=24, seq=2048, batch=4,
             intermediate=4864),
        dict(vocab=97, d=32, heads=4, kv_heads=2, layers=2, seq=16, batch=2, intermediate=64),
    ),
}  # fmt: skip


@dataclass(frozen=True)
class GpuModel:
    """A model of the run: how to build it, and the autocast its layers run under."""

    key: str
    build: Callable[[], ReferenceModel]
    autocast: torch.dtype | None = None
    config: str = ""


class Autocast(nn.Module):
    """`module`'s forward under `torch.autocast(dtype)` of its input's device (module NOTE)."""

    def __init__(self, module: nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        self.module = module
        self.dtype = dtype

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(h.device.type, dtype=self.dtype):
            return self.module(h)


def autocast_chain(chain: Chain, dtype: torch.dtype) -> Chain:
    """The same layers, names and signatures, each under its own autocast."""
    return Chain([Autocast(m, dtype) for m in chain.layers], chain.names, chain.signatures)


def autocast_loss(loss_fn, dtype: torch.dtype):
    def loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with torch.autocast(out.device.type, dtype=dtype):
            return loss_fn(out, target)

    return loss


def qwen2_chain(
    vocab: int, d: int, heads: int, kv_heads: int, layers: int, seq: int, intermediate: int
) -> Chain:
    """Qwen2 (the Llama block with biased QKV projections), tied head, cut as Llama."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab,
        hidden_size=d,
        intermediate_size=intermediate,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        num_hidden_layers=layers,
        max_position_embeddings=seq,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    config._attn_implementation = "sdpa"
    sig = f"qwen2-block(d={d},heads={heads},kv={kv_heads},seq={seq})"
    return chain_of_llama(Qwen2ForCausalLM(config), block_signature=sig)


def hf_gpu_model(key: str, tiny: bool, seed: int = 0) -> ReferenceModel:
    """One of `HF_GPU` (module doc), its layers and loss under bf16 autocast."""
    cfg = dict(_HF_SIZES[key][1 if tiny else 0])
    batch = cfg.pop("batch")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if key == "hf-gpt2":
            chain = gpt2_chain(**cfg)
        elif key == "hf-llama":
            chain = llama_chain(**cfg)
        else:
            chain = qwen2_chain(**cfg)
    vocab, seq = cfg["vocab"], cfg["seq"]

    def make(gen: torch.Generator, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.randint(vocab, (b, seq + 1), generator=gen)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    dtype = torch.bfloat16
    return ReferenceModel(
        key,
        "tiny" if tiny else "real",
        autocast_chain(chain, dtype),
        autocast_loss(lm_loss, dtype),
        batch,
        make,
    )


def _describe(cfg: dict) -> str:
    cfg = dict(cfg)
    batch, seq = cfg.pop("batch"), cfg.pop("seq")
    return f"{batch}x{seq} tokens, " + ", ".join(f"{k} {v}" for k, v in cfg.items())


def reference_models(tiny: bool, seed: int = 0) -> list[GpuModel]:
    size = "tiny" if tiny else "gpu"
    return [
        GpuModel(name, lambda n=name: reference_model(n, size, seed=seed), None, f"size {size}")
        for name in REFERENCE_MODELS
    ]


def hf_models(tiny: bool, seed: int = 0) -> list[GpuModel]:
    """The transformers decoders, or none where transformers does not import."""
    if not hf_available():
        return []
    return [
        GpuModel(
            key,
            lambda k=key: hf_gpu_model(k, tiny, seed),
            torch.bfloat16,
            _describe(_HF_SIZES[key][1 if tiny else 0]) + ", bf16 autocast",
        )
        for key in HF_GPU
    ]


# -- the machine ------------------------------------------------------------------------


def gpu_record(device_name: str) -> tuple[GPU, str]:
    """The `planopt.hardware` record of a GPU torch names, and how it was chosen."""
    name = device_name.lower()
    if "h200" in name:
        return H200_SXM, "matched by name"
    if "h100" in name:
        if "pcie" in name:
            return H100_PCIE5, "matched by name"
        return H100_SXM, "matched by name (HBM3: the SXM part)"
    return H100_SXM, f"no record for {device_name!r}: h100-sxm used as a stand-in"


def _driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        return out.stdout.strip() or "unknown (nvidia-smi printed nothing)"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({type(exc).__name__})"


def environment(device: torch.device) -> dict[str, str]:
    """GPU, driver, CUDA and torch versions (or the CPU, for the smoke run)."""
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.system()}",
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except Exception:
        env["transformers"] = "not importable"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["gpu"] = torch.cuda.get_device_name(device)
        env["gpu_memory"] = f"{props.total_memory / 2**30:.1f} GiB"
        env["multiprocessors"] = str(props.multi_processor_count)
        env["driver"] = _driver()
        env["cuda"] = str(torch.version.cuda)
        env["cudnn"] = str(torch.backends.cudnn.version())
    else:
        env["gpu"] = f"none (CPU smoke run on {platform.processor() or platform.machine()})"
        env["driver"] = "-"
        env["cuda"] = "-"
    return env


def header(env: dict[str, str], record: GPU, how: str) -> str:
    """One line naming the machine, for the top of every table."""
    return (
        f"GPU: **{env['gpu']}**, driver {env['driver']}, CUDA {env['cuda']}, torch "
        f"{env['torch']}, transformers {env['transformers']}, Python {env['python']}. "
        f"planopt.hardware record: `{record.name}` ({how})."
    )
