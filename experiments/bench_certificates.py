"""Certificates as fast as the plans: the gap certified in 5 s against the bound of 120 s.

Run from the repository root:

    python -m experiments.bench_certificates        # writes experiments/results/certificates.md

Generated families (issue 18): GPT-style decoders per block and per operator
(`planopt.zoo.gpt`, H100 roofline) at 12-96 blocks with varied sequence
lengths and vocabularies, CNN chains (ResNet-50 per operator on the A100
roofline, a random CNN chain of 500 layers; VGG-16 at batch 64 is below its
minimum budget at all three fractions) and random chains of 200-2,000
layers (`planopt.random_chain`, cost model v2), at 70/50/30% of keep-all
activation memory.

Per net and budget:

* the bound `planopt.solve(..., "lower-bound")` certifies with a time limit
  of 10%, 50% and 100% of `BUDGET_S` (LP first, then the MIP on the time
  left), each from a cold cache (`relaxation_highs.clear_cache()`), so no
  run profits from another's basis;
* the reference: the same method with `REFERENCE_S` seconds;
* `blocks` with `BUDGET_S` (its own plan and certificate), and on the
  decoders, random-cnn-500 and random-mixed-200 with `REFERENCE_S` too.

A gap is `(plan - bound) / plan` for the best plan known (the faster of the
`blocks` runs). Targets: the 5 s bound within 1 percentage point of the
120 s one on every net of up to 1,000 layers; `blocks`' own certified gap
at 5 s within 3% wherever its 120 s certificate is within 1%.

NOTE (cost): the 120 s runs are cached in `certificates_references.json`
(keyed by the profile's fingerprint and the budget); a run computes only
the missing ones (`--fresh` recomputes all), so the default run costs the
5 s runs alone (about 7 minutes). Every time is wall time on the shared
2-core machine the table was made on; the load average is in the header.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import planopt
from planopt.zoo import A100_PCIE4, H100_PCIE5, gpt, resnet50, to_profile
from planopt.zoo.chain import Group, Network

RESULTS = Path(__file__).parent / "results"
TABLE = RESULTS / "certificates.md"
REFERENCES = RESULTS / "certificates_references.json"
FRACTIONS = (0.7, 0.5, 0.3)
BUDGET_S = 5.0
CHECKPOINTS = (0.1, 0.5, 1.0)
REFERENCE_S = 120.0
TARGET_PP = 0.01  # the 5 s bound within this (of the plan) of the 120 s bound
TARGET_UP_TO = 1000  # layers
BLOCKS_TARGET = 0.03  # blocks' 5 s gap, where its 120 s gap is within BLOCKS_TIGHT
BLOCKS_TIGHT = 0.01


def per_block(net: Network) -> Network:
    """`net` with each decoder block's operators merged into one layer."""
    groups: list[Group] = []
    for group in net.groups:
        head = group.name.split(".")[0]
        if head.startswith("block") and groups and groups[-1].name == head:
            groups[-1] = Group(head, groups[-1].ops + group.ops)
        elif head.startswith("block"):
            groups.append(Group(head, group.ops))
        else:
            groups.append(group)
    return dataclasses.replace(net, groups=tuple(groups), name=net.name + "-by-block")


@dataclass(frozen=True)
class Net:
    """One generated net of the benchmark."""

    name: str
    make: Callable[[], planopt.Profile]
    blocks_reference: bool = False  # `blocks` also runs for REFERENCE_S


def _decoder(blocks: int, batch: int, seq: int, vocab: int, by_block: bool) -> Net:
    cut = "blk" if by_block else "ops"
    name = f"gpt{blocks}-{cut}-b{batch}-s{seq}-v{vocab}"

    def make() -> planopt.Profile:
        net = gpt(blocks, batch, seq, vocab=vocab)
        return to_profile(per_block(net) if by_block else net, H100_PCIE5, name=name)

    return Net(name, make, blocks_reference=True)


def _random(n: int, family: str, seed: int, blocks_reference: bool = False) -> Net:
    name = f"random-{family}-{n}"
    make = lambda: planopt.random_chain(n, seed=seed, family=family, version=2)  # noqa: E731
    return Net(name, make, blocks_reference)


