"""Model factories for `planopt profile-model module:factory` and `run-check --model` tests.

Each returns what a user's factory returns (`planopt.cli.factory`): a
tuple `(chain, (inputs, targets), loss_fn)` or an object with `chain`,
`loss_fn` and `batch()`; the rest get something wrong on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


def tutorial_cnn(batch: int = 8, seed: int = 0):
    """A tutorial's `nn.Sequential` as written (in-place ReLUs, Flatten), as a tuple."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 8 * 8, 10),
    )
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    return model, (x, y), F.cross_entropy


@dataclass(frozen=True)
class Made:
    chain: nn.Module
    loss_fn: object
    inputs: torch.Tensor
    targets: torch.Tensor

    def batch(self):
        return self.inputs, self.targets


def mlp_object(width: int = 16):
    """The other protocol: an object with `chain`, `loss_fn` and `batch()`."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4))
    return Made(model, F.mse_loss, torch.randn(4, 8), torch.randn(4, 4))


def raises():
    raise RuntimeError("no data folder ./images")


def two_things():
    model, batch, _ = tutorial_cnn()
    return model, batch


def not_a_chain():
    _, batch, loss = tutorial_cnn()
    return "resnet", batch, loss


def bad_batch():
    model, (x, _), loss = tutorial_cnn()
    return model, x, loss


NOT_CALLABLE = 3
