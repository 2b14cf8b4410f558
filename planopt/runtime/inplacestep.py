"""One training step of a model as written, its regions marked: timed, or counted under probes.

The regions are `planopt.runtime.inplace`'s layers: the prefix (layer 0,
up to the first block's call), each block (its call, and any code up to the
next block's), the suffix (after the last block, the loss included). Blocks'
`forward`s are wrapped on the instance for the step only (`Patched`).

The counting step classifies every storage autograd saves by the region
that made it (the live-storage tracker's label at its allocation), as
`planopt.runtime.storage` does for a chain, and reads each region's scratch
from a memory probe over its forward window and its backward step.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks

from planopt.errors import where
from planopt.profile import Layer
from planopt.runtime.counting import ChainError
from planopt.runtime.modelblocks import ModelBlocks
from planopt.runtime.regions import (
    Batch,
    Patched,
    batch_tensors,
    first_tensor,
    hidden_input,
    step_loss,
)
from planopt.runtime.steps import BackwardSteps
from planopt.runtime.storage import plain, static_keys, storage_key, storage_nbytes
from planopt.runtime.tracker import LiveMemory, MemoryProbe, at, device_bytes
from planopt.runtime.training import Clock

PREFIX, SUFFIX = "prefix", "suffix"


class _Region:
    """What one region of the counted step saved and produced."""

    def __init__(self) -> None:
        self.saved: dict[int, tuple[int, str]] = {}  # storage key -> (bytes, born label)
        self.input_key = 0
        self.out_key = 0
        self.out_bytes = 0
        self.shape: tuple[tuple[int, ...], str] = ((), "")
        self.start = 0
        self.grown = 0


class InstrumentedStep:
    """One step of the model with its regions marked: timed, or counted under probes."""

    def __init__(self, model: nn.Module, blocks: ModelBlocks, batch: Batch, loss_fn) -> None:
        self.model, self.blocks, self.batch, self.loss_fn = model, blocks, batch, loss_fn
        self.n = len(blocks) + 2
        # Region r changed its input in place during its forward (the input's
        # version counter moved): `Layer.modifies_input`, the in-place rule.
        self.modified: dict[int, bool] = {}

    def _run(self, on_enter, on_exit) -> torch.Tensor:
        self.entered: set[int] = set()
        patched = Patched()
        try:
            for b, module in enumerate(self.blocks.modules):
                patched.patch(module, self._wrap(b + 1, on_enter, on_exit))
            loss = step_loss(self.model, self.batch, self.loss_fn)
        finally:
            patched.restore()
        return loss

    def _wrap(self, r: int, on_enter, on_exit):
        blocks = self.blocks

        def make(original):
            def forward(*args, **kwargs):
                x = hidden_input(args, kwargs)
                if x is None:
                    raise ChainError(
                        f"{where(r, blocks.names[r - 1])}: a block must be called with its "
                        "hidden state as a tensor (first argument or hidden_states=)"
                    )
                if r in self.entered:
                    raise ChainError(
                        f"{where(r, blocks.names[r - 1])}: a block must run once per step, got "
                        "a second call (a shared block): give blocks= the modules that run once"
                    )
                self.entered.add(r)
                on_enter(r, x)
                version = x._version
                out = original(*args, **kwargs)
                self.modified[r] = x._version != version
                h = first_tensor(out)
                if h is None:
                    raise ChainError(
                        f"{where(r, blocks.names[r - 1])}: a block must return a tensor or a "
                        f"tuple whose first element is a tensor, got {type(out).__name__}"
                    )
                on_exit(r, h)
                return out

            return forward

        return make

    # -- timed ----------------------------------------------------------------

    def timed(self, clock: Clock) -> tuple[list[float], list[float]]:
        n = self.n
        marks: list[object] = [None] * (n + 1)
        b_start: list[object] = [None] * n
        b_end: list[object] = [None] * n

        def issue(t: int) -> None:
            b_start[t] = clock.mark()

        def end(t: int) -> None:
            b_end[t] = clock.mark()

        steps = BackwardSteps(n, issue, end)

        def on_enter(r: int, x: torch.Tensor) -> None:
            marks[r] = clock.mark()  # the region before ends where this block starts
            if r == 1:
                steps.watch(0, x)

        def on_exit(r: int, h: torch.Tensor) -> None:
            steps.watch(r, h)
            if r == n - 2:
                marks[n - 1] = clock.mark()

        marks[0] = clock.mark()
        loss = self._run(on_enter, on_exit)
        marks[n] = clock.mark()
        steps.watch(n - 1, loss)
        loss.backward()
        clock.sync()
        fwd = [clock.seconds(marks[r], marks[r + 1]) for r in range(n)]
        bwd = [clock.seconds(b_start[t], b_end[t]) for t in range(n)]
        return fwd, bwd

    # -- counted --------------------------------------------------------------

    def counted(self, probe: MemoryProbe, lives: LiveMemory) -> tuple[list[Layer], int]:
        """The counting step: per-region products, gradients and scratch; and the seed bytes."""
        n = self.n
        regions = [_Region() for _ in range(n)]
        static = static_keys(self.model, batch_tensors(self.batch))
        current = [0]
        input_grad = [0] * (n + 1)
        grad_keys = [0] * (n + 1)
        param_grad = [0] * n
        bwd_work = [0] * n
        release = [0] * n  # what B_t frees before its peak: v3's negative scratch
        b_start = [0] * n
        start_level = [0]

        def begin(r: int) -> None:
            current[0] = r
            at(f"F_{r}")
            regions[r].start = probe.current()
            probe.reset_peak()

        def finish(r: int) -> None:
            regions[r].grown = probe.peak() - regions[r].start

        def set_out(r: int, t: torch.Tensor) -> None:
            reg = regions[r]
            reg.out_key, reg.out_bytes = storage_key(t), storage_nbytes(t)
            if r + 1 < n and t.requires_grad:
                t.register_hook(grad_hook(r + 1))

        def pack(t: torch.Tensor) -> torch.Tensor:
            key = storage_key(t)
            if key and key not in static:
                reg = regions[current[0]]
                if key not in reg.saved:
                    entry = lives._entries.get(id(t.untyped_storage()))
                    reg.saved[key] = (storage_nbytes(t), entry.born if entry else "")
            return plain(t)

        def grad_hook(i: int):
            def hook(grad: torch.Tensor) -> None:
                input_grad[i] = storage_nbytes(grad)
                grad_keys[i] = id(grad.untyped_storage())

            return hook

        def issue(t: int) -> None:
            at(f"B_{t}")
            b_start[t] = probe.current() if t < n - 1 else start_level[0]
            probe.reset_peak()

        def end(t: int) -> None:
            param_grad[t] = lives.alive_from(f"B_{t}", exclude=grad_keys[t : t + 1])
            grown = probe.peak() - b_start[t]
            signed = grown - (input_grad[t] if t else 0) - param_grad[t]
            bwd_work[t] = max(0, signed)
            release[t] = max(0, -signed)

        steps = BackwardSteps(n, issue, end)

        def on_enter(r: int, x: torch.Tensor) -> None:
            # Block r's window opened where the block before ended (code between
            # blocks is the next block's); the prefix's ends here.
            if r == 1:
                finish(0)
                set_out(0, x)
                steps.watch(0, x)
            elif storage_key(x) != regions[r - 1].out_key:
                raise ChainError(
                    f"{where(r, self.blocks.names[r - 1])}: a block's input must be the output "
                    "of the block before (code between blocks must not change the hidden state)"
                )
            regions[r].input_key = storage_key(x)
            regions[r].shape = (tuple(x.shape), str(x.dtype).removeprefix("torch."))
            if r == 1:
                begin(1)

        def on_exit(r: int, h: torch.Tensor) -> None:
            finish(r)
            set_out(r, h)
            steps.watch(r, h)
            if r + 1 == n - 1:  # the suffix's input, while the model still holds it
                suffix_in.append((weakref.ref(h), h._version))
            regions[r + 1].input_key = storage_key(h)
            regions[r + 1].shape = (tuple(h.shape), str(h.dtype).removeprefix("torch."))
            begin(r + 1)

        suffix_in: list[tuple[weakref.ref, int]] = []
        begin(0)
        with saved_tensors_hooks(pack, plain):
            loss = self._run(on_enter, on_exit)
        for ref, version in suffix_in:
            h = ref()
            self.modified[n - 1] = h is not None and h._version != version
            del h
        finish(n - 1)
        set_out(n - 1, loss)
        steps.watch(n - 1, loss)
        seed = device_bytes(loss.numel() * loss.element_size(), loss.device)
        start_level[0] = probe.current() + seed
        layers = self._classify(regions)
        loss.backward()
        return self._finish_layers(layers, input_grad, param_grad, bwd_work, release), seed

    def _name(self, r: int) -> str:
        if r == 0:
            return PREFIX
        return SUFFIX if r == self.n - 1 else self.blocks.names[r - 1]

    def _classify(self, regions: list[_Region]) -> list[dict]:
        n = self.n
        internals: list[dict[int, int]] = [{} for _ in range(n)]
        flags = [[False, False] for _ in range(n)]
        out_keys = {reg.out_key: r for r, reg in enumerate(regions)}
        for r, reg in enumerate(regions):
            for key, (nbytes, born) in reg.saved.items():
                if r > 0 and key == reg.input_key:
                    flags[r][0] = True
                    continue
                if key == reg.out_key:
                    flags[r][1] = True
                    continue
                j = int(born[2:]) if born.startswith("F_") else -1
                owner = out_keys.get(key)
                if j == r:
                    internals[r][key] = nbytes
                elif 0 <= j < r and owner is None and j == 0:
                    internals[0][key] = nbytes  # made by the prefix, read by later regions
                else:
                    what = (
                        f"the output of layer {owner} ({self._name(owner)})"
                        if owner is not None
                        else f"a tensor made by layer {j} ({self._name(j)})"
                        if j >= 0
                        else "a tensor made before the step (a module-level cache?)"
                    )
                    raise ChainError(
                        f"{where(r, self._name(r))}: a region must save only its input, its "
                        f"output, parameters, buffers, the batch, tensors it makes or tensors "
                        f"the prefix makes, got {what}; the cost model cannot place it (give "
                        "blocks= that contain both ends)"
                    )
        out = []
        for r, reg in enumerate(regions):
            made = sum(internals[r].values())
            out.append(
                dict(
                    name=self._name(r),
                    out_bytes=reg.out_bytes,
                    saved_bytes=made,
                    saves_input=flags[r][0],
                    saves_output=flags[r][1],
                    modifies_input=self.modified.get(r, False) if r > 0 else False,
                    fwd_work_bytes=max(0, reg.grown - reg.out_bytes - made),
                    shape=reg.shape,
                )
            )
        return out

    def _finish_layers(self, layers, input_grad, param_grad, bwd_work, release) -> list[dict]:
        for t, layer in enumerate(layers):
            layer["input_grad_bytes"] = input_grad[t] if t > 0 else 0
            layer["param_grad_bytes"] = param_grad[t]
            layer["bwd_work_bytes"] = bwd_work[t]
            layer["bwd_release"] = release[t]
        return layers
