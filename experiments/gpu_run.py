"""The GPU run (issue 26): one script that a session lent a GPU runs once, under a deadline.

    python -m experiments.gpu_run --out $OUT                  # on the device machine
    python -m experiments.gpu_run --device cpu --tiny --out /tmp/g   # smoke run, any machine

Parts, in priority order, each table written as soon as its part ends (a
kill keeps what was measured):

1. `link.md`: the host link both ways with pinned buffers, copies beside a
   running matmul, against the `planopt.hardware` record (`gpu_link`);
2. `fidelity_memory_gpu.md`: the reference models: keep-all, 10 random
   plans and every MIP-free method's plan at 70/50/30%, predicted peak
   against `torch.cuda.max_memory_allocated` (`gpu_fidelity`);
3. `fidelity_time_gpu.md`: the same plans' predicted makespan against the
   step timed by CUDA events (the same runs);
4. `roofline_vs_measured.md`: the roofline profile against the measured one,
   per layer (`gpu_roofline`);
2b. GPT-2 small (8x1024), Llama-1B-shaped (4x2048) and Qwen2-0.5B-shaped
   (4x2048) in bf16 autocast, built from configs: added to tables 2-4;
5. `vs_torch_gpu.md`: the side-by-side benchmark on the GPU for the time
   left (`gpu_vs_torch`).

Plus `gpu_run.json` (every raw row, the environment, each part's outcome)
and `log.txt`: seven files. Each part runs in its own try/except (a failure
is written, with its traceback, to the log and the part's table, and the
next part runs); the clock is checked before each part, model and plan; a
part that overruns its share by `GRACE` seconds is interrupted (SIGALRM),
and a watchdog thread ends the process `WATCHDOG` seconds after the budget
whatever it is doing (a hung CUDA call), so the run always ends.

Only methods that need no MIP package run (the device machine has no
ortools, pulp or highspy): the greedy, remat-dp, blocks with its windows and
bound off, the baselines.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch

import planopt
from experiments import gpu_fidelity as fid
from experiments import gpu_link, gpu_report, gpu_roofline, gpu_vs_torch
from experiments.gpu_models import environment, gpu_record, header, hf_models, reference_models
from planopt.registry import missing_modules

MIP_PACKAGES = ("ortools", "pulp", "highspy")
GRACE = 45.0  # seconds a part may overrun its share before it is interrupted
WATCHDOG = 60.0  # seconds after the budget at which the process ends, whatever it does
# Shares of the budget, in priority order (unused time passes to the next part).
SHARES = {"link": 0.06, "reference": 0.38, "time": 0.0, "roofline": 0.06, "hf": 0.38}
PARTS = (*SHARES, "vs_torch")
FILES = {
    "link": "link.md",
    "memory": "fidelity_memory_gpu.md",
    "time": "fidelity_time_gpu.md",
    "roofline": "roofline_vs_measured.md",
    "vs_torch": "vs_torch_gpu.md",
    "json": "gpu_run.json",
    "log": "log.txt",
}


class PartTimeout(BaseException):
    """A part ran past its share and its grace (raised by SIGALRM in the main thread)."""


@contextmanager
def alarm(seconds: float):
    """Raise `PartTimeout` in the main thread after `seconds` (no-op off the main thread)."""
    if threading.current_thread() is not threading.main_thread() or seconds <= 0:
        yield
        return

    def fire(signum, frame):
        raise PartTimeout(f"interrupted after {seconds:.0f} s (its share and {GRACE:.0f} s)")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class Run:
    """The run's state: deadline, output files, log, raw rows, each part's outcome."""

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        self.started = time.monotonic()
        self.end = self.started + args.budget_seconds
        self.banked = 0.0
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._log = (self.out / FILES["log"]).open("a", buffering=1)
        faulthandler.enable(self._log)
        self.parts: dict[str, dict] = {}
        self.env: dict[str, str] = {}
        self.link = None
        self.infos: list[fid.ModelInfo] = []
        self.rows: list[fid.PlanRow] = []
        self.profiles: dict[str, tuple] = {}
        self.roofline: list[gpu_roofline.RooflineRow] = []
        self.vs_rows: list[gpu_vs_torch.VsRow] = []
        self.link_result: gpu_link.LinkResult | None = None

    def left(self) -> float:
        return self.end - time.monotonic()

    def log(self, message: str) -> None:
        stamp = f"[{time.monotonic() - self.started:6.1f} s] "
        text = "\n".join(stamp + line for line in message.rstrip("\n").splitlines())
        print(text, file=sys.stderr, flush=True)
        self._log.write(text + "\n")

    def write(self, key: str, text: str) -> None:
        (self.out / FILES[key]).write_text(text)

    def save_json(self) -> None:
        data = {
            "env": self.env,
            "args": {k: v for k, v in vars(self.args).items() if k != "out"},
            "seconds": round(time.monotonic() - self.started, 1),
            "parts": self.parts,
            "link": asdict(self.link_result) if self.link_result else None,
            "models": [asdict(i) for i in self.infos],
            "rows": [{**asdict(r), "memory_error": r.memory_error, "time_error": r.time_error}
                     for r in self.rows],
            "roofline": [asdict(r) for r in self.roofline],
            "vs_torch": [asdict(r) for r in self.vs_rows],
        }  # fmt: skip
        tmp = self.out / (FILES["json"] + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
        tmp.replace(self.out / FILES["json"])

    def part(self, name: str, fn: Callable[[Callable[[], float]], None], share: float) -> None:
        """Run one part inside its share of the budget; record how it ended."""
        begun = time.monotonic()
        allowance = min(self.left(), share * self.args.budget_seconds + self.banked)
        if share == 0:
            allowance = max(self.left(), 0.0)
        part_end = begun + allowance
        record = {"status": "ok", "seconds": 0.0, "allowance": round(allowance, 1)}
        self.parts[name] = record
        if name not in self.args.parts:
            record["status"] = "skipped: not asked (--parts)"
            return
        if self.left() <= 1:
            record["status"] = "skipped: no time left"
            self.log(f"part {name}: skipped, no time left")
            return
        self.log(f"part {name}: {allowance:.0f} s")
        try:
            with alarm(allowance + GRACE):
                fn(lambda: min(part_end, self.end) - time.monotonic())
        except PartTimeout as exc:
            record["status"] = f"timeout: {exc}"
            self.log(f"part {name}: {exc}")
        except Exception as exc:  # a failed part is a result: its table says so
            record["status"] = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            record["traceback"] = traceback.format_exc()
            self.log(f"part {name} failed:\n{record['traceback']}")
        record["seconds"] = round(time.monotonic() - begun, 1)
        if share:
            self.banked = max(0.0, allowance - record["seconds"])
        self.save_json()

    def failures(self, *names: str) -> list[str]:
        """Each named part that did not end well, for a table's own 'failed' section."""
        out = []
        for name in names:
            rec = self.parts.get(name)
            if rec and rec["status"] != "ok":
                tb = rec.get("traceback", "").strip().splitlines()
                out.append(
                    f"part `{name}`: {rec['status']}"
                    + (f" (at {tb[-3].strip()})" if len(tb) >= 3 else "")
                )
        return out  # fmt: skip

    def head(self) -> list[str]:
        shown = " ".join(sys.argv[1:]) if self.args.argv is None else " ".join(self.args.argv)
        missing = missing_modules(MIP_PACKAGES)
        return [
            header(self.env, self.record, self.record_how),
            "",
            f"Generated by `python -m experiments.gpu_run {shown}` "
            f"({time.monotonic() - self.started:.0f} s into a {self.args.budget_seconds:.0f} s "
            f"budget); sizes `{'tiny' if self.args.tiny else 'real'}`, seed {self.args.seed}. "
            f"MIP packages absent: {', '.join(missing) or 'none'}; parts: "
            + ", ".join(f"{k} {v['status'].split(':')[0]}" for k, v in self.parts.items())
            + ".",
        ]


