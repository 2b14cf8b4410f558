"""One training step of a chain, layer by layer: timed, or counted under probes.

`TrainingStep.timed` gives per-layer forward and backward seconds;
`TrainingStep.counted` is the profiler's counting step (what each layer
saves, the gradients its backward writes, its scratch), shared by the real
profiler (`planopt.runtime.profiler`) and the fake trace
(`planopt.runtime.fake`).
"""

from __future__ import annotations

import weakref

import torch
from torch.autograd.graph import saved_tensors_hooks

from planopt.errors import where
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.counts import Counts
from planopt.runtime.errors import ChainError
from planopt.runtime.inputs import check_loss
from planopt.runtime.steps import BackwardSteps
from planopt.runtime.storage import Saves, plain, static_keys, storage_key, storage_nbytes
from planopt.runtime.tracker import LiveMemory, MemoryProbe, at, device_bytes
from planopt.runtime.training import Clock


class TrainingStep:
    """One training step of the chain, layer by layer, with optional probes."""

    def __init__(
        self,
        chain: Chain,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_fn: LossFn,
        autocast: torch.dtype | None = None,
    ) -> None:
        self.chain, self.x, self.y, self.loss_fn = chain, x, y, loss_fn
        self.n = len(chain)
        self.autocast = autocast

    def layer(self, i: int, h: torch.Tensor) -> torch.Tensor:
        """Layer `i`'s forward, under autocast when mixed precision is asked for.

        NOTE: autocast is entered per layer, as a plan's executor would run a
        layer: its cache of cast weights is dropped at each layer's end, so a
        cast weight outlives its layer only where the layer saves it.
        """
        if self.autocast is None:
            out = self.chain.run_layer(i, h, self.y, self.loss_fn)
        else:
            with torch.autocast(h.device.type, dtype=self.autocast):
                out = self.chain.run_layer(i, h, self.y, self.loss_fn)
        if i == self.n - 1:
            check_loss(out, self.loss_fn, "profile")  # the step's backward starts here
        return out

    def timed(self, clock: Clock) -> tuple[list[float], list[float]]:
        """Per-layer forward and backward seconds of one step."""
        n = self.n
        marks = [clock.mark()]
        b_start: list[object] = [None] * n
        b_end: list[object] = [None] * n

        def issue(t: int) -> None:
            b_start[t] = clock.mark()

        def end(t: int) -> None:
            b_end[t] = clock.mark()

        steps = BackwardSteps(n, issue, end)
        h = self.x
        for i in range(n):
            h = self.layer(i, h)
            marks.append(clock.mark())
            steps.watch(i, h)
        h.backward()
        clock.sync()
        fwd = [clock.seconds(marks[i], marks[i + 1]) for i in range(n)]
        bwd = [clock.seconds(b_start[t], b_end[t]) for t in range(n)]
        return fwd, bwd

    def counted(self, probe: MemoryProbe, lives: LiveMemory) -> Counts:
        """The counting step: products, gradients and scratch of every layer.

        `probe` measures scratch (the allocator on CUDA, else `lives`);
        `lives`, the live-storage tracker, says which storages a backward
        step allocated outlive it.
        """
        n = self.n
        chain = self.chain
        counts = Counts(n)
        static = static_keys(chain, (self.x, self.y))
        live: dict[int, weakref.ref] = {}  # products of earlier layers, while they live
        b_start = [0] * n
        start_level = [0]  # the level B_{L-1} starts from, in the model's terms
        grad_bytes = [0] * (n + 1)  # bytes of the gradient of x_i (i = 1 .. n)
        grad_keys = [0] * (n + 1)  # its storage's id, for the tracker

        def issue(t: int) -> None:
            at(f"B_{t}")
            b_start[t] = probe.current() if t < n - 1 else start_level[0]
            probe.reset_peak()

        def end(t: int) -> None:
            # What B_t allocated and still holds, but for the gradient of its input,
            # lives on: parameter gradients (set to None between steps) and
            # gradients waiting in autograd for another contribution (a weight
            # shared with an earlier layer, as GPT-2's tied embedding and head).
            counts.param_grad[t] = lives.alive_from(f"B_{t}", exclude=grad_keys[t : t + 1])
            counts.input_grad[t] = grad_bytes[t] if t > 0 else 0
            grown = probe.peak() - b_start[t]
            signed = grown - counts.input_grad[t] - counts.param_grad[t]
            counts.bwd_work[t] = max(0, signed)
            counts.bwd_release[t] = max(0, -signed)

        def grad_hook(i: int):
            def hook(grad: torch.Tensor) -> None:
                grad_bytes[i] = storage_nbytes(grad)
                grad_keys[i] = id(grad.untyped_storage())

            return hook

        steps = BackwardSteps(n, issue, end)
        h = self.x
        for i in range(n):
            counts.shapes.append((tuple(h.shape), str(h.dtype).removeprefix("torch.")))
            known = frozenset(k for k, ref in live.items() if _alive(ref, k))
            saves = Saves(static, storage_key(h) if i > 0 else 0, known)

            def pack(t: torch.Tensor, saves: Saves = saves) -> torch.Tensor:
                saves.add(t)
                return plain(t)

            at(f"F_{i}")
            start = probe.current()
            probe.reset_peak()
            version = h._version
            with saved_tensors_hooks(pack, _identity):
                out = self.layer(i, h)
            # Its input changed in place (its version counter moved): the in-place rule.
            counts.modifies_input[i] = h._version != version
            grown = probe.peak() - start
            _check_output(chain, i, h, out, static)
            saves.classify(out)
            if saves.foreign:
                raise ChainError(
                    f"{where(i, chain.names[i])}: a layer must save only its input, its "
                    "output, parameters, buffers, the batch or tensors it creates, got "
                    f"{len(saves.foreign)} storage(s) created before its forward by another "
                    "layer (a module-level cache?); the cost model cannot place them"
                )
            counts.out[i] = storage_nbytes(out)
            counts.saved[i] = saves.internal_bytes()
            counts.saves_input[i] = saves.saves_input
            counts.saves_output[i] = saves.saves_output
            counts.fwd_work[i] = max(0, grown - counts.out[i] - counts.saved[i])
            # (a comprehension: a loop variable would keep the last tensor alive)
            live.update({k: weakref.ref(v.untyped_storage()) for k, v in saves.tensors.items()})
            live[storage_key(out)] = weakref.ref(out.untyped_storage())
            saves.release()
            del saves
            if i + 1 < n and out.requires_grad:
                out.register_hook(grad_hook(i + 1))  # before the step hook, which reads it
            steps.watch(i, out)
            h = out
        # The loss and the gradient backward() seeds it with stay alive through
        # the backward: static_bytes counts both (`StaticBytes.loss`), so the
        # model's level as B_{L-1} starts is the real one plus the seed, and
        # B_{L-1}'s scratch is measured from there.
        counts.seed = device_bytes(h.numel() * h.element_size(), h.device)
        start_level[0] = probe.current() + counts.seed
        h.backward()
        return counts


def _alive(ref: weakref.ref, key: int) -> bool:
    storage = ref()
    return storage is not None and storage._cdata == key


def _check_output(chain: Chain, i: int, x: torch.Tensor, out: torch.Tensor, static) -> None:
    key = storage_key(out)
    if i > 0 and key == storage_key(x):
        raise ChainError(
            f"{where(i, chain.names[i])}: a layer's output must be a new tensor, got a view "
            "or an in-place result of its input; merge this module into the layer before "
            "(Chain does so itself for Identity, Flatten, Unflatten, in-place modules and "
            "dropout with p=0)"
        )
    if key in static:
        raise ChainError(
            f"{where(i, chain.names[i])}: a layer's output must be a new tensor, got a "
            "parameter, a buffer or the batch"
        )


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t
