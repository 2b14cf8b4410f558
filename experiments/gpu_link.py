"""Part 1 of the GPU run: the host link, both ways, and whether copies overlap compute.

Measured, with pinned host buffers and CUDA events on side streams:

* `planopt.runtime.measure_cuda_link` (what the profiler puts in a profile:
  a latency + bytes / bandwidth fit per direction);
* a sweep of copy sizes each way (median of `repeats`), and one pageable
  (unpinned) copy each way for contrast;
* both directions at once (one stream each);
* overlap: a bf16 matmul loop on the compute stream alone, a copy alone, and
  both together, for each direction; `overlap` = (alone + alone - together)
  / the shorter alone (1: the copy is fully hidden, 0: they serialise);
* the same through planopt's own copy engine (`CudaCopies.copy_out` of a
  storage, enqueued before the matmuls, as the executor does at the end of a
  forward): the runtime's streams and events, pinned pool included;
* the device's own copy bandwidth and matmul rate beside the
  `planopt.hardware` record's.

On CPU (the smoke run) the same code runs at tiny sizes with
`time.perf_counter` for the events and no side streams; `measure_cuda_link`
and the engine check report that they need CUDA.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from planopt.hardware import GB, GPU, TFLOP
from planopt.profile import Device
from planopt.runtime.link import measure_cuda_link
from planopt.runtime.storage import byte_view
from planopt.runtime.swap import CudaCopies

MIB = 2**20


@dataclass
class LinkResult:
    """Everything part 1 measured (bytes/s, seconds)."""

    fit: dict = field(default_factory=dict)  # measure_cuda_link: h2d/d2h bandwidth, latency
    sweep: list[dict] = field(default_factory=list)  # size, direction, seconds, GB/s, pinned
    both_ways: dict = field(default_factory=dict)
    overlap: list[dict] = field(default_factory=list)
    device: dict = field(default_factory=dict)  # d2d copy GB/s, matmul TFLOP/s
    errors: list[str] = field(default_factory=list)


class Timer:
    """Start/stop marks: CUDA events on a stream, or `time.perf_counter` on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self, stream=None):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(stream or torch.cuda.current_stream())
        return event

    def seconds(self, start, end) -> float:
        if not self.cuda:
            return end - start
        end.synchronize()
        return start.elapsed_time(end) / 1000.0

    def stream(self):
        return torch.cuda.Stream() if self.cuda else None

    def on(self, stream):
        return torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def _buffers(device: torch.device, nbytes: int, pinned: bool = True):
    gpu = torch.empty(nbytes, dtype=torch.uint8, device=device)
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned and device.type == "cuda")
    return gpu, host


def _copy_seconds(timer: Timer, dst, src, repeats: int) -> float:
    stream = timer.stream()
    samples = []
    with timer.on(stream):
        dst.copy_(src, non_blocking=True)  # warm-up
        for _ in range(repeats):
            start = timer.mark(stream)
            dst.copy_(src, non_blocking=True)
            samples.append(timer.seconds(start, timer.mark(stream)))
    timer.sync()
    return statistics.median(samples)


