"""The report's question 1 under cost model v2: the greedy's gap and what joint planning buys.

Run from the repository root (about 25 minutes on a loaded 2-core machine):

    python -m experiments.suite_v2        # experiments/results/sweep/*, experiments/figures/*

A reduced `planopt experiment suite` (configuration `V2_REPORT` below): the
seven small bundled nets (the re-traced VGG-16, ResNet-50 by blocks, GPT-2
and BERT-base included) at 90/70/50/30%, with every planner but the anytime
searches (`blocks`, `lns`: question 3, not re-run here) and `auto`. The
random `/2` chains are left to `experiments/bench_exact.py` (its gap table):
on the loaded 2-core machine this was run on, a 10-unit solve took 5-10
minutes of wall time, and the chains did not fit. Every job
gets a work limit (`planopt.work`), so the outcomes do not depend on the
machine's load; the time limits are guards. It then writes `certificate.md`:
per net, the greedy's gap beside the strength of the certificate it is
measured against (0 where exact proved the optimum, else the best plan's gap
to the proven lower bound).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from dataclasses import replace
from pathlib import Path

from planopt.experiment import suite
from planopt.experiment.cache import DEFAULT_CACHE_DIR, Cache
from planopt.experiment.suite import DEFAULT, SuiteConfig, run_suite

V2_REPORT: SuiteConfig = replace(
    DEFAULT,
    name="v2-report",
    curve_fractions=(0.9, 0.7, 0.5, 0.3),
    families=(),
    seeds=1,
    gap_lengths=(8, 12, 16),
    chain_version=2,
    scaling_lengths=(),
    backend_lengths=(),
    large=False,
    skip_methods=("auto", "blocks", "lns"),
    work_limit=3.0,
    exact_time_limit=600.0,
    time_limit=600.0,
    bound_time_limit=600.0,
    draws=10,
)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def certificate_table(gap_csv: Path) -> list[str]:
    """Per net (or random family): the greedy's median and max gap and the certificate's
    strength (the reference's own gap: 0 where proven optimal, else best plan / bound - 1)."""
    rows = [r for r in csv.DictReader(gap_csv.open()) if r["method"] == "pooch"]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    lines = [
        "| net or family | L | instances | proven optimal | greedy gap median / max "
        "| certificate: reference's own gap median / max | greedy no plan |",
        "|---|---:|---:|---:|---|---|---:|",
    ]
    for group in sorted(groups):
        rs = groups[group]
        gaps = [float(r["gap"]) for r in rs if r["gap"]]
        cert = [
            0.0
            if r["reference"] == "optimum"
            else max(0.0, float(r["best_known_s"]) / float(r["reference_s"]) - 1)
            for r in rs
            if r["reference"] == "optimum" or (r["best_known_s"] and r["reference_s"])
        ]
        proven = sum(1 for r in rs if r["reference"] == "optimum")
        lengths = sorted({int(r["n_layers"]) for r in rs})
        span = str(lengths[0]) if len(lengths) == 1 else f"{lengths[0]}-{lengths[-1]}"
        gap_cell = f"{_pct(statistics.median(gaps))} / {_pct(max(gaps))}" if gaps else "-"
        lines.append(
            f"| {group} | {span} | {len(rs)} | {proven} | {gap_cell} | "
            f"{_pct(statistics.median(cert))} / {_pct(max(cert))} | {len(rs) - len(gaps)} |"
            if cert
            else f"| {group} | {span} | {len(rs)} | {proven} | {gap_cell} | - | "
            f"{len(rs) - len(gaps)} |"
        )
    return lines


def _skip_uncached(methods: set[str], cache: Cache) -> str:
    """Patch the suite's job list to leave out the uncached jobs of `methods`; returns
    what was left out, per method."""
    if not methods:
        return ""
    build = suite.build_jobs
    dropped: dict[str, int] = {}

    def cached_only(config, chosen=None):
        main, backends = build(config, chosen)
        dropped.clear()
        kept = []
        for job in main:
            if job.method in methods and cache.get(job.key()) is None:
                dropped[job.method] = dropped.get(job.method, 0) + 1
            else:
                kept.append(job)
        return kept, backends

    suite.build_jobs = cached_only
    suite.build_jobs(V2_REPORT)  # fill `dropped` now
    return ", ".join(f"{n} {m} jobs" for m, n in sorted(dropped.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("experiments"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--cache", type=Path, default=Path(DEFAULT_CACHE_DIR))
    parser.add_argument(
        "--skip-uncached",
        nargs="*",
        default=[],
        metavar="METHOD",
        help="leave out the jobs of these methods that are not in the cache (a run cut "
        "short: the tables from what it finished; certificate.md counts what was left out)",
    )
    parser.add_argument(
        "--certificate-only",
        action="store_true",
        help="only certificate.md, from gap_instances.csv",
    )
    args = parser.parse_args(argv)
    left_out = _skip_uncached(set(args.skip_uncached), Cache(args.cache))
    tables = args.out / "results" / "sweep"
    if not args.certificate_only:
        headline = run_suite(
            args.out,
            V2_REPORT,
            cache=Cache(args.cache),
            max_workers=args.workers,
            plots=not args.no_plots,
            command="python -m experiments.suite_v2",
        )
        print(
            f"{headline['jobs']} jobs, {headline['computed']} computed, {headline['seconds']:.0f} s"
        )
    (tables / "certificate.md").write_text(
        "\n".join(
            [
                "# The greedy's gap and the strength of its certificate (v2)",
                "",
                "Generated by `python -m experiments.suite_v2` from `gap_instances.csv`. "
                "Gap = T_greedy / reference - 1; the reference is exact's proven optimum "
                "where it proved one, else the best proven lower bound. The certificate's "
                "own gap is how far that reference may sit below the true optimum: 0 where "
                "proven optimal, else the best plan found over the bound (an upper limit "
                "on how much the gap column over-states the greedy's true gap)."
                + (
                    f" Left out, not finished when the run was cut short: {left_out}."
                    if left_out
                    else ""
                ),
                "",
                *certificate_table(tables / "gap_instances.csv"),
                "",
            ]
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
