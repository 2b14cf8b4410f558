"""Part 5 of the GPU run: the side-by-side benchmark (`experiments.vs_torch`) on the GPU.

The same unmodified models (`experiments.vs_torch_models`: small configs of
GPT-2, Llama, Qwen2, BERT and a torchvision-style ResNet-18, same seeds and
batches), moved to the GPU, each method on a fresh copy:

* plain (keep all); HF checkpointing (full); torchtitan-style op SAC;
  `save_on_cpu(pin_memory=True)` as torch ships it (on a GPU its copies are
  real host copies, on the compute stream);
* planopt: one in-place profile with menus (`profile_in_place`, CUDA events,
  the link measured in part 1), then the greedy and remat-dp at 70/50/30%
  (`solve_pinned`), each plan `apply`-ed to the model: swaps on planopt's
  copy streams.

Measured per method: one warm-up step, then `steps` steps timed by CUDA
events (median), and the peak of `torch.cuda.max_memory_allocated` over
them (reserved beside it); gradients set to None outside the timing. The
models are the CPU benchmark's, small for a GPU: their steps are launch-bound.
"""

from __future__ import annotations

import dataclasses
import statistics
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

import planopt
from experiments import vs_torch_methods as vm
from experiments.gpu_fidelity import free_device
from experiments.gpu_link import Timer
from experiments.vs_torch import _live_peak
from experiments.vs_torch_models import MODELS, Bench, build
from planopt.runtime.apply import apply
from planopt.runtime.inplace import profile_in_place
from planopt.runtime.planmodel import solve_pinned
from planopt.runtime.regions import step_loss
from planopt.runtime.training import prepare_grads

PLANOPT = tuple((m, p) for m in ("greedy", "remat-dp") for p in (70, 50, 30))
WORK_LIMIT = 2.0


@dataclass
class VsSettings:
    """What the driver gives this part."""

    device: torch.device
    tiny: bool
    seed: int
    steps: int
    link: planopt.Device | None  # CPU: an instantaneous one; CUDA: part 1's (None: measured)
    log: Callable[[str], None]
    left: Callable[[], float]


@dataclass
class VsRow:
    model: str
    method: str
    peak: int | None = None
    reserved: int | None = None
    predicted: int | None = None
    time: float | None = None
    times: list[float] = field(default_factory=list)
    note: str = ""
    error: str = ""


def _moved(bench: Bench, device: torch.device) -> Bench:
    def move(x):
        if isinstance(x, torch.Tensor):
            return x.to(device)
        if isinstance(x, dict):
            return {k: move(v) for k, v in x.items()}
        if isinstance(x, tuple | list):
            return type(x)(move(v) for v in x)
        return x

    bench.model.to(device)
    return dataclasses.replace(bench, batch=move(bench.batch))


def _step(m: vm.Method, bench: Bench) -> None:
    prepare_grads(bench.model, True)
    with m.context():
        loss = step_loss(m.call, bench.batch, bench.loss_fn)
        loss.backward()
        if m.handle is not None:
            m.handle.synchronize()
    del loss


def measure(row: VsRow, m: vm.Method, bench: Bench, device: torch.device, steps: int) -> None:
    timer = Timer(device)
    _step(m, bench)  # warm-up
    timer.sync()
    if timer.cuda:
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(steps):
        timer.sync()
        start = timer.mark()
        _step(m, bench)
        row.times.append(timer.seconds(start, timer.mark()))
    row.time = statistics.median(row.times)
    if timer.cuda:
        row.peak = torch.cuda.max_memory_allocated(device)
        row.reserved = torch.cuda.max_memory_reserved(device)
    else:
        row.peak = _live_peak(m, bench)
    prepare_grads(bench.model, True)


def _baselines(device: torch.device) -> list[tuple[str, Callable[[Bench], vm.Method]]]:
    pin = device.type == "cuda"

    def save_on_cpu(b: Bench) -> vm.Method:
        return vm.Method(
            f"save_on_cpu (pin_memory={pin})",
            "save_on_cpu",
            b.model,
            context=lambda: torch.autograd.graph.save_on_cpu(pin_memory=pin),
        )

    return [
        ("plain (keep all)", vm.plain),
        ("HF checkpointing (full)", lambda b: vm.hf_checkpointing(b, 1)),
        ("op SAC (torchtitan-style)", vm.op_sac),
        ("save_on_cpu", save_on_cpu),
    ]


