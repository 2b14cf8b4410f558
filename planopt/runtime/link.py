"""The host link of a CUDA device, measured with pinned-memory copies.

Copy time is fitted as `latency + bytes / bandwidth` over a few sizes, per
direction (least squares on the median of several copies per size): the
spec's `Device`. CPU has no separate host link, so there the caller gives it.
"""

from __future__ import annotations

import statistics

import numpy as np
import torch

from planopt.profile import Device
from planopt.runtime.errors import CudaUnavailableError

DEFAULT_SIZES = (1 << 20, 8 << 20, 32 << 20, 128 << 20)


def _fit(sizes: tuple[int, ...], seconds: list[float]) -> tuple[float, float]:
    """(bandwidth, latency) of `seconds = latency + size / bandwidth`."""
    slope, intercept = np.polyfit(np.array(sizes, dtype=float), np.array(seconds), 1)
    if slope <= 0:  # timing noise on a link too fast to resolve: take the largest copy
        slope = seconds[-1] / sizes[-1]
    return float(1.0 / slope), max(0.0, float(intercept))


def measure_cuda_link(
    device: torch.device | str = "cuda", sizes: tuple[int, ...] = DEFAULT_SIZES, repeats: int = 5
) -> Device:
    """D2H and H2D bandwidth and latency of `device` with pinned host buffers (needs CUDA)."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise CudaUnavailableError(
            f"measure_cuda_link: needs a CUDA device, got {device} (torch.cuda.is_available() "
            f"is {torch.cuda.is_available()}); on CPU give the link as planopt.Device(...)"
        )
    largest = max(sizes)
    gpu = torch.empty(largest, dtype=torch.uint8, device=device)
    host = torch.empty(largest, dtype=torch.uint8, pin_memory=True)
    stream = torch.cuda.Stream(device)
    times: dict[str, list[float]] = {"d2h": [], "h2d": []}
    with torch.cuda.stream(stream):
        for size in sizes:
            for direction in ("d2h", "h2d"):
                dst, src = (host, gpu) if direction == "d2h" else (gpu, host)
                dst[:size].copy_(src[:size], non_blocking=True)  # warm-up
                samples = []
                for _ in range(repeats):
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record(stream)
                    dst[:size].copy_(src[:size], non_blocking=True)
                    end.record(stream)
                    end.synchronize()
                    samples.append(start.elapsed_time(end) / 1000.0)
                times[direction].append(statistics.median(samples))
    d2h_bw, d2h_lat = _fit(sizes, times["d2h"])
    h2d_bw, h2d_lat = _fit(sizes, times["h2d"])
    name = torch.cuda.get_device_name(device)
    return Device(
        name=f"{name} (measured)",
        h2d_bandwidth=h2d_bw,
        d2h_bandwidth=d2h_bw,
        transfer_latency=(d2h_lat + h2d_lat) / 2,
    )
