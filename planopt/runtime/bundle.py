"""Regenerate the bundled profiles of real models: `python -m planopt.runtime.bundle [folder]`.

Each is traced from the model itself at its published configuration
(`planopt.runtime.catalogue`, `trace_profile`): memory exactly as the
runtime profiler counts it, times by roofline on the named GPU. They replace
the hand-written zoo (`planopt.zoo`) wherever the real model exists at the
same configuration and cut, under the same bundled names (VGG-16, ResNet-50
by blocks); GPT-2 small and BERT-base are added cut by blocks (`-traced`),
beside the zoo's per-operator cuts of them, which no package ships and
which stay hand-written (as do the GPT-2-style decoders of 24 and 48 blocks
at d_model 768). Needs torch and transformers. Deterministic for one
torch and transformers version (the torch version is in each source).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from planopt.hardware import gpu
from planopt.profile import Profile
from planopt.runtime.catalogue import build_fake
from planopt.runtime.fake import trace_profile
from planopt.zoo.build import PROFILES_DIR, render


@dataclass(frozen=True, slots=True)
class Traced:
    """One bundled file: which model, batch, sequence length, GPU; fp16 autocast."""

    name: str
    model: str
    batch: int
    seq: int | None
    gpu: str

    def profile(self, menus: bool = False, signed_scratch: bool = False) -> Profile:
        """The traced profile; `menus=True` adds each block's menu and `signed_scratch=True`
        signs the backward scratch (either: a /3 profile); the bundled files stay
        whole-block /2, every reader reads them (`experiments/selective.py` traces both)."""
        built = build_fake(self.model, self.batch, self.seq)
        return trace_profile(
            built.chain,
            built.batch,
            built.loss_fn,
            gpu=gpu(self.gpu),
            autocast=torch.float16,
            name=self.name,
            menus=menus,
            signed_scratch=signed_scratch,
        )


# NOTE: the names and configurations of the zoo files they replace (tests and
# the experiments name them), fp16 as the zoo's; the transformers at the zoo's
# batch and sequence length.
TRACED: tuple[Traced, ...] = (
    Traced("vgg16-b64-a100-pcie4-roofline", "torchvision:vgg16", 64, None, "a100-pcie4"),
    Traced(
        "resnet50-blocks-b128-a100-pcie4-roofline", "torchvision:resnet50", 128, None, "a100-pcie4"
    ),
    Traced("bert-base-b32-s512-h100-pcie5-traced", "hf:bert-base", 32, 512, "h100-pcie5"),
    Traced("gpt2-b8-s1024-h100-pcie5-traced", "hf:gpt2", 8, 1024, "h100-pcie5"),
)


def rendered() -> dict[str, str]:
    """File name -> text for every traced entry."""
    return {f"{entry.name}.json": render(entry.profile()) for entry in TRACED}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else PROFILES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for filename, text in rendered().items():
        (folder / filename).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
