"""What nested recomputation would buy: Rotor's space against one recomputation per layer.

Run from the repository root (needs Rockmate's C solver, see `experiments/peers.py`):

    python -m experiments.remat_nested            # writes experiments/results/remat_nested.md

Both spaces are solved in Rotor's own memory model (Rockmate 2.0's chain:
whole memory units, the chain's input and output resident, each stage
keeping its `x̄` for its backward), so the difference is nesting alone:

* nested: Rotor's optimum, Rockmate's C solver (a recomputed segment may
  checkpoint and recompute again: a layer may run forward three times);
* once: the same recursion where a segment being recomputed keeps
  everything (`experiments.rotor_model.rotor_flat_curve`): every layer
  regenerated at most once, the space cost model v2 allows.

Budgets are fractions of the memory at which Rotor's keep-everything
schedule fits, in units of 1/`--slots` of it (finer units grow the C
solver's table, `(slots + 1) (L + 1)^2` cells, past memory on the longest
nets; there the slots are fewer). Makespans are quoted as overhead over the
chain's compute time (sum of forward and backward). "min budget" is the
least fraction at which each space has a plan. The last column is this
package's recompute-only optimum (`remat-dp`, cost model v2, budget as a
fraction of its own keep-all) for scale: another memory model, so not to
be compared cell by cell.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import time
from pathlib import Path

import numpy as np

import planopt
from planopt.bundled import bundled_profile, bundled_profile_names

from . import peers
from .remat_dp import synthetic_chain
from .rotor_model import keep_all_slots, rotor_flat_curve

RESULTS = Path(__file__).parent / "results"
FRACTIONS = (0.5, 0.3, 0.2)
MAX_CELLS = 1.5e8  # the C solver's table: 12 bytes a cell


def study(name: str, profile: planopt.Profile, slots_wanted: int, fractions) -> dict:
    module = peers._rotor_module()
    activation = planopt.keep_all_peak(profile) - profile.static_bytes
    n = len(profile.layers)
    slots_cap = int(MAX_CELLS / (n + 2) ** 2)
    # a unit that puts keep-all at about `slots_wanted` units (fewer on long nets)
    target = max(50, min(slots_wanted, slots_cap))
    unit = max(1, math.ceil(activation / target))
    chain = peers.RotorChain(profile, unit)
    full = keep_all_slots(chain)
    for _ in range(40):  # coarser units until the C solver's table fits
        if (full + 1) * (n + 2) ** 2 <= MAX_CELLS:
            break
        unit = math.ceil(unit * 1.25)
        chain = peers.RotorChain(profile, unit)
        full = keep_all_slots(chain)
    else:  # each stage rounds up to a whole unit: a long chain never gets small enough
        return {"name": name, "n": n, "skipped": f"Rotor's table needs over {MAX_CELLS:.2g} cells"}
    ideal = sum(x.fwd + x.bwd for x in profile.layers)
    start = time.perf_counter()
    once = rotor_flat_curve(chain, full)
    once_seconds = time.perf_counter() - start
    table = module.RkTable(chain, full)
    start = time.perf_counter()
    rows = {}
    for fraction in fractions:
        slots = int(fraction * full)
        nested = table.get_opt(slots)
        ours = planopt.solve(
            profile, planopt.budget_from_fraction(profile, fraction), "remat-dp", time_limit=120
        )
        rows[fraction] = (
            nested / ideal - 1 if math.isfinite(nested) else None,
            once[slots] / ideal - 1 if math.isfinite(once[slots]) else None,
            ours.schedule.overhead if ours.schedule is not None else None,
            ours.status.value,
        )
    finite = np.flatnonzero(np.isfinite(once))
    once_min = finite[0] / full if len(finite) else math.nan
    lo, hi = 0, full  # the nested space's least memory: bisection on the table
    while lo < hi:
        mid = (lo + hi) // 2
        if math.isfinite(table.get_opt(mid)):
            hi = mid
        else:
            lo = mid + 1
    nested_seconds = time.perf_counter() - start
    return {
        "name": name,
        "n": n,
        "unit": unit,
        "slots": full,
        "rows": rows,
        "nested_min": lo / full,
        "once_min": once_min,
        "seconds": (nested_seconds, once_seconds),
    }


def _conclusion(fractions, results) -> str:
    """What the table says about nesting, in two sentences."""
    gains, widened = [], []
    for r in results:
        if "skipped" in r:
            continue
        for fraction in fractions:
            nested, once, _, _ = r["rows"][fraction]
            if nested is not None and once is not None:
                gains.append((max(0.0, (once - nested) / (1 + once)), r["name"], fraction))
        if r["once_min"] - r["nested_min"] > 0.005:
            widened.append(f"{r['name']} {r['once_min']:.0%} → {r['nested_min']:.0%}")
    if gains:
        gain, name, fraction = max(gains)
        said = f"Where both spaces have a plan ({len(gains)} net-budget pairs), nesting lowers "
        if gain < 0.0005:
            said += "no makespan (by less than 0.05% at every one)."
        else:
            said += f"the makespan by at most {gain:.1%} ({name} at {fraction:.0%})."
    else:
        said = "No budget had a plan in both spaces."
    if widened:
        said += " What it buys is a lower minimum budget: " + "; ".join(widened) + "."
    return said


def _pct(value) -> str:
    return "–" if value is None else f"{value:.1%}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--fractions", type=float, nargs="+", default=list(FRACTIONS))
    parser.add_argument("--nets", nargs="+", default=None)
    parser.add_argument("--output", type=Path, default=RESULTS / "remat_nested.md")
    args = parser.parse_args(argv)
    if not peers.rotor_available():
        raise SystemExit("remat_nested needs Rockmate's C solver: pip install --no-deps rockmate")
    names = args.nets or [*bundled_profile_names(), "chain100"]
    results = []
    for name in names:
        profile = synthetic_chain(100) if name == "chain100" else bundled_profile(name)
        result = study(name, profile, args.slots, args.fractions)
        results.append(result)
        print(result, flush=True)
    write(args, results)


def write(args, results) -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else math.nan
    head = " | ".join(f"{f:.0%}: nested / once (remat-dp)" for f in args.fractions)
    lines = [
        "# What nested recomputation would buy",
        "",
        f"Generated by `python -m experiments.remat_nested --slots {args.slots}` on "
        f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs "
        f"(load {load:.1f}). Both spaces in Rotor's memory model (Rockmate 2.0's chain); "
        "nested = Rotor's optimum (its C solver), once = the same recursion with every "
        "layer regenerated at most once. Cells: overhead over the chain's compute time; "
        "budgets: fractions of the memory Rotor's keep-everything schedule needs; '–': no "
        "plan. In brackets, this package's `remat-dp` overhead at that fraction of its own "
        "keep-all (cost model v2: another memory model, for scale only).",
        "",
        f"| net | L | slots | min budget nested / once | {head} | nesting gains |",
        "|---|---:|---:|---|" + "---|" * len(args.fractions) + "---|",
    ]
    for r in results:
        if "skipped" in r:
            blank = " – |" * (len(args.fractions) + 1)
            lines.append(f"| {r['name']} | {r['n']} | – |{blank} not run: {r['skipped']} |")
            continue
        cells = []
        gains = []
        for fraction in args.fractions:
            nested, once, ours, _ = r["rows"][fraction]
            cells.append(f"{_pct(nested)} / {_pct(once)} ({_pct(ours)})")
            if nested is not None and once is not None:
                gain = max(0.0, (once - nested) / (1 + once))  # (float noise below 0)
                gains.append(f"{fraction:.0%}: {gain:.1%}")
            elif nested is not None:
                gains.append(f"{fraction:.0%}: only nested fits")
        lines.append(
            f"| {r['name']} | {r['n']} | {r['slots']} | {r['nested_min']:.0%} / "
            f"{r['once_min']:.0%} | " + " | ".join(cells) + f" | {'; '.join(gains) or '–'} |"
        )
    lines[2:2] = [_conclusion(args.fractions, results), ""]
    lines += [
        "",
        "Nesting gains: how much lower the makespan is with nesting, "
        "`(T_once - T_nested) / T_once`.",
        "",
    ]
    args.output.write_text("\n".join(lines), encoding="utf-8")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
