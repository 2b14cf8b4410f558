"""Regenerate the bundled hand-written roofline profiles: `python -m planopt.zoo.build [folder]`.

The output is deterministic (byte-identical on re-run); a test checks the
committed files against it. Only `ZOO` is written: the models that exist in
a package at the same configuration and cut (VGG-16, ResNet-50 by blocks)
are traced from the real model instead (`python -m planopt.runtime.bundle`,
same names); their hand-written descriptions stay as `SUPERSEDED`, test
cases of the zoo's operator rules. The per-operator cuts (ResNet-50, BERT,
GPT) and the 24/48-block GPTs exist in no package: they stay here.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planopt.io import profile_to_dict
from planopt.profile import Profile
from planopt.zoo.chain import Network, to_profile
from planopt.zoo.cnn import resnet50, vgg16
from planopt.zoo.roofline import A100_PCIE4, H100_PCIE5, Hardware
from planopt.zoo.transformer import bert_base, gpt

PROFILES_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"


@dataclass(frozen=True, slots=True)
class Entry:
    """One bundled file: which network, at which size, on which device preset."""

    name: str
    network: Callable[[], Network]
    hardware: Hardware

    def profile(self) -> Profile:
        return to_profile(self.network(), self.hardware, name=self.name)


# NOTE: the CNNs on the A100-40GB (the ResNet-50 batch matches the measured
# PipeDream profile), the transformers on the H100-80GB. Each file's source
# states its static and activation GiB next to the device memory.
ZOO: tuple[Entry, ...] = (
    Entry(
        "resnet50-ops-b128-a100-pcie4-roofline",
        lambda: resnet50(128, per_operator=True),
        A100_PCIE4,
    ),
    Entry("bert-base-b32-s512-h100-pcie5-roofline", lambda: bert_base(32, 512), H100_PCIE5),
    Entry("gpt-12blk-b8-s1024-h100-pcie5-roofline", lambda: gpt(12, 8, 1024), H100_PCIE5),
    Entry("gpt-24blk-b8-s1024-h100-pcie5-roofline", lambda: gpt(24, 8, 1024), H100_PCIE5),
    Entry("gpt-48blk-b8-s1024-h100-pcie5-roofline", lambda: gpt(48, 8, 1024), H100_PCIE5),
)
# Hand-written descriptions of models now traced from the real ones (module doc):
# not written to files; the zoo's tests check its operator rules on them.
SUPERSEDED: tuple[Entry, ...] = (
    Entry("vgg16-b64-a100-pcie4-roofline", lambda: vgg16(64), A100_PCIE4),
    Entry(
        "resnet50-blocks-b128-a100-pcie4-roofline",
        lambda: resnet50(128, per_operator=False),
        A100_PCIE4,
    ),
)


def render(profile: Profile) -> str:
    """The file text: header fields indented, one layer per line (small, diff-friendly)."""
    data = profile_to_dict(profile)
    layers = data.pop("layers")
    head = json.dumps(data, indent=1)[: -len("\n}")]
    body = ",\n".join("  " + json.dumps(layer) for layer in layers)
    return f'{head},\n "layers": [\n{body}\n ]\n}}\n'


def rendered() -> dict[str, str]:
    """File name -> text for every zoo entry."""
    return {f"{entry.name}.json": render(entry.profile()) for entry in ZOO}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else PROFILES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for filename, text in rendered().items():
        (folder / filename).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