NETS: tuple[Net, ...] = (
    _decoder(12, 8, 1024, 50257, by_block=True),
    _decoder(48, 4, 2048, 32000, by_block=True),
    _decoder(96, 2, 512, 128256, by_block=True),
    _decoder(12, 4, 2048, 50257, by_block=False),
    _decoder(48, 4, 512, 32000, by_block=False),
    _decoder(72, 2, 1024, 128256, by_block=False),
    Net(
        "resnet50-ops-b64",
        lambda: to_profile(resnet50(64, per_operator=True), A100_PCIE4, name="resnet50-ops-b64"),
    ),
    _random(500, "cnn", 4, blocks_reference=True),
    _random(200, "mixed", 1, blocks_reference=True),
    _random(1000, "transformer", 2),
    _random(2000, "cnn", 3),
)


def _cold_solve(profile: planopt.Profile, budget: float, method: str, seconds: float):
    """The solution, from an empty model cache, and the CPU seconds it had (the machine
    is shared: a wall-clock limit may give a solve much less than itself)."""
    from solvers.model.relaxation_highs import clear_cache

    clear_cache()
    started = time.process_time()
    solution = planopt.solve(profile, budget, method, time_limit=seconds)
    return solution, time.process_time() - started


def _bound_record(solution, wall: float) -> dict:
    cert = solution.bound_provenance
    return {
        "bound": solution.lower_bound,
        "source": None if cert is None else cert.source,
        "complete": None if cert is None else cert.complete,
        "wall": wall,
    }


def _plan_record(solution, wall: float) -> dict:
    return {**_bound_record(solution, wall), "makespan": solution.makespan, "gap": solution.gap}


def _reference(task: tuple[str, float]) -> tuple[str, dict]:
    """The 120 s runs of one (net, fraction)."""
    name, fraction = task
    net = next(n for n in NETS if n.name == name)
    profile = net.make()
    budget = planopt.budget_from_fraction(profile, fraction)
    bound, wall = _cold_solve(profile, budget, "lower-bound", REFERENCE_S)
    record = {"fingerprint": profile.fingerprint, **_bound_record(bound, wall)}
    if net.blocks_reference:
        plan, wall = _cold_solve(profile, budget, "blocks", REFERENCE_S)
        record["blocks"] = _plan_record(plan, wall)
    return _key(name, fraction), record


def _key(name: str, fraction: float) -> str:
    return f"{name}@{fraction:g}"


def references(nets, fresh: bool, jobs: int) -> dict:
    """The cached 120 s runs, computing (and saving) the missing ones."""
    cached = json.loads(REFERENCES.read_text()) if REFERENCES.exists() and not fresh else {}
    todo = []
    for net in nets:
        fingerprint = net.make().fingerprint
        for fraction in FRACTIONS:
            entry = cached.get(_key(net.name, fraction))
            stale = entry is None or entry["fingerprint"] != fingerprint
            if stale or (net.blocks_reference and "blocks" not in entry):
                todo.append((net.name, fraction))
    if todo:
        print(f"{len(todo)} reference runs of {REFERENCE_S:g} s ({jobs} at a time)", flush=True)
        with ProcessPoolExecutor(jobs) as pool:
            for key, record in pool.map(_reference, todo):
                cached[key] = record
                REFERENCES.write_text(json.dumps(cached, indent=1, sort_keys=True) + "\n")
                print(f"  {key}: {record}", flush=True)
    return cached


@dataclass(frozen=True)
class Row:
    net: str
    layers: int
    fraction: float
    plan: float  # best plan known, over T_ideal
    gaps: tuple[float, ...]  # the bound's certified gap at each checkpoint
    sources: tuple[str, ...]
    cpu: tuple[float, ...]  # CPU seconds each bound run had
    reference_gap: float
    reference_source: str
    blocks_gap: float | None
    blocks_reference_gap: float | None
    verdict: str