def run_model(name: str, s: VsSettings, out: list[VsRow]) -> None:
    """Every method on model `name`, rows appended to `out` as they are measured."""
    scale = "tiny" if s.tiny else "bench"
    for label, make in _baselines(s.device):
        if s.left() < 5:
            out.append(VsRow(name, label, note="skipped: deadline"))
            continue
        row = VsRow(name, label)
        free_device(s.device)  # the last method's model is gone before this one's peak
        try:
            bench = _moved(build(name, s.seed, scale), s.device)
            measure(row, make(bench), bench, s.device, s.steps)
        except Exception as exc:  # a baseline's failure is a result
            row.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            s.log(traceback.format_exc())
        bench = None
        out.append(row)
        s.log(f"    {name} {label}: {_show(row)}")
    if s.left() < 10:
        out.append(VsRow(name, "planopt", note="skipped: deadline"))
        return
    free_device(s.device)
    bench = _moved(build(name, s.seed, scale), s.device)
    try:
        inplace = profile_in_place(
            bench.model, bench.batch, bench.loss_fn, link=s.link, iterations=3, warmup=1
        )
    except Exception as exc:
        out.append(VsRow(name, "planopt profile_in_place", error=f"{type(exc).__name__}: {exc}"))
        s.log(traceback.format_exc())
        return
    for method, pct in PLANOPT:
        row = VsRow(name, f"planopt + menus {method} {pct}%")
        if s.left() < 5:
            row.note = "skipped: deadline"
            out.append(row)
            continue
        try:
            sol = solve_pinned(inplace.profile, f"{pct}%", method, work_limit=WORK_LIMIT)
            if sol.plan is None:
                row.note = f"no plan ({sol.status.value})"
            else:
                row.predicted = planopt.simulate(inplace.profile, sol.plan).peak_bytes
                handle = apply(bench.model, sol.plan, inplace, check_regime="off")
                try:
                    m = vm.Method(row.method, "planopt", bench.model, handle=handle)
                    measure(row, m, bench, s.device, s.steps)
                finally:
                    handle.remove()
        except Exception as exc:  # recorded, the next plan still runs
            row.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            s.log(traceback.format_exc())
        out.append(row)
        s.log(f"    {name} {row.method}: {_show(row)}")


def _show(row: VsRow) -> str:
    if row.error or row.time is None:
        return row.error or row.note
    return f"peak {row.peak / 2**20:.1f} MiB, step {row.time * 1e3:.2f} ms"


def render(rows: list[VsRow], head: str) -> str:
    lines = ["# Side by side on the GPU: planopt and what PyTorch users run", "", head, ""]
    lines += [__doc__.split("\n\n", 1)[1].strip(), ""]
    lines += [
        "| model | method | peak MiB | planopt predicted MiB | reserved MiB | step ms | "
        "peak / plain | step / plain | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        plain = next((p for p in rows if p.model == r.model and p.method.startswith("plain")), None)

        def rel(a, b):
            return "-" if a is None or not b else f"{a / b:.2f}"

        def mib(x):
            return "-" if x is None else f"{x / 2**20:.4g}"

        note = "; ".join(x for x in (r.note, r.error) if x).replace("|", "/")
        lines.append(
            f"| {r.model} | {r.method} | {mib(r.peak)} | {mib(r.predicted)} | {mib(r.reserved)} | "
            f"{'-' if r.time is None else f'{r.time * 1e3:.2f}'} | "
            f"{rel(r.peak, plain.peak if plain else None)} | "
            f"{rel(r.time, plain.time if plain else None)} | {note or '-'} |"
        )
    return "\n".join(lines) + "\n"


__all__ = ["MODELS", "VsRow", "VsSettings", "render", "run_model"]
