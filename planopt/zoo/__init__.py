"""Bundled model profiles estimated from layer shapes with a stated roofline model.

`python -m planopt.zoo.build` regenerates `planopt/data/profiles/*-roofline.json`
as cost-model-v2 profiles (`planopt.profile/2`): each layer's output, its
internals, which of its input and output its backward reads, and the
gradient of its input, from what PyTorch autograd saves per operator.

NOTE: the zoo is hand-written, for what no installed package ships:
ResNet-50, BERT-base and GPT-2 cut per operator, GPT-2-style decoders of 24
and 48 blocks at d_model 768. Where the real model exists at the same
configuration and cut (VGG-16, ResNet-50 by blocks) the bundled profile is
traced from it (`python -m planopt.runtime.bundle`; GPT-2 and BERT-base
by blocks are bundled so too, as `*-traced`); the zoo's descriptions of
those stay as test cases of its operator rules (`build.SUPERSEDED`).
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
