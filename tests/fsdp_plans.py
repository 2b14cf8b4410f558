"""The worker of the FSDP2 test (`test_runtime_compose.py`), importable by spawned processes.

Each rank shards a small chain block by block with FSDP2 (`fully_shard`) on
the gloo backend, profiles the sharded chain, and runs one step under each
plan with the `Executor`, beside the unplanned FSDP2 step; it reports, per
plan, whether the loss and its gradient shards are bitwise the unplanned
ones, and the tracker's peak beside the simulator's.
"""

from __future__ import annotations

import copy
import datetime
import math
import os
import traceback


def run_rank(rank: int, world: int, store_file: str, plans: list[str], results) -> None:
    """`results.put((rank, {plan: (same loss, same grads, measured, predicted)}))` (and
    under "unsharded profile", the executor's message refusing the unsharded chain's
    profile), or `(rank, traceback text)`."""
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # loopback only
    import torch
    import torch.distributed as dist

    try:
        dist.init_process_group(
            "gloo",
            init_method=f"file://{store_file}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=60),
        )
        torch.set_num_threads(1)
        results.put((rank, _plans(rank, plans)))
    except Exception:  # reported to the parent, which fails the test with it
        results.put((rank, traceback.format_exc()[-3000:]))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _plans(rank: int, plans: list[str]) -> dict[str, object]:
    import torch
    from torch import nn
    from torch.distributed.fsdp import fully_shard
    from torch.nn import functional as F

    import planopt
    from planopt.plan import Action, need_indices
    from planopt.runtime import Chain, Executor, measure, profile

    instant = planopt.Device("instant", math.inf, math.inf, 0.0)
    torch.manual_seed(0)

    def block() -> nn.Module:
        return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 16))

    base = Chain.from_modules([block() for _ in range(4)] + [nn.Linear(16, 4)])
    gen = torch.Generator().manual_seed(10 + rank)
    batch = (torch.randn(8, 16, generator=gen), torch.randint(0, 4, (8,), generator=gen))

    def sharded() -> Chain:
        chain = copy.deepcopy(base)
        for layer in chain.layers:
            fully_shard(layer)
        fully_shard(chain)
        return chain

    prof = profile(sharded(), batch, F.cross_entropy, iterations=1, warmup=0, link=instant)
    # A profile of the unsharded chain does not describe the sharded one: FSDP2 saves
    # the all-gathered weights, a storage of the layer's own. The executor says so.
    unsharded = profile(base, batch, F.cross_entropy, iterations=1, warmup=0, link=instant)
    try:
        with Executor(sharded(), planopt.Plan.keep_all(unsharded), profile=unsharded) as ex:
            ex(batch[0])
        refused = ""
    except planopt.ProfileMismatchError as exc:
        refused = str(exc)
    plain = sharded()
    torch.manual_seed(3)
    want_loss = plain.loss(*batch, F.cross_entropy)
    want_loss.backward()
    want = [p.grad.to_local() for p in plain.parameters()]
    out: dict[str, object] = {"unsharded profile": refused}
    letters = {"k": Action.KEEP, "s": Action.SWAP, "r": Action.RECOMPUTE}
    for text in plans:
        acts = [letters[c] for c in text]
        plan = planopt.Plan.build(acts, need_indices(acts, prof), profile=prof)
        chain = sharded()
        executor = Executor(chain, plan, profile=prof, loss_fn=F.cross_entropy)
        torch.manual_seed(3)
        with executor:
            loss = executor(*batch)
            loss.backward()
        got = [p.grad.to_local() for p in chain.parameters()]
        measured = measure(sharded(), plan, batch, F.cross_entropy, profile=prof, iterations=0)
        out[text] = (
            torch.equal(loss, want_loss),
            all(torch.equal(a, b) for a, b in zip(want, got, strict=True)),
            measured.peak_bytes,
            planopt.simulate(prof, plan).peak_bytes,
        )
    return out
