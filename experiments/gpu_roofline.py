"""Part 4 of the GPU run: the roofline profile of each model against the one measured on the GPU.

For every model parts 2 and 2b profiled, the same model is built again
under `FakeTensorMode` (no memory, no device) and traced with
`planopt.runtime.trace_profile(..., gpu=record, memory_as="gpu")`: per-ATen
operator roofline times on the `planopt.hardware` record of the GPU found,
memory as the caching allocator would hold it. Per layer: forward and
backward time, roofline against measured, and the bytes the layer keeps
(output + internals), traced against measured; in total: T_ideal and the
keep-all peak.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from torch._subclasses.fake_tensor import FakeTensorMode

import planopt
from experiments.gpu_models import GpuModel
from planopt.hardware import GPU
from planopt.profile import Profile
from planopt.runtime import trace_profile


@dataclass
class RooflineRow:
    """One model: per-layer and total times and bytes, measured and traced."""

    model: str
    names: list[str] = field(default_factory=list)
    fwd: list[tuple[float, float]] = field(default_factory=list)  # (measured, roofline) s
    bwd: list[tuple[float, float]] = field(default_factory=list)
    kept: list[tuple[int, int]] = field(default_factory=list)  # (measured, traced) bytes
    keep_all: tuple[int, int] = (0, 0)
    static: tuple[int, int] = (0, 0)
    seconds: float = 0.0
    error: str = ""


def traced(model: GpuModel, record: GPU) -> Profile:
    """`model` built under FakeTensorMode and traced with roofline times on `record`."""
    with FakeTensorMode():
        ref = model.build()
        batch = ref.batch(seed=1)
    return trace_profile(
        ref.chain, batch, ref.loss_fn, gpu=record, menus=False, memory_as="gpu", name=model.key
    )


def compare(model: GpuModel, measured: Profile, record: GPU) -> RooflineRow:
    roof = traced(model, record)
    row = RooflineRow(model.key)
    if len(roof) != len(measured):
        row.error = f"traced {len(roof)} layers, measured {len(measured)}"
        return row
    for m, r in zip(measured.layers, roof.layers, strict=True):
        row.names.append(m.name or "")
        row.fwd.append((m.fwd, r.fwd))
        row.bwd.append((m.bwd, r.bwd))
        row.kept.append((m.out_bytes + m.saved_bytes, r.out_bytes + r.saved_bytes))
    row.keep_all = (planopt.keep_all_peak(measured), planopt.keep_all_peak(roof))
    row.static = (measured.static_bytes, roof.static_bytes)
    return row


def _ratio(a: float, b: float) -> str:
    return "-" if not b or math.isnan(b) else f"{a / b:.2f}"


def _ms(x: float) -> str:
    return f"{x * 1e3:.3f}"


def _mib(x: int) -> str:
    return f"{x / 2**20:.4g}"


def render(rows: list[RooflineRow], record: GPU, head: str, notes: list[str]) -> str:
    """roofline_vs_measured.md."""
    lines = ["# Roofline profile against the profile measured on the GPU", "", head, ""]
    lines += [__doc__.split("\n\n", 1)[1].strip(), ""]
    lines += [f"Record: {record.summary('bf16')}.", ""]
    lines += [
        "## Totals",
        "",
        "roofline / measured: above 1 the roofline is pessimistic, below 1 optimistic.",
        "",
        "| model | layers | fwd measured ms | fwd roofline ms | roofline / measured | "
        "bwd measured ms | bwd roofline ms | roofline / measured | T_ideal ratio | "
        "layer fwd+bwd ratio min..max | keep-all peak measured / traced MiB | static MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for r in rows:
        if r.error:
            lines.append(f"| {r.model} | failed: {r.error} |" + " |" * 10)
            continue
        fm, fr = sum(a for a, _ in r.fwd), sum(b for _, b in r.fwd)
        bm, br = sum(a for a, _ in r.bwd), sum(b for _, b in r.bwd)
        per = [
            (f[1] + b[1]) / (f[0] + b[0]) for f, b in zip(r.fwd, r.bwd, strict=True) if f[0] + b[0]
        ]
        spread = f"{min(per):.2f}..{max(per):.2f}" if per else "-"
        lines.append(
            f"| {r.model} | {len(r.names)} | {_ms(fm)} | {_ms(fr)} | {_ratio(fr, fm)} | "
            f"{_ms(bm)} | {_ms(br)} | {_ratio(br, bm)} | {_ratio(fr + br, fm + bm)} | {spread} | "
            f"{_mib(r.keep_all[0])} / {_mib(r.keep_all[1])} | "
            f"{_mib(r.static[0])} / {_mib(r.static[1])} |"
        )
    for r in rows:
        if r.error:
            continue
        lines += [
            "",
            f"## {r.model}, per layer",
            "",
            "| layer | fwd ms | fwd roofline | ratio | bwd ms | bwd roofline | ratio | "
            "kept MiB measured | traced |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for name, f, b, k in zip(r.names, r.fwd, r.bwd, r.kept, strict=True):
            lines.append(
                f"| {name} | {_ms(f[0])} | {_ms(f[1])} | {_ratio(f[1], f[0])} | {_ms(b[0])} | "
                f"{_ms(b[1])} | {_ratio(b[1], b[0])} | {_mib(k[0])} | {_mib(k[1])} |"
            )
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def run_one(
    model: GpuModel, measured: Profile, record: GPU, log: Callable[[str], None]
) -> RooflineRow:
    started = time.perf_counter()
    try:
        row = compare(model, measured, record)
    except Exception as exc:  # recorded in the table; the next model still runs
        row = RooflineRow(model.key, error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
        log(traceback.format_exc())
    row.seconds = time.perf_counter() - started
    log(f"  roofline {model.key}: {row.error or 'traced'} in {row.seconds:.1f} s")
    return row