def measure(net: Net, refs: dict) -> list[Row]:
    profile = net.make()
    rows = []
    for fraction in FRACTIONS:
        budget = planopt.budget_from_fraction(profile, fraction)
        ref = refs[_key(net.name, fraction)]
        if budget < planopt.min_budget(profile):
            rows.append(_no_fit(net.name, len(profile.layers), fraction))
            continue
        runs = [_cold_solve(profile, budget, "lower-bound", c * BUDGET_S) for c in CHECKPOINTS]
        blocks, _ = _cold_solve(profile, budget, "blocks", BUDGET_S)
        plans = [blocks.makespan]
        if "blocks" in ref:
            plans.append(ref["blocks"]["makespan"])
        best = min(p for p in plans if p is not None)

        def gap(bound: float | None, best: float = best) -> float:
            return float("nan") if bound is None else max(0.0, (best - bound) / best)

        gaps = tuple(gap(s.lower_bound) for s, _ in runs)
        ref_gap = gap(ref["bound"])
        blocks_ref = ref["blocks"]["gap"] if "blocks" in ref else None
        rows.append(
            Row(
                net.name,
                len(profile.layers),
                fraction,
                best / profile.t_ideal - 1,
                gaps,
                tuple(s.bound_provenance.source for s, _ in runs),
                tuple(w for _, w in runs),
                ref_gap,
                ref["source"],
                blocks.gap,
                blocks_ref,
                _verdict(
                    len(profile.layers),
                    gaps[-1],
                    ref_gap,
                    blocks.gap,
                    blocks_ref,
                    runs[-1][0].bound_provenance,
                    runs[-1][1],
                ),
            )
        )
        print(f"  {net.name} {fraction:.0%}: {rows[-1]}", flush=True)
    return rows


def _no_fit(name: str, layers: int, fraction: float) -> Row:
    nan = float("nan")
    return Row(
        name, layers, fraction, nan, (nan,) * len(CHECKPOINTS), ("-",) * len(CHECKPOINTS),
        (0.0,) * len(CHECKPOINTS), nan, "-", None, None,
        "no plan fits: the budget is below the minimum (planopt.min_budget)",
    )  # fmt: skip


def _verdict(layers, gap5, ref_gap, blocks_gap, blocks_ref, cert, cpu) -> str:
    notes = []
    behind = gap5 - ref_gap
    if layers > TARGET_UP_TO:
        state = "meets" if behind <= TARGET_PP else "misses"
        notes.append(f"bound: n/a (> {TARGET_UP_TO:,} layers; it {state} it)")
    elif behind <= TARGET_PP:
        notes.append("bound: meets")
    else:
        notes.append(
            f"bound: misses ({behind * 100:.2f} pp behind; at 5 s {cert.source}, "
            f"{'complete' if cert.complete else 'cut short'}, after {cpu:.1f} CPU s)"
        )
    if blocks_ref is not None and blocks_ref <= BLOCKS_TIGHT:
        if blocks_gap is not None and blocks_gap <= BLOCKS_TARGET:
            notes.append("blocks: meets")
        else:
            notes.append("blocks: misses (its 5 s plan, not the bound: see the bound columns)")
    elif blocks_ref is not None:
        notes.append(f"blocks: n/a (120 s certificate {blocks_ref:.1%} > 1%)")
    return "; ".join(notes)


@dataclass(frozen=True)
class Speed:
    """The LP bound's wall time on one net: PuLP (build + solve) against HiGHS directly."""

    net: str
    layers: int
    pulp: float
    cold: float  # first call at 70%: build, cache, cold LP
    warm: tuple[float, ...]  # then 50% and 30%, warm from the previous basis


def speed(net: Net) -> Speed:
    from solvers.model.relaxation import pulp_relaxation_bound
    from solvers.model.relaxation_highs import clear_cache, highs_bound

    profile = net.make()
    budgets = [planopt.budget_from_fraction(profile, f) for f in FRACTIONS]
    started = time.monotonic()
    pulp_relaxation_bound(profile, budgets[0], relax=True)
    pulp = time.monotonic() - started
    clear_cache()
    walls = []
    for budget in budgets:
        started = time.monotonic()
        highs_bound(profile, budget)
        walls.append(time.monotonic() - started)
    return Speed(net.name, len(profile.layers), pulp, walls[0], tuple(walls[1:]))