def sweep(device: torch.device, sizes: list[int], repeats: int) -> list[dict]:
    timer = Timer(device)
    rows = []
    largest = max(sizes)
    gpu, host = _buffers(device, largest)
    for size in sizes:
        for direction in ("h2d", "d2h"):
            dst, src = (gpu, host) if direction == "h2d" else (host, gpu)
            sec = _copy_seconds(timer, dst[:size], src[:size], repeats)
            rows.append(dict(size=size, direction=direction, seconds=sec, pinned=True))
    # pageable host memory, for contrast (one mid size)
    mid = sizes[len(sizes) // 2]
    pageable = torch.empty(mid, dtype=torch.uint8)
    for direction in ("h2d", "d2h"):
        dst, src = (gpu[:mid], pageable) if direction == "h2d" else (pageable, gpu[:mid])
        sec = _copy_seconds(timer, dst, src, max(1, repeats // 2))
        rows.append(dict(size=mid, direction=direction, seconds=sec, pinned=False))
    for r in rows:
        r["gbps"] = r["size"] / r["seconds"] / GB if r["seconds"] > 0 else float("inf")
    return rows


def both_ways(device: torch.device, size: int) -> dict:
    """One copy each way at the same time, on two streams."""
    timer = Timer(device)
    gpu_a, host_a = _buffers(device, size)
    gpu_b, host_b = _buffers(device, size)
    s1, s2 = timer.stream(), timer.stream()
    alone = _copy_seconds(timer, gpu_a, host_a, 3) + _copy_seconds(timer, host_b, gpu_b, 3)
    timer.sync()
    start = timer.mark()
    if timer.cuda:
        s1.wait_event(start)
        s2.wait_event(start)
    with timer.on(s1):
        gpu_a.copy_(host_a, non_blocking=True)
        e1 = timer.mark(s1)
    with timer.on(s2):
        host_b.copy_(gpu_b, non_blocking=True)
        e2 = timer.mark(s2)
    together = max(timer.seconds(start, e1), timer.seconds(start, e2))
    return dict(size=size, alone_sum=alone, together=together, gbps=2 * size / together / GB)


def _matmuls(a: torch.Tensor, b: torch.Tensor, count: int) -> None:
    for _ in range(count):
        torch.mm(a, b)


def _overlap_row(label, alone_mm, alone_copy, together) -> dict:
    shorter = min(alone_mm, alone_copy)
    hidden = (alone_mm + alone_copy - together) / shorter if shorter > 0 else 0.0
    return dict(
        what=label,
        matmul_alone=alone_mm,
        copy_alone=alone_copy,
        together=together,
        overlap=max(0.0, min(1.0, hidden)),
    )


def overlap(device: torch.device, size: int, n: int, count: int, engine: bool) -> list[dict]:
    """Copies beside a matmul loop (module doc); `engine`: also through `CudaCopies`."""
    timer = Timer(device)
    dtype = torch.bfloat16
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    gpu, host = _buffers(device, size)
    _matmuls(a, b, 2)  # warm-up
    timer.sync()
    start = timer.mark()
    _matmuls(a, b, count)
    alone_mm = timer.seconds(start, timer.mark())
    rows = []
    for direction in ("h2d", "d2h"):
        dst, src = (gpu, host) if direction == "h2d" else (host, gpu)
        alone_copy = _copy_seconds(timer, dst, src, 3)
        stream = timer.stream()
        timer.sync()
        start = timer.mark()
        if timer.cuda:
            stream.wait_event(start)
        with timer.on(stream):  # enqueued first, on its own stream: free to run beside
            dst.copy_(src, non_blocking=True)
            copied = timer.mark(stream)
        _matmuls(a, b, count)
        computed = timer.mark()
        together = max(timer.seconds(start, copied), timer.seconds(start, computed))
        rows.append(_overlap_row(f"{direction}, side stream", alone_mm, alone_copy, together))
    if engine:
        rows.append(_engine_overlap(device, timer, a, b, count, size, alone_mm))
    timer.sync()
    return rows


def _engine_overlap(device, timer: Timer, a, b, count: int, size: int, alone_mm: float) -> dict:
    """planopt's `CudaCopies`: a copy out enqueued before the matmuls, waited for after them."""
    engine = CudaCopies(device)
    storage = torch.randint(0, 256, (size,), dtype=torch.uint8, device=device)
    try:
        host = engine.copy_out([byte_view(storage)])  # warm-up: pins the pool's buffer
        engine.wait_out(host)
        engine.release(host, None)
        timer.sync()
        start = timer.mark()
        host = engine.copy_out([byte_view(storage)])
        engine.wait_out(host)
        alone_copy = timer.seconds(start, timer.mark())
        engine.release(host, None)
        timer.sync()
        start = timer.mark()
        host = engine.copy_out([byte_view(storage)])
        _matmuls(a, b, count)
        engine.wait_out(host)  # the compute stream waits for the copy, as at swap_wait
        together = timer.seconds(start, timer.mark())
        back = engine.copy_back(host, device)
        engine.wait_back(back)
        engine.release(host, back)
        engine.synchronize()
        same = bool(torch.equal(back.buffers[0], storage))
    finally:
        engine.close()
    row = _overlap_row("d2h, planopt CudaCopies", alone_mm, alone_copy, together)
    row["round_trip_equal"] = same
    return row


def device_rates(device: torch.device, size: int, n: int) -> dict:
    """Device-to-device copy bandwidth (read + write) and the bf16 matmul rate."""
    timer = Timer(device)
    src = torch.empty(size, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    copy = _copy_seconds(timer, dst, src, 5)
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    _matmuls(a, b, 2)
    timer.sync()
    start = timer.mark()
    _matmuls(a, b, 10)
    mm = timer.seconds(start, timer.mark()) / 10
    return dict(d2d_gbps=2 * size / copy / GB, matmul_tflops=2 * n**3 / mm / TFLOP, n=n)


def run(device: torch.device, tiny: bool, log: Callable[[str], None]) -> LinkResult:
    """Every measurement of part 1; each step's failure is recorded and the rest goes on."""
    result = LinkResult()
    cuda = device.type == "cuda"
    sizes = [4096, 65536, MIB] if tiny else [MIB, 8 * MIB, 64 * MIB, 256 * MIB, 1024 * MIB]
    big = MIB if tiny else 512 * MIB
    n, count = (64, 4) if tiny else (8192, 20)

    def attempt(what: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:  # recorded; the other measurements still run
            result.errors.append(f"{what}: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            log(f"  link: {what} failed: {result.errors[-1]}")

    def fit() -> None:
        d = measure_cuda_link(device)
        result.fit = dict(
            h2d_gbps=d.h2d_bandwidth / GB,
            d2h_gbps=d.d2h_bandwidth / GB,
            latency_us=d.transfer_latency * 1e6,
            name=d.name,
        )

    attempt("measure_cuda_link", fit)
    attempt("sweep", lambda: result.sweep.extend(sweep(device, sizes, 3 if tiny else 5)))
    attempt("both ways", lambda: result.both_ways.update(both_ways(device, big)))
    attempt("overlap", lambda: result.overlap.extend(overlap(device, big, n, count, cuda)))
    attempt("device rates", lambda: result.device.update(device_rates(device, big, n)))
    if not cuda:
        result.errors.append("CudaCopies overlap: needs CUDA (CPU smoke run)")
    return result


def profile_link(result: LinkResult, record: GPU) -> Device:
    """The link every profile of the run gets: `measure_cuda_link`'s fit, else the
    sweep's largest pinned copies, else the record's (so that no profile depends on
    `measure_cuda_link` working)."""
    if result.fit:
        f = result.fit
        return Device(f["name"], f["h2d_gbps"] * GB, f["d2h_gbps"] * GB, f["latency_us"] * 1e-6)
    pinned = [r for r in result.sweep if r["pinned"]]
    if pinned:
        top = max(r["size"] for r in pinned)
        bw = {r["direction"]: r["gbps"] * GB for r in pinned if r["size"] == top}
        low = min(r["size"] for r in pinned)
        latency = min(r["seconds"] for r in pinned if r["size"] == low)
        if "h2d" in bw and "d2h" in bw:
            return Device("sweep's largest pinned copies", bw["h2d"], bw["d2h"], latency)
    return Device(f"{record.name} record (the link was not measured)", *_record_link(record))


def _record_link(record: GPU) -> tuple[float, float, float]:
    d = record.device()
    return d.h2d_bandwidth, d.d2h_bandwidth, d.transfer_latency


def render(result: LinkResult, record: GPU, head: str) -> str:
    """link.md."""
    about = __doc__.split("\n\n", 1)[1].split("\n\nOn CPU")[0]
    lines = ["# Host link and copy/compute overlap on the GPU", "", head, "", about]
    lines += ["", "## Against the planopt.hardware record", ""]
    lines += ["| quantity | measured | record | measured / record |", "|---|---:|---:|---:|"]
    link = record.link_bandwidth / GB

    def cmp(label: str, value: float | None, ref: float, unit: str) -> None:
        if value is None:
            lines.append(f"| {label} | - | {ref:.4g} {unit} | - |")
        else:
            lines.append(f"| {label} | {value:.4g} {unit} | {ref:.4g} {unit} | {value / ref:.2f} |")

    cmp("H2D bandwidth (measure_cuda_link fit)", result.fit.get("h2d_gbps"), link, "GB/s")
    cmp("D2H bandwidth (measure_cuda_link fit)", result.fit.get("d2h_gbps"), link, "GB/s")
    cmp("copy latency", result.fit.get("latency_us"), record.transfer_latency * 1e6, "us")
    cmp(
        "HBM (device copy, read + write)",
        result.device.get("d2d_gbps"),
        record.memory_bandwidth / GB,
        "GB/s",
    )
    cmp("bf16 matmul", result.device.get("matmul_tflops"), record.peak("bf16") / TFLOP, "TFLOP/s")
    lines += ["", "## Copy sizes (median of repeats)", ""]
    lines += ["| size | direction | host memory | ms | GB/s |", "|---:|---|---|---:|---:|"]
    for r in result.sweep:
        kind = "pinned" if r["pinned"] else "pageable"
        lines.append(
            f"| {r['size'] / MIB:.4g} MiB | {r['direction']} | {kind} | {r['seconds'] * 1e3:.3f} | "
            f"{r['gbps']:.2f} |"
        )
    if result.both_ways:
        w = result.both_ways
        lines += [
            "",
            f"Both directions at once ({w['size'] / MIB:g} MiB each way, two streams): "
            f"{w['together'] * 1e3:.2f} ms together against {w['alone_sum'] * 1e3:.2f} ms one "
            f"after the other; {w['gbps']:.1f} GB/s in all.",
        ]
    lines += ["", "## Does a copy overlap a running matmul?", ""]
    lines += [
        "| copy | matmuls alone ms | copy alone ms | together ms | overlap |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result.overlap:
        extra = (
            "" if "round_trip_equal" not in r else f" (round trip equal: {r['round_trip_equal']})"
        )
        lines.append(
            f"| {r['what']}{extra} | {r['matmul_alone'] * 1e3:.2f} | {r['copy_alone'] * 1e3:.2f} | "
            f"{r['together'] * 1e3:.2f} | {r['overlap']:.2f} |"
        )
    if result.errors:
        lines += ["", "## Failed", ""] + [f"- {e}" for e in result.errors]
    return "\n".join(lines) + "\n"
