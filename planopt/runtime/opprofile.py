"""A block's forward, operator by operator: what each ATen operator makes, saves and costs.

    ops = trace_block(block, (x,), {"use_cache": False})   # measured on this device
    ops.menu()                                             # planopt.sacmenu's front

One forward of the block (grad enabled, as in training) runs under a
`TorchDispatchMode` and `saved_tensors_hooks`. Each operator the mode sees
gets a position, counted exactly as `create_selective_checkpoint_contexts`
calls its policy function: every operator but `SAC_IGNORED_OPS` (the
`detach`es checkpoint adds or drops, metadata operators), in dispatch order.
So a policy that saves the positions of a menu entry saves those operators
(`planopt.runtime.sac.SavePositions`). Per operator (`OpRecord`):

* the storages its outputs live in, by storage identity (a view or an
  in-place result keeps its input's storage): an operator that is not a view
  and returns a storage never seen before made it; the storages the block
  made, but for its output, are its internals (`storage_bytes`);
* what autograd saved around it (pack hooks; a tensor saved before an
  operator runs is that operator's input, one saved after is the previous
  operator's output);
* its time: measured (median over `repeats` runs, CUDA synchronised per
  operator), or its roofline on a named GPU (`planopt.runtime.roofline`),
  typically under `FakeTensorMode`; and the Python time before it
  (`between`, measured only), which a replay spends whatever it saves;
* whether SAC may cache it (`saveable`): not an in-place operator, no
  later operator mutates its outputs (SAC refuses a cached tensor whose
  version changed), and none of its outputs lives in the storage of the
  block's output or of an input that is not static: SAC's cache would hold
  that storage to the end of the block's backward, where cost model v3
  frees the output after its last reader (BERT's last layer norm returns
  the output beside its saved statistics) and regenerates or copies back
  the input (a cached view of it would keep the forward's copy too);
* whether it draws random numbers (`nondeterministic_seeded`).

NOTE (devices): positions are those of the operators the traced device
dispatches. A fake trace for a GPU (`trace_profile`, `profile-model`) runs
the GPU's attention and dropout operators (`planopt.runtime.attention`) but
CPU autocast's lists of operators cast to fp32, which differ from CUDA's in
a few operators; where they differ, a policy from a fake trace names other
operators on the GPU than in the trace. A measured trace (`profile` on the
device) has no such gap.

NOTE (lifetimes): one more forward (`planopt.runtime.liveness`) says when
the block's code releases each storage it made; `planopt.sacmenu` prices
from those each entry's replay scratch and leaves out what v3 cannot say.

`called_with(model, layer, ...)` gives the arguments a model really calls
a layer with (a transformers decoder layer's rotary embeddings and mask).

NOTE (memory): the trace keeps every operator's outputs alive until the
forward ends (storages are told apart by identity), so it holds a block's
temporaries on top of what the block saves.

`cut`: checkpoint's replay stops when it has packed again as many tensors
as the forward packed (early stop, its default), so it runs only operators
before the position where the forward packed its last tensor (a tensor
packed as an operator's input is packed before the operator runs). With
`early_stop=False` it runs the whole forward (`OpProfile.menu(early_stop=)`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import saved_tensors_hooks
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.checkpoint import SAC_IGNORED_OPS

from planopt.hardware import GPU
from planopt.menumemory import BlockMemory, Lifetime
from planopt.runtime.liveness import lifetimes_of
from planopt.runtime.roofline import op_cost
from planopt.runtime.storage import plain, storage_key, storage_nbytes
from planopt.runtime.training import TIMERS
from planopt.sacmenu import MenuEntry, MenuError, MenuOp, pareto_menu


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One operator of the block's forward (module doc)."""

    position: int
    op: str
    out_shapes: tuple[tuple[int, ...], ...]
    out_bytes: int  # bytes of the storages it made (internal or the block's output)
    storages: tuple[int, ...]  # internal storages its outputs live in
    saves: tuple[int, ...]  # internal storages autograd saved around it
    seconds: float
    saveable: bool
    random: bool
    between: float = 0.0  # Python seconds before it (measured; 0 for a roofline)


