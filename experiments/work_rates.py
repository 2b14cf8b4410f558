"""CPU-seconds per work unit, per method: what `planopt.work.METHOD_RATES` is calibrated on.

Run from the repository root (minutes; it measures CPU time, so other load
on the machine slows it without changing its figures much):

    python -m experiments.work_rates                  # prints one JSON line a solve
    python -m experiments.work_rates --methods lns --json /tmp/rates.jsonl

Each solve runs the method's function on a `Problem` built as
`planopt.solve` builds it, and measures the CPU time of that call with
`os.times()`: this process *and its children* (CP-SAT runs in a forked
child, CBC as a subprocess; `time.process_time` alone misses both). The
API's own checks and its final re-simulation are outside the meter and
outside the measurement. `raw` is the count the method charged before its
rate (`WorkMeter.raw_used`), `units` the calibrated work (`work_used`).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
from dataclasses import dataclass

import planopt
from planopt import registry
from planopt.budget import min_budget, parse_budget
from planopt.bundled import resolve_profile
from planopt.problem import Problem
from planopt.work import WorkMeter, method_rate


def cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass(frozen=True)
class Case:
    """One calibration solve: a method on a net at a budget with a work limit."""

    method: str
    net: str
    budget: str
    work: float


def net(name: str) -> planopt.Profile:
    """A bundled profile by name, or `random:L:seed[:family]` (a `random_chain`; past
    10^4 layers its static memory is 2% of the activations, as in bench_limits)."""
    if name.startswith("random:"):
        _, layers, seed, *family = name.split(":")
        n = int(layers)
        static = 0.25 if n <= 10_000 else 0.02
        kind = (family or ["mixed"])[0]
        return planopt.random_chain(n, seed=int(seed), family=kind, static_fraction=static)
    return resolve_profile(name)


def measure(case: Case) -> dict:
    """Solve `case` once in a forked child (`isolated`); its raw count, calibrated
    units, CPU seconds and status."""
    return isolated(_measure, case)


def isolated(fn, *args):
    """`fn(*args)` in a forked child of this process, its result sent back pickled.

    NOTE (why): solves cache per process what a first solve of a net builds
    (block fronts, the relaxation's model), while the charge is the same
    either way (it must not depend on a cache). Measured in one process, the
    second solve of a net ran on the first one's caches and a unit looked
    up to 2x cheaper than it was. Each child starts from the warmed-up
    parent (imports done), with no net's caches: what one `planopt solve`
    pays.
    """
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: run, send, exit without running the parent's cleanup
        os.close(reader)
        code = 0
        try:
            payload = pickle.dumps((True, fn(*args)))
        except BaseException as err:  # sent back and raised in the parent
            payload, code = pickle.dumps((False, repr(err))), 1
        with os.fdopen(writer, "wb") as out:
            out.write(payload)
        os._exit(code)
    os.close(writer)
    with os.fdopen(reader, "rb") as inp:
        ok, value = pickle.loads(inp.read())
    os.waitpid(pid, 0)
    if not ok:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)}{args} failed in its child: {value}")
    return value


def _measure(case: Case) -> dict:
    """`measure` in this process. A net named `NAME@BUDGET` is solved at that budget
    instead of the case's."""
    name, _, budget = case.net.partition("@")
    profile = net(name)
    spec = registry.get(case.method)
    fn = spec.load()
    options = {"max_layers": len(profile.layers)} if "max_layers" in spec.options() else {}
    rate = method_rate(spec.name, len(profile.layers))
    problem = Problem(
        profile=profile,
        budget=parse_budget(budget or case.budget, profile),
        min_budget=min_budget(profile),
        work_limit=case.work,
        meter=WorkMeter.calibrated(case.work, rate),
    )
    began = cpu_seconds()
    out = fn(problem, **options)
    cpu = cpu_seconds() - began
    units = problem.meter.units_used()
    return {
        "method": spec.name,
        "net": case.net,
        "layers": len(profile.layers),
        "budget": case.budget,
        "work_limit": case.work,
        "status": str(out.status),
        "raw": problem.meter.raw_used(),
        "units": units,
        "rate": problem.meter.rate,  # auto's: the rate of the method it picked
        "cpu": cpu,
        "cpu_per_unit": cpu / units if units > 0 else None,
    }


# Per method: nets and work limits that keep it busy for about 0.5-5 CPU-seconds
# (a baseline's few simulations need a long chain to cost anything).
CASES: dict[str, tuple[tuple[str, ...], tuple[float, ...]]] = {
    "keep-all": (("random:200000:1", "random:400000:2"), (1e6,)),
    "all-swap": (("random:100000:1", "random:200000:2"), (1e6,)),
    "sqrt-n": (("random:20000:1", "random:50000:2"), (1e6,)),
    "superneurons": (("random:100000:1", "random:200000:2"), (1e6,)),
    "pooch": (("random:1000:1", "random:2000:2", "gpt-48blk-b8-s1024-h100-pcie5-roofline"), (1e6,)),
    "exact": (
        ("random:24:3", "vgg16-b64-a100-pcie4-roofline", "random:40:4"),
        (1.0, 3.0),
    ),
    "recompute-only": (
        ("random:40:3", "random:120:4", "random:300:7", "gpt-24blk-b8-s1024-h100-pcie5-roofline"),
        (1.0, 3.0),
    ),
    "remat-dp": (
        (
            "gpt-24blk-b8-s1024-h100-pcie5-roofline",
            "resnet50-ops-b128-a100-pcie4-roofline",
            "random:300:5",
        ),
        (1.0, 3.0),
    ),
    "swap-only": (("random:24:3", "random:30:4"), (1.0, 3.0)),
    "brute-force": (("random:5:1", "random:6:2"), (1.0, 3.0)),
    "blocks": (
        (
            "random:40:3",
            "gpt-12blk-b8-s1024-h100-pcie5-roofline@70%",
            "random:300:7",
            "gpt-48blk-b8-s1024-h100-pcie5-roofline",
        ),
        (1.0, 3.0),
    ),
    "lns": (("random:300:7", "gpt-24blk-b8-s1024-h100-pcie5-roofline"), (1.0, 3.0)),
    "auto": (
        (
            "gpt2-b8-s1024-h100-pcie5-traced@70%",
            "random:300:7",
            "gpt-12blk-b8-s1024-h100-pcie5-roofline@70%",
        ),
        (1.0, 3.0),
    ),
    # the LP, then HiGHS's MIP on the rest: nets where its root and its nodes dominate
    "lower-bound": (
        (
            "random:300:7",
            "gpt-48blk-b8-s1024-h100-pcie5-roofline",
            "gpt-24blk-b8-s1024-h100-pcie5-roofline",
            "resnet50-ops-b128-a100-pcie4-roofline",
            "gpt-12blk-b8-s1024-h100-pcie5-roofline@70%",
            "random:600:4",
        ),
        (1.0, 3.0),
    ),
}
BUDGET = "40%"


def cases(
    methods: list[str] | None = None,
    nets: list[str] | None = None,
    works: list[float] | None = None,
) -> list[Case]:
    """The calibration cases of `methods` (default: every registered method listed
    above), on `nets` and `works` instead of each method's own where given."""
    names = methods or list(CASES)
    return [
        Case(m, n, BUDGET, w)
        for m in names
        if m in registry.available()
        for n in nets or CASES[m][0]
        for w in works or CASES[m][1]
    ]


def warm_up(method: str) -> None:
    """Import and run `method` once on a small net in this process, so no row (each a
    fork of it) pays for first imports."""
    _measure(Case(method, "random:6:0", "60%", 0.05))


def run(
    methods: list[str] | None = None,
    log=None,
    nets: list[str] | None = None,
    works: list[float] | None = None,
) -> list[dict]:
    """Every calibration case of `methods` (see `cases`), each method warmed up first."""
    rows, warmed = [], set()
    for case in cases(methods, nets, works):
        if case.method not in warmed:
            warm_up(case.method)
            warmed.add(case.method)
        rows.append(measure(case))
        if log is not None:
            log(rows[-1])
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+")
    parser.add_argument("--nets", nargs="+", help="these nets instead of each method's own")
    parser.add_argument("--work", nargs="+", type=float, help="these work limits instead")
    parser.add_argument("--json", help="append each row to this file too")
    args = parser.parse_args(argv)

    def log(row: dict) -> None:
        line = json.dumps(row)
        print(line, flush=True)
        if args.json:
            with open(args.json, "a") as handle:
                handle.write(line + "\n")

    run(args.methods, log, args.nets, args.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