def _settings(run: Run, left: Callable[[], float], iterations: int) -> fid.Settings:
    cuda = run.device.type == "cuda"
    return fid.Settings(
        device=run.device,
        link=run.link,
        seed=run.args.seed,
        random=run.args.random,
        profile_iterations=10 if cuda else 2,
        profile_warmup=3 if cuda else 1,
        iterations=iterations,
        log=run.log,
        left=left,
    )


def _models_part(run: Run, models, iterations: int, roofline: bool):
    def part(left: Callable[[], float]) -> None:
        chosen = [m for m in models if run.args.models is None or m.key in run.args.models]
        for k, model in enumerate(chosen):
            share_end = time.monotonic() + max(0.0, left()) / (len(chosen) - k)
            s = _settings(run, lambda e=share_end: min(e - time.monotonic(), left()), iterations)
            if left() < 10:
                run.infos.append(fid.ModelInfo(model.key, model.config, error="skipped: deadline"))
                continue
            run.log(f"model {model.key} ({model.config}): {s.left():.0f} s")
            try:
                info = fid.run_model(
                    model, s, run.rows, lambda p, m=model: run.profiles.__setitem__(m.key, (m, p))
                )
            except PartTimeout:  # the part's alarm: the model is listed, the part ends
                run.infos.append(fid.ModelInfo(model.key, model.config, error="interrupted"))
                raise
            except Exception as exc:  # the model's failure is a row; the next model runs
                info = fid.ModelInfo(model.key, model.config, error=f"{type(exc).__name__}: {exc}")
                run.log(traceback.format_exc())
                fid.free_device(run.device)
            run.infos.append(info)
            _write_fidelity(run)
            if roofline and model.key in run.profiles and left() > 5:
                _roofline_one(run, model.key)

    return part


def _write_fidelity(run: Run) -> None:
    head = run.head()
    fails = run.failures("reference", "hf")
    extra = ["", "## Failed", ""] + [f"- {f}" for f in fails] if fails else []
    tail = "\n".join(extra) + ("\n" if extra else "")
    run.write("memory", gpu_report.render_memory(run.infos, run.rows, head) + tail)
    run.write("time", gpu_report.render_time(run.infos, run.rows, head) + tail)
    run.save_json()