@dataclass(frozen=True, slots=True)
class OpProfile:
    """The block's operators, its internal storages' bytes, what autograd saves, the cut."""

    ops: tuple[OpRecord, ...]
    storage_bytes: tuple[int, ...]
    saved: tuple[int, ...]  # internal storages autograd saves: the whole layer's internals
    cut: int
    lifetimes: tuple[Lifetime, ...] = ()  # every storage the block made (NOTE (lifetimes))
    saves_output: bool = False  # autograd saves the block's output

    @property
    def saved_bytes(self) -> int:
        """What the block holds between its forward and backward without checkpointing."""
        return sum(self.storage_bytes[s] for s in self.saved)

    def replayed(self, early_stop: bool = True) -> int:
        """How many operators a replay runs through: `cut` with early stop, else all."""
        return self.cut if early_stop else len(self.ops)

    def overhead(self, early_stop: bool = True) -> float:
        """Python seconds a replay spends between operators, whatever it saves."""
        return sum(op.between for op in self.ops[: self.replayed(early_stop)])

    def replay_seconds(self, early_stop: bool = True) -> float:
        """Replay time with nothing saved (the menu's entry at 0 bytes, when allowed)."""
        end = self.replayed(early_stop)
        return self.overhead(early_stop) + sum(op.seconds for op in self.ops[:end])

    def menu_ops(self) -> tuple[MenuOp, ...]:
        return tuple(MenuOp(o.seconds, o.storages, o.saveable, o.random) for o in self.ops)

    def menu(self, early_stop: bool = True, forward_fits: bool = True) -> tuple[MenuEntry, ...]:
        """The front (`planopt.sacmenu.pareto_menu`, lifetimes known) below `saved_bytes`.

        `early_stop`: how the runtime's `checkpoint` replays (its `early_stop`
        argument): up to the cut (torch's default), or the whole forward.
        `forward_fits=False`: v3's undescribable policies too (`pareto_menu`).
        """
        return pareto_menu(
            self.menu_ops(), self.storage_bytes, self.replayed(early_stop),
            below=self.saved_bytes, fixed=self.overhead(early_stop), memory=self.memory(),
            forward_fits=forward_fits,
        )  # fmt: skip

    def memory(self) -> BlockMemory | None:
        """What the menu needs to price a policy's memory (`sacmenu.BlockMemory`)."""
        if not self.lifetimes:
            return None
        saved = frozenset(self.saved)
        return BlockMemory(self.lifetimes, saved, self.saved_bytes, self.saves_output)


class _Tracer(TorchDispatchMode):
    """Records every operator SAC's policy would see; `keep`: its tensors too."""

    def __init__(self, cost: Callable[..., float], keep: bool, now=time.perf_counter) -> None:
        super().__init__()
        self.cost, self.keep, self.now = cost, keep, now
        self.names: list[str] = []
        self.seconds: list[float] = []
        self.funcs: list[Any] = []
        self.inputs: list[list[torch.Tensor]] = []
        self.outputs: list[list[torch.Tensor]] = []
        self.versions: list[list[int]] = []
        self.packs: list[tuple[int, torch.Tensor]] = []
        self.gaps: list[float] = []  # time between operators (Python), before each
        self.last = now()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in SAC_IGNORED_OPS:
            return func(*args, **kwargs)
        flat_in = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        sync = any(t.device.type == "cuda" for t in flat_in)
        if sync:
            torch.cuda.synchronize()
        start = self.now()
        out = func(*args, **kwargs)
        if sync:
            torch.cuda.synchronize()
        elapsed = self.now() - start
        self.gaps.append(start - self.last)
        self.names.append(str(func))
        self.seconds.append(self.cost(func, args, kwargs, out, elapsed))
        if self.keep:
            flat_out = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
            self.funcs.append(func)
            self.inputs.append(flat_in)
            self.outputs.append(flat_out)
            self.versions.append([t._version for t in flat_out])
        self.last = self.now()
        return out

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        if self.keep:
            self.packs.append((len(self.names), t))
        return plain(t)


