"""A `/2` profile without running the model: fake tensors for memory, a roofline for time.

    prof = trace_profile(chain, (x, y), loss_fn, gpu="h100-pcie", autocast=torch.bfloat16)

One training step of the chain (forward and backward, the loss fused into
the last layer, as `profile` runs it) is traced under torch's
`FakeTensorMode`: every tensor has its shape, dtype and storage identity
and no data, so a model at its real training size traces on a laptop in
seconds. The step is the real profiler's counting step itself
(`planopt.runtime.profiler`), with its classification of saved storages
(`planopt.runtime.storage`) and its live-storage tracker, so the memory
fields come out as the real profiler measures them. Times are estimates:
each ATen operator's roofline on the named GPU (`planopt.runtime.roofline`).

NOTE (fake CPU tensors): a CPU-only torch cannot make fake `cuda` tensors
beyond `torch.empty`, so the trace runs on fake CPU tensors; a tensor's size
does not depend on its device. What does:

* the CUDA caching allocator rounds every block up to 512 bytes:
  `memory_as="gpu"` (the default) counts sizes so;
* attention's kernel (`planopt.runtime.attention`): `memory_as="gpu"` runs
  the GPU's flash or memory-efficient kernel, which save the log-sum-exp
  where CPU's math path (taken whenever dropout is on) saves the whole
  attention matrix; and dropout's: the GPU's fused `native_dropout` saves a
  bool mask where CPU's saves the noise in the input's dtype;
* autocast's operator lists differ between CPU and CUDA (the CPU list keeps
  a few more operators in fp32); the trace uses CPU's, as a CPU run would.

`memory_as="cpu"` counts what a CPU run holds, byte for byte: the check
against the real profiler (`profile` on CPU) that the tests make.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from planopt.hardware import GPU, TFLOP
from planopt.hardware import gpu as gpu_named
from planopt.profile import Profile
from planopt.runtime.attention import gpu_kernels
from planopt.runtime.chain import Chain, LossFn
from planopt.runtime.counting import TrainingStep
from planopt.runtime.counts import autocast_note, chain_layers, check_autocast, sign_scratch
from planopt.runtime.errors import RuntimeOptionError
from planopt.runtime.inputs import check_batch, check_chain, check_loss_fn
from planopt.runtime.memory import static_bytes
from planopt.runtime.menus import MENU_SIZE, add_menus
from planopt.runtime.profiler import GRADS_TO_NONE_NOTE
from planopt.runtime.roofline import RooflineMode
from planopt.runtime.tracker import LiveMemory, TrackerProbe, tracing_for
from planopt.runtime.training import prepare_grads

MEMORY_AS = ("gpu", "cpu")
_BATCH_NORMS = {
    torch.ops.aten.native_batch_norm.default,
    torch.ops.aten._native_batch_norm_legit.default,
    torch.ops.aten._native_batch_norm_legit_functional.default,
}


class MetaFixes(TorchDispatchMode):
    """Where a meta kernel's result differs from the device kernels', the device's result.

    NOTE: the meta kernel of batch norm gives fp16/bf16 inputs their saved
    mean and inverse std in the input's dtype; CPU's and CUDA's kernels keep
    them in fp32 (mixed precision keeps batch-norm statistics in fp32).
    Entered below the tracker, which sees only the corrected result.
    """

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _BATCH_NORMS and args[0].dtype in (torch.float16, torch.bfloat16):
            out = (out[0], *(t.float() if t.numel() else t for t in out[1:3]), *out[3:])
        return out


@contextlib.contextmanager
def faked(chain: nn.Module, mode: FakeTensorMode) -> Iterator[None]:
    """The chain's parameters, buffers and gradients as fake tensors inside; restored after.

    A tensor shared between modules (a tied embedding) stays one tensor.
    """
    fakes: dict[int, torch.Tensor] = {}
    undo: list[tuple[dict, str, object]] = []
    grads = [(p, p.grad) for p in chain.parameters()]

    def fake(t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, FakeTensor) or id(t) in fakes:
            return fakes.get(id(t), t)
        data = mode.from_tensor(t.detach())
        fakes[id(t)] = nn.Parameter(data, t.requires_grad) if isinstance(t, nn.Parameter) else data
        return fakes[id(t)]

    try:
        for module in chain.modules():
            for table in (module._parameters, module._buffers):
                for key, t in list(table.items()):
                    if t is not None and not isinstance(t, FakeTensor):
                        undo.append((table, key, t))
                        table[key] = fake(t)
        for p in chain.parameters():
            p.grad = None if p.grad is None else fake(p.grad)
        yield
    finally:
        for table, key, t in reversed(undo):
            table[key] = t
        for p, grad in grads:
            p.grad = grad


def _fake_mode(chain: nn.Module) -> tuple[FakeTensorMode, bool]:
    """The chain's own fake mode when it was built under one, else a new one."""
    mode = detect_fake_mode(list(chain.parameters()) + list(chain.buffers()))
    return (mode, True) if mode is not None else (FakeTensorMode(), False)


