"""Bundled model profiles estimated from layer shapes with a stated roofline model.

`python -m planopt.zoo.build` regenerates `planopt/data/profiles/*-roofline.json`
as cost-model-v2 profiles (`planopt.profile/2`): each layer's output, its
internals, which of its input and output its backward reads, and the
gradient of its input, from what PyTorch autograd saves per operator.

NOTE: the zoo is hand-written, for networks no installed package ships.
Real-model profiles traced from PyTorch (a later step) will replace it
wherever the model exists; what stays here is what no package provides.
"""

from planopt.zoo.chain import Group, Network, Products, products, to_profile
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
    "Products",
    "bert_base",
    "gpt",
    "products",
    "resnet50",
    "to_profile",
    "vgg16",
]