def _measured(func, args, kwargs, out, elapsed: float) -> float:
    return elapsed


def _roofline(gpu: GPU) -> Callable[..., float]:
    def cost(func, args, kwargs, out, elapsed: float) -> float:
        found = op_cost(gpu, func, args, kwargs, out)
        return 0.0 if found is None else found[0]

    return cost


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _run(fn: Callable[..., Any], args, kwargs, tracer: _Tracer) -> Any:
    with torch.enable_grad(), saved_tensors_hooks(tracer.pack, _identity), tracer:
        tracer.last = tracer.now()
        return fn(*args, **kwargs)


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


def trace_block(
    fn: Callable[..., Any],
    args: tuple = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    static: Iterable[torch.Tensor] = (),
    gpu: GPU | None = None,
    repeats: int = 3,
    warmup: int = 1,
    timer: str = "wall",
) -> OpProfile:
    """The `OpProfile` of one forward of `fn(*args, **kwargs)` (module doc).

    `fn`: a block (an `nn.Module`: its parameters and buffers are static) or
    any callable, with `static` the tensors that are not its internals
    (parameters, buffers, the batch). `gpu`: time each operator by its
    roofline on that GPU (one run), else measure it (`warmup` runs, then the
    median of `repeats`) with `timer`: "wall" (`time.perf_counter`) or
    "thread" (the thread's CPU time, CPU only: other processes' load left
    out, as `profile(timer="thread")`). The RNG state is restored after.
    """
    if timer not in TIMERS:
        raise MenuError(f"trace_block: timer must be one of {', '.join(TIMERS)}, got {timer!r}")
    now = time.thread_time if timer == "thread" else time.perf_counter
    if repeats < 1 or warmup < 0:
        raise MenuError(
            f"trace_block: repeats must be >= 1 and warmup >= 0, got {repeats}, {warmup}"
        )
    kwargs = dict(kwargs or {})
    static = list(static)
    if isinstance(fn, nn.Module):
        static += [*fn.parameters(), *fn.buffers()]
    cost = _measured if gpu is None else _roofline(gpu)
    runs = 1 if gpu is not None else repeats
    devices = sorted({t.device for t in _tensors((args, kwargs)) if t.is_cuda}, key=str)
    with torch.random.fork_rng(devices=devices):
        rng = torch.get_rng_state()
        for _ in range(warmup if gpu is None else 0):
            torch.set_rng_state(rng)
            _run(fn, args, kwargs, _Tracer(cost, False, now))
        torch.set_rng_state(rng)
        first = _Tracer(cost, True, now)
        out = _run(fn, args, kwargs, first)
        record = _records(first, args, kwargs, out, static)
        first_gaps = first.gaps
        del out, first
        times = [list(op.seconds for op in record[0])]
        gaps = [first_gaps]
        for _ in range(runs - 1):
            torch.set_rng_state(rng)
            again = _Tracer(cost, False, now)
            _run(fn, args, kwargs, again)
            if len(again.names) != len(record[0]):
                raise RuntimeError(
                    f"trace_block: the block ran {len(again.names)} operators, then "
                    f"{len(record[0])}; its operator sequence must not change between runs"
                )
            times.append(again.seconds)
            gaps.append(again.gaps)
        torch.set_rng_state(rng)
        lifetimes = lifetimes_of(fn, args, kwargs, len(record[0]), record[4])
    ops, storage_bytes, saved, cut, _, saves_output = record
    seconds = [statistics.median(run[j] for run in times) for j in range(len(ops))]
    ops = tuple(
        OpRecord(
            o.position,
            o.op,
            o.out_shapes,
            o.out_bytes,
            o.storages,
            o.saves,
            seconds[j],
            o.saveable,
            o.random,
            # per position, so that one stall of a loaded machine does not count
            0.0 if gpu is not None else statistics.median(run[j] for run in gaps),
        )
        for j, o in enumerate(ops)
    )
    return OpProfile(ops, storage_bytes, saved, cut, lifetimes, saves_output)


