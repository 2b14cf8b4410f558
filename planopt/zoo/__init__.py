"""Bundled model profiles estimated from layer shapes with a stated roofline model.

`python -m planopt.zoo.build` regenerates `planopt/data/profiles/*-roofline.json`.
"""

from planopt.zoo.chain import Group, Network, to_profile
from planopt.zoo.cnn import resnet50, vgg16
from planopt.zoo.roofline import A100_PCIE4, H100_PCIE5, PRESETS, Hardware
from planopt.zoo.transformer import bert_base, gpt

__all__ = [
    "A100_PCIE4",
    "H100_PCIE5",
    "PRESETS",
    "Group",
    "Hardware",
    "Network",
    "bert_base",
    "gpt",
    "resnet50",
    "to_profile",
    "vgg16",
]