def trace_profile(
    chain: Chain,
    sample_batch: tuple[torch.Tensor, torch.Tensor],
    loss_fn: LossFn,
    *,
    gpu: GPU | str,
    autocast: torch.dtype | None = None,
    memory_as: str = "gpu",
    grads_to_none: bool = False,
    optimizer: torch.optim.Optimizer | None = None,
    name: str = "chain",
    menus: bool = True,
    menu_size: int | None = MENU_SIZE,
    signed_scratch: bool = True,
) -> Profile:
    """The estimated `Profile` of one training step of `chain` on `gpu` (module doc).

    The chain may be real (its tensors are faked for the trace and restored
    after) or built under a `FakeTensorMode` (no memory spent on weights);
    the batch may be real or fake. `gpu`: a `planopt.hardware.GPU` or its
    name. `autocast`, `grads_to_none`, `optimizer`, `menus`, `menu_size`,
    `signed_scratch`: as for `profile` (menus traced under the same fake mode,
    roofline times).
    """
    check_chain(chain, "trace_profile")
    check_batch(sample_batch, "trace_profile")
    check_loss_fn(loss_fn, "trace_profile")
    record = gpu_named(gpu) if isinstance(gpu, str) else gpu
    if not isinstance(record, GPU):
        raise RuntimeOptionError(
            f"trace_profile: gpu must be a planopt.hardware.GPU or its name, got {gpu!r}"
        )
    if memory_as not in MEMORY_AS:
        raise RuntimeOptionError(
            f"memory_as must be one of {', '.join(MEMORY_AS)}, got {memory_as!r}"
        )
    check_autocast(autocast)
    mode, built_fake = _fake_mode(chain)
    on_gpu = memory_as == "gpu"
    with (
        faked(chain, mode),
        tracing_for("cuda" if on_gpu else "cpu"),
        gpu_kernels() if on_gpu else contextlib.nullcontext(),
        mode,
    ):
        x, y = (t if isinstance(t, FakeTensor) else mode.from_tensor(t) for t in sample_batch)
        prepare_grads(chain, grads_to_none)
        tracker = LiveMemory("meta")
        tracker.track_model(chain, (x, y), optimizer)
        roofline = RooflineMode(record, lambda: tracker.where)
        run = TrainingStep(chain, x, y, loss_fn, autocast)
        with MetaFixes(), roofline, tracker:
            counts = run.counted(TrackerProbe(tracker), tracker)
        n = len(chain)
        static = static_bytes(
            chain,
            (x, y),
            optimizer,
            grads=not grads_to_none,
            loss_bytes=counts.out[n - 1] + counts.seed,
        )
    fwd = [roofline.seconds[f"F_{i}"] for i in range(n)]
    bwd = [roofline.seconds[f"B_{i}"] for i in range(n)]
    flops = sum(roofline.flops.values())
    prof = Profile(
        name=name,
        device=record.device(),
        static_bytes=static.total,
        layers=chain_layers(chain, counts, fwd, bwd),
        source=_source(record, autocast, memory_as, static.note, grads_to_none, flops, built_fake),
    )
    if signed_scratch:
        prof = sign_scratch(prof, counts.bwd_release)
    if not menus:
        return prof
    attention = gpu_kernels() if on_gpu else contextlib.nullcontext()
    with faked(chain, mode), tracing_for("cuda" if on_gpu else "cpu"), attention, mode, MetaFixes():
        static_tensors = [*chain.parameters(), *chain.buffers(), x, y]
        run = TrainingStep(chain, x, y, loss_fn, autocast)
        return add_menus(prof, run, static_tensors, gpu=record, size=menu_size)


def _source(
    gpu: GPU,
    autocast: torch.dtype | None,
    memory_as: str,
    static_note: str,
    grads_to_none: bool,
    flops: float,
    built_fake: bool,
) -> str:
    dtype = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(autocast, "fp16")
    grads = (
        f"{GRADS_TO_NONE_NOTE}: each layer's are param_grad_bytes"
        if grads_to_none
        else "parameter gradients kept and zeroed in place: in static_bytes"
    )
    memory = (
        "sizes as the CUDA caching allocator hands them out (512-byte blocks), attention "
        "as the GPU's flash/memory-efficient kernels save it"
        if memory_as == "gpu"
        else "sizes as a CPU run holds them"
    )
    return (
        f"TRACED by planopt.runtime.trace_profile (torch {torch.__version__}, FakeTensorMode on "
        f"fake CPU tensors{', model built fake' if built_fake else ''}): one training step, "
        "loss fused into the last layer. Memory as the real profiler counts it (saved storages "
        "classified by saved_tensors_hooks, scratch by the live-storage tracker), "
        f"{memory}. Static: parameters, buffers, batch, {static_note}, the loss and its seed "
        f"gradient; {grads}. Times are ESTIMATES, not measurements: per-ATen-operator roofline "
        f"(FLOPs from torch.utils.flop_counter, bytes read and written) on {gpu.summary(dtype)}; "
        f"{flops / TFLOP:.3f} TFLOP per step." + autocast_note(autocast)
    )