def _records(tracer: _Tracer, args, kwargs, out, static: list[torch.Tensor]):
    """Storages classified and operators recorded from one traced run (module doc)."""
    outside = {storage_key(t) for t in [*_tensors((args, kwargs)), *static]}
    out_keys = {storage_key(t) for t in _tensors(out)}
    static_keys = {storage_key(t) for t in static}
    # the block's output and inputs: SAC must not cache a tensor living in them
    held_elsewhere = (out_keys | {storage_key(t) for t in _tensors((args, kwargs))}) - static_keys
    held_elsewhere.discard(0)
    outside.discard(0)
    internal: dict[int, int] = {}  # storage key -> index
    sizes: list[int] = []
    seen = set(outside)
    made: list[int] = []
    makers: list[tuple[int, int, int, int | None]] = []  # (position, output, bytes, internal)
    for j, func in enumerate(tracer.funcs):
        seen.update(storage_key(t) for t in tracer.inputs[j])
        nbytes = 0
        for k, t in enumerate(tracer.outputs[j]):
            key = storage_key(t)
            if key == 0 or key in seen:
                continue
            seen.add(key)
            if func.is_view or func._schema.is_mutable:
                continue  # an alias of a storage made before the block (never counted)
            nbytes += storage_nbytes(t)
            if key not in out_keys:
                internal[key] = len(sizes)
                sizes.append(storage_nbytes(t))
            makers.append((j, k, storage_nbytes(t), internal.get(key)))
        made.append(nbytes)
    saves: list[set[int]] = [set() for _ in tracer.funcs]
    saved: list[int] = []
    for count, t in tracer.packs:
        key = storage_key(t)
        index = internal.get(key)
        if index is None:
            continue
        if index not in saved:
            saved.append(index)
        inputs = tracer.inputs[count] if count < len(tracer.funcs) else []
        owner = count if any(storage_key(a) == key for a in inputs) else count - 1
        saves[max(owner, 0)].add(index)
    cut = tracer.packs[-1][0] if tracer.packs else 0
    ops = []
    for j, func in enumerate(tracer.funcs):
        outs = tracer.outputs[j]
        mutated = any(t._version != v for t, v in zip(outs, tracer.versions[j], strict=True))
        output = any(storage_key(t) in held_elsewhere for t in outs)
        storages = sorted({internal[k] for k in map(storage_key, outs) if k in internal})
        ops.append(
            OpRecord(
                position=j,
                op=tracer.names[j],
                out_shapes=tuple(tuple(t.shape) for t in outs),
                out_bytes=made[j],
                storages=tuple(storages),
                saves=tuple(sorted(saves[j])),
                seconds=tracer.seconds[j],
                saveable=not func._schema.is_mutable and not mutated and not output,
                random=torch.Tag.nondeterministic_seeded in func.tags,
            )
        )
    saves_output = any(storage_key(t) in out_keys for _, t in tracer.packs)
    return tuple(ops), tuple(sizes), tuple(saved), cut, tuple(makers), saves_output


def called_with(model: nn.Module, layer: nn.Module, *args, **kwargs) -> tuple[tuple, dict]:
    """The positional and keyword arguments `model(*args, **kwargs)` calls `layer` with
    (its first call; the model's forward is stopped there), to trace a block as its
    model really runs it (a transformers decoder layer gets its rotary embeddings,
    attention mask and position ids this way)."""
    got: dict[str, Any] = {}

    class _Stop(Exception):
        pass

    def hook(module, layer_args, layer_kwargs):
        got["args"], got["kwargs"] = layer_args, dict(layer_kwargs)
        raise _Stop

    handle = layer.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        model(*args, **kwargs)
    except _Stop:
        pass
    finally:
        handle.remove()
    if not got:
        raise ValueError("called_with: the model never called the layer")
    return got["args"], got["kwargs"]