def _roofline_one(run: Run, key: str) -> None:
    model, prof = run.profiles[key]
    run.roofline = [r for r in run.roofline if r.model != key]
    run.roofline.append(gpu_roofline.run_one(model, prof, run.record, run.log))
    _write_roofline(run)


def _write_roofline(run: Run) -> None:
    notes = run.failures("roofline", "hf")
    if run.device.type != "cuda":
        notes.append("CPU smoke run: measured on CPU, against a GPU's roofline (no meaning)")
    text = gpu_roofline.render(run.roofline, run.record, " ".join(run.head()), notes)
    run.write("roofline", text)
    run.save_json()


def _link_part(run: Run) -> Callable:
    def part(left: Callable[[], float]) -> None:
        result = gpu_link.run(run.device, run.args.tiny, run.log)
        run.link_result = result
        if run.device.type == "cuda":
            run.link = gpu_link.profile_link(result, run.record)
            run.log(f"  link for the profiles: {run.link}")
        run.write("link", gpu_link.render(result, run.record, " ".join(run.head())))

    return part


def _roofline_part(run: Run) -> Callable:
    def part(left: Callable[[], float]) -> None:
        for key in list(run.profiles):
            if left() < 3:
                break
            _roofline_one(run, key)
        _write_roofline(run)

    return part


def _vs_torch_part(run: Run) -> Callable:
    def part(left: Callable[[], float]) -> None:
        cuda = run.device.type == "cuda"
        s = gpu_vs_torch.VsSettings(
            device=run.device,
            tiny=run.args.tiny,
            seed=run.args.seed,
            steps=5 if cuda else 2,
            link=run.link if cuda else fid_instant(),
            log=run.log,
            left=left,
        )
        for name in run.args.vs_models or list(gpu_vs_torch.MODELS):
            if left() < 10:
                run.vs_rows.append(gpu_vs_torch.VsRow(name, "every method", note="skipped"))
                continue
            fid.free_device(run.device)
            gpu_vs_torch.run_model(name, s, run.vs_rows)
            run.write("vs_torch", gpu_vs_torch.render(run.vs_rows, " ".join(run.head())))
            run.save_json()
        fid.free_device(run.device)

    return part


def fid_instant() -> planopt.Device:
    return planopt.Device("instantaneous (CPU smoke run)", math.inf, math.inf, 0.0)


def _watchdog(run: Run) -> None:
    """End the process WATCHDOG s after the budget, whatever the main thread is doing."""

    def watch() -> None:
        while run.left() > -WATCHDOG:
            time.sleep(1.0)
        run.log(f"watchdog: {WATCHDOG:.0f} s past the budget; ending the process")
        try:
            run.save_json()
        finally:
            os._exit(3)

    threading.Thread(target=watch, daemon=True, name="gpu_run-watchdog").start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT"), help="folder (default: $OUT)")
    parser.add_argument("--budget-seconds", type=float, default=420.0)
    parser.add_argument("--device", default=None, help="cuda (default when available) or cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (the smoke run)")
    parser.add_argument("--models", nargs="+", default=None, help="e.g. mlp gpt hf-gpt2")
    parser.add_argument("--vs-models", nargs="+", default=None, choices=gpu_vs_torch.MODELS)
    parser.add_argument(
        "--parts", nargs="+", default=list(PARTS), choices=PARTS, help="default: all, in order"
    )
    parser.add_argument("--random", type=int, default=10, help="random plans per model")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.argv = argv
    if not args.out:
        parser.error("--out is required when $OUT is not set")
    args.device = args.device or ("cuda" if torch.cuda.is_available() else None)
    if args.device is None:
        parser.error("no CUDA device: run on a GPU machine, or pass --device cpu --tiny")
    device = torch.device(args.device)
    run = Run(args, device)
    run.env = environment(device)
    run.record, run.record_how = gpu_record(run.env["gpu"] if device.type == "cuda" else "cpu")
    run.log(f"gpu_run: {run.env}; record {run.record.name} ({run.record_how})")
    _watchdog(run)
    cuda = device.type == "cuda"
    ref_iters, hf_iters = (5, 3) if cuda else (2, 2)
    if not cuda:
        run.link = fid_instant()
    run.part("link", _link_part(run), SHARES["link"])
    if not cuda:
        run.link = fid_instant()  # CPU: copies end when made, as the prediction assumes
    tiny = args.tiny
    run.part("reference", _models_part(run, reference_models(tiny, args.seed), ref_iters, False),
             SHARES["reference"])  # fmt: skip
    run.part("time", lambda left: _write_fidelity(run), SHARES["time"])
    run.part("roofline", _roofline_part(run), SHARES["roofline"])
    run.part("hf", _models_part(run, hf_models(tiny, args.seed), hf_iters, True), SHARES["hf"])
    run.part("vs_torch", _vs_torch_part(run), 1.0)
    try:  # the tables again, with every part's outcome in their headers
        _write_fidelity(run)
        _write_roofline(run)
    except Exception:
        run.log(f"final tables not rewritten:\n{traceback.format_exc()}")
    run.log(f"gpu_run: done in {time.monotonic() - run.started:.0f} s; files in {run.out}")
    run.save_json()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