def render_speed(speeds: list[Speed]) -> list[str]:
    return [
        "",
        "## The LP bound's wall time",
        "",
        "PuLP: the reference (`pulp_relaxation_bound`, build + solve) at 70%. HiGHS: "
        "`relaxation_highs.highs_bound` at 70% from an empty cache (build + cold LP), then "
        "at 50% and 30% re-solved warm from the previous basis. Seconds, loaded machine.",
        "",
        "| net | layers | PuLP 70% | HiGHS 70% (cold) | HiGHS 50% (warm) | HiGHS 30% (warm) |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {s.net} | {s.layers} | {s.pulp:.2f} | {s.cold:.2f} | "
            + " | ".join(f"{w:.2f}" for w in s.warm)
            + " |"
            for s in speeds
        ),
    ]


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{x * 100:.2f}%"


def render(rows: list[Row], speeds: list[Speed], seconds: float) -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    head = [
        "# Certificates as fast as the plans (issue 18)",
        "",
        "Generated by `python -m experiments.bench_certificates` "
        f"({seconds / 60:.0f} min with the cached 120 s references; "
        f"{platform.machine()}, {os.cpu_count()} cores, load average {load:.1f} at the end).",
        "",
        "Certified gap = (best plan - bound) / best plan, the best plan being the faster of "
        f"`blocks` at {BUDGET_S:g} s and (decoders, random-cnn-500, random-mixed-200) at "
        f"{REFERENCE_S:g} s; `plan` is that plan "
        'over T_ideal. `LB x s`: `planopt.solve(..., "lower-bound", time_limit=x)` from a '
        "cold cache (LP first, then the MIP on the time left; the source of the 5 s bound "
        f"follows). `LB {REFERENCE_S:g} s` is the reference (cached in "
        "`certificates_references.json`). `blocks` columns: its own certified gap (its plan, "
        f"its bound) at {BUDGET_S:g} s and {REFERENCE_S:g} s. Targets: the 5 s bound within "
        f"1 pp of the reference on nets of up to {TARGET_UP_TO:,} layers; `blocks` at 5 s "
        "within 3% wherever its 120 s certificate is within 1%.",
        "",
        "Family limited to 11 nets (6 decoders, 2 CNN chains, 3 random chains of 200-2,000 "
        "layers) so the default run stays feasible on a loaded 2-core machine; `blocks` runs "
        "for 120 s on the decoders, random-cnn-500 and random-mixed-200 only. "
        "Times are wall times under that load (5 helpers on 2 cores): the 120 s references "
        "had less than 120 s of a core, so they are weaker than on an idle machine, and a "
        "5 s wall-clock limit gave a bound run the CPU seconds in the `CPU s` column (a cold "
        "LP on 940 layers needs about 1.6 CPU s).",
        "",
        "| net | layers | budget | plan | LB 0.5 s | LB 2.5 s | LB 5 s | 5 s source | "
        f"LB {REFERENCE_S:g} s | blocks 5 s | blocks 120 s | CPU s of LB 5 s | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    body = [
        f"| {r.net} | {r.layers} | {r.fraction:.0%} | {_pct(r.plan)} | "
        + " | ".join(_pct(g) for g in r.gaps)
        + f" | {r.sources[-1]} | {_pct(r.reference_gap)} ({r.reference_source}) | "
        f"{_pct(r.blocks_gap)} | {_pct(r.blocks_reference_gap)} | {r.cpu[-1]:.1f} | "
        f"{r.verdict} |"
        for r in rows
    ]
    met = sum("misses" not in r.verdict for r in rows)
    tail = ["", f"{met} of {len(rows)} rows meet every target that applies to them."]
    return "\n".join(head + body + tail + render_speed(speeds)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="recompute every 120 s reference")
    parser.add_argument("--jobs", type=int, default=1, help="reference runs at a time")
    parser.add_argument("--references-only", action="store_true")
    parser.add_argument("--nets", nargs="*", help="only these nets (the table is not written)")
    args = parser.parse_args(argv)
    nets = [n for n in NETS if not args.nets or n.name in args.nets]
    started = time.monotonic()
    refs = references(nets, args.fresh, args.jobs)
    if args.references_only:
        return 0
    rows = [row for net in nets for row in measure(net, refs)]
    speeds = [speed(net) for net in nets]
    text = render(rows, speeds, time.monotonic() - started)
    if args.nets:
        print(text)
    else:
        TABLE.write_text(text)
        print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
