"""What the counting step found per layer, and the profile layers made from it.

Shared by the real profiler (`planopt.runtime.profiler`) and the fake trace
(`planopt.runtime.fake`), so both write the same fields the same way.
"""

from __future__ import annotations

import torch

from planopt.profile import Layer, Profile, with_signed_scratch
from planopt.runtime.chain import Chain
from planopt.runtime.errors import RuntimeOptionError


class Counts:
    """What the counting step measured, per layer."""

    def __init__(self, n: int) -> None:
        self.out = [0] * n
        self.saved = [0] * n
        self.saves_input = [False] * n
        self.saves_output = [False] * n
        self.modifies_input = [False] * n  # F_i changed x_i in place (the in-place rule)
        self.input_grad = [0] * n
        self.param_grad = [0] * n
        self.fwd_work = [0] * n
        self.bwd_work = [0] * n
        # What B_i frees before its allocations peak, beyond what its scratch
        # absorbs: the negative part of a signed backward scratch, which the
        # spec's non-negative `bwd_work_bytes` cannot say (see `backward_release`).
        self.bwd_release = [0] * n
        self.shapes: list[tuple[tuple[int, ...], str]] = []
        self.seed = 0  # the gradient backward() seeds the loss with


def chain_layers(
    chain: Chain, counts: Counts, fwd: list[float], bwd: list[float]
) -> tuple[Layer, ...]:
    """The profile's layers: measured (or estimated) times beside the counted products."""
    layers = []
    for i in range(len(chain)):
        sig = chain.signatures[i]
        shape, dtype = counts.shapes[i]
        layers.append(
            Layer(
                name=chain.names[i],
                fwd=fwd[i],
                bwd=bwd[i],
                out_bytes=counts.out[i],
                saved_bytes=counts.saved[i],
                saves_input=counts.saves_input[i],
                saves_output=counts.saves_output[i],
                input_grad_bytes=counts.input_grad[i],
                param_grad_bytes=counts.param_grad[i],
                fwd_work_bytes=counts.fwd_work[i],
                bwd_work_bytes=counts.bwd_work[i],
                signature=None if sig is None else f"{sig}|in={dtype}{list(shape)}",
                modifies_input=counts.modifies_input[i],
            )
        )
    return tuple(layers)


def autocast_note(autocast: torch.dtype | None) -> str:
    if autocast is None:
        return ""
    name = str(autocast).removeprefix("torch.")
    return f" Mixed precision: each layer's forward under torch.autocast({name})."


def check_autocast(autocast: torch.dtype | None) -> None:
    if autocast not in (None, torch.bfloat16, torch.float16):
        raise RuntimeOptionError(
            f"autocast must be None, torch.bfloat16 or torch.float16, got {autocast!r}"
        )


# Written into a profile's source when its backward scratch is signed (cost model v3).
SIGNED_NOTE = "Backward scratch signed (cost model v3): minus what each backward frees first."


def sign_scratch(prof: Profile, release: list[int] | tuple[int, ...]) -> Profile:
    """`prof` with each backward's measured `release` as a negative scratch (cost model
    v3, 12.6; down to its floor, `with_signed_scratch`), its source saying so; `prof`
    itself when no backward frees first. Both profilers' `signed_scratch=True`."""
    if not any(release):
        return prof
    signed = with_signed_scratch(prof.layers, release)
    return prof.replace_layers(signed, source=f"{prof.source} {SIGNED_NOTE}")
