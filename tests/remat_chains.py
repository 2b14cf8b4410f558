"""Random version-2 chains with every flag drawn (shared by the recompute-only tests)."""

from __future__ import annotations

import random

from planopt.profile import Device, Layer, Profile

DEVICE = Device("dev", 1024.0, 1024.0, 0.0)


def random_v2_chain(seed: int, low: int, high: int) -> Profile:
    """A v2 chain of `low`..`high` layers with every flag drawn, zero times included."""
    rng = random.Random(seed)
    layers = []
    for i in range(rng.randint(low, high)):
        layers.append(
            Layer(
                f"l{i}",
                rng.choice([0.0, 0.5, 1.0, 1.5, 3.0]),
                rng.choice([0.0, 1.0, 2.0]),
                out_bytes=rng.randint(1, 60),
                saved_bytes=rng.choice([0, 0, rng.randint(1, 40)]),
                saves_input=rng.random() < 0.5,
                saves_output=rng.random() < 0.5,
                input_grad_bytes=layers[-1].out_bytes if i else 0,
                param_grad_bytes=rng.choice([0, 0, rng.randint(1, 20)]),
                fwd_work_bytes=rng.choice([0, 0, rng.randint(1, 50)]),
                bwd_work_bytes=rng.choice([0, 0, rng.randint(1, 50)]),
            )
        )
    return Profile(f"random{seed}", DEVICE, rng.randint(0, 100), tuple(layers))
