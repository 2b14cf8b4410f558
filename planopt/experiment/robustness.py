"""Robustness: re-score each method's plan on noisy copies of its profile.

Profiles are measurements. A plan is chosen for the measured numbers and
runs on the true ones; this module draws plausible "true" profiles (every
time, bandwidth and optionally size scaled by an independent factor drawn
uniformly from `[1 - r, 1 + r]`) and re-simulates the unchanged plans on
them. Draws are paired: every method's plan meets the same perturbed
profile, so differences between methods are not sampling noise.

Two questions: how much of a method's nominal advantage survives
(`advantage_table`), and which plans break the budget when sizes are off
(`budget_table`).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from planopt.experiment.analysis import by_instance, median
from planopt.experiment.cache import profile_digest
from planopt.experiment.roles import greedy, is_bound, joint_exact
from planopt.experiment.sweep import Result
from planopt.experiment.tables import Column, Table
from planopt.plan import Plan
from planopt.profile import Device, Profile
from planopt.report import fmt_budget, fmt_int, fmt_text, percent
from planopt.simulate import Scorer

MIN_ADVANTAGE = 0.01  # advantages below 1% of T are noise, not advantages


@dataclass(frozen=True)
class Noise:
    """Relative half-widths of the uniform noise on each kind of number."""

    name: str
    times: float = 0.1  # fwd, bwd and the copy latency
    bandwidth: float = 0.1  # h2d and d2h bandwidth
    sizes: float = 0.0  # saved and scratch bytes (static memory is known exactly)

    def __post_init__(self) -> None:
        for what in ("times", "bandwidth", "sizes"):
            value = getattr(self, what)
            if not (0 <= value < 1):
                raise ValueError(f"noise {self.name}: {what} must be in [0, 1), got {value!r}")


DEFAULT_SCENARIOS = (
    Noise("times +-10%", times=0.1, bandwidth=0.1, sizes=0.0),
    Noise("times and sizes +-10%", times=0.1, bandwidth=0.1, sizes=0.1),
)


def perturb(profile: Profile, noise: Noise, rng: np.random.Generator) -> Profile:
    """A copy of `profile` with each number scaled by its own factor in `[1-r, 1+r]`.

    Draw order is fixed (device, then per layer fwd, bwd, saved, fwd work,
    bwd work), so a generator state gives one profile.
    """

    def factor(r: float) -> float:
        return float(rng.uniform(1 - r, 1 + r)) if r > 0 else 1.0

    dev = profile.device
    device = Device(
        dev.name,
        h2d_bandwidth=dev.h2d_bandwidth * factor(noise.bandwidth),
        d2h_bandwidth=dev.d2h_bandwidth * factor(noise.bandwidth),
        transfer_latency=dev.transfer_latency * factor(noise.times),
    )
    layers = []
    for layer in profile.layers:
        fwd, bwd = layer.fwd * factor(noise.times), layer.bwd * factor(noise.times)
        # One draw scales every activation-sized tensor of the layer together
        # (as one draw scaled version 1's one saved size).
        size = factor(noise.sizes)
        fwork = round(layer.fwd_work_bytes * factor(noise.sizes))
        bwork = round(layer.bwd_work_bytes * factor(noise.sizes))
        saved = round(layer.saved_bytes * size)
        # A menu's kept bytes scale with the internals they are part of (v3).
        menu = tuple(
            dataclasses.replace(o, saved_bytes=min(round(o.saved_bytes * size), saved))
            for o in layer.options
        )
        layers.append(
            dataclasses.replace(
                layer,
                fwd=fwd,
                bwd=bwd,
                out_bytes=round(layer.out_bytes * size),
                saved_bytes=saved,
                input_grad_bytes=round(layer.input_grad_bytes * size),
                param_grad_bytes=round(layer.param_grad_bytes * size),
                fwd_work_bytes=fwork,
                bwd_work_bytes=bwork,
                options=menu,
            )
        )
    return profile.replace_layers(layers, device=device)


def _rng(profile: Profile, noise: Noise, seed: int, draw: int) -> np.random.Generator:
    """One generator per (profile, scenario, seed, draw): independent of run order."""
    tag = int(profile_digest(profile)[:12], 16)
    scenario = int.from_bytes(noise.name.encode()[:8].ljust(8, b"\0"), "little")
    return np.random.default_rng([seed, draw, tag, scenario])


def _unbound(plan: Plan) -> Plan:
    """The plan without its profile fingerprint: it is meant for a perturbed copy."""
    return Plan(plan.actions, plan.prefetch_at, plan.swap_wait, plan.names, None, plan.options)


def robustness_rows(
    results: Sequence[Result],
    profiles: Mapping[str, Profile],
    *,
    scenarios: Sequence[Noise] = DEFAULT_SCENARIOS,
    draws: int = 20,
    seed: int = 0,
) -> list[dict]:
    """One row per (instance, plan, scenario, draw): the plan re-scored on the draw.

    Only plans that fit nominally are re-scored; instances whose profile is
    not in `profiles` are skipped. `overhead` is against the perturbed
    profile's own `T_ideal`.
    """
    rows = []
    for (name, fraction), rs in sorted(by_instance(results).items()):
        profile = profiles.get(name)
        plans = [r for r in rs if r.fits and r.plan is not None and not is_bound(r.method)]
        if profile is None or not plans:
            continue
        decoded = [(r, _unbound(r.plan_object())) for r in plans]
        budget = plans[0].budget
        for noise in scenarios:
            for draw in range(draws):
                true = perturb(profile, noise, _rng(profile, noise, seed, draw))
                scorer = Scorer(true)
                t_ideal = true.t_ideal
                for r, plan in decoded:
                    makespan, peak = scorer.score_plan(plan)
                    rows.append(
                        {
                            "group": r.group,
                            "profile": name,
                            "n_layers": r.n_layers,
                            "budget_fraction": fraction,
                            "method": r.label,
                            "scenario": noise.name,
                            "draw": draw,
                            "nominal_makespan_s": r.makespan,
                            "nominal_overhead": r.overhead,
                            "makespan_s": makespan,
                            "overhead": makespan / t_ideal - 1,
                            "peak_over_budget": peak / budget,
                            "fits": peak <= budget,
                        }
                    )
    return rows


def budget_table(rows: Sequence[dict]) -> Table:
    """Per scenario and method: overhead before and after the noise, and how often the
    plan's true peak breaks the budget (and by how much)."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["scenario"], row["method"])].append(row)
    out = []
    for (scenario, method), members in sorted(groups.items()):
        broken = [m["peak_over_budget"] - 1 for m in members if not m["fits"]]
        out.append(
            {
                "scenario": scenario,
                "method": method,
                "plans": len({(m["profile"], m["budget_fraction"]) for m in members}),
                "draws": len(members),
                "nominal": median([m["nominal_overhead"] for m in members]),
                "perturbed": median([m["overhead"] for m in members]),
                "change": median([m["overhead"] - m["nominal_overhead"] for m in members]),
                "broken_share": len(broken) / len(members),
                "overshoot_median": median(broken),
                "overshoot_max": max(broken) if broken else None,
            }
        )
    return Table(
        "robustness_budget",
        "Overhead under noise, and plans whose true peak breaks the budget",
        (
            Column("scenario", "noise", right=False),
            Column("method", "method", right=False),
            Column("plans", "plans", fmt_int),
            Column("draws", "re-scorings", fmt_int),
            Column("nominal", "median overhead (nominal)", percent),
            Column("perturbed", "median overhead (noisy)", percent),
            Column("change", "median change", percent),
            Column("broken_share", "budget broken", percent),
            Column("overshoot_median", "median overshoot", percent),
            Column("overshoot_max", "max overshoot", percent),
        ),
        tuple(out),
        note=(
            "Overhead on a noisy profile is against that profile's own T_ideal. "
            "Overshoot = true peak / budget - 1 among the re-scorings that broke the budget."
        ),
    )


def advantage_rows(rows: Sequence[dict], *, leaders: Sequence[str] | None = None) -> list[dict]:
    """Per instance, scenario and draw: the leader's advantage over each other method,
    nominal and perturbed. The leader is the first of `leaders` with a plan there
    (default: the joint exact methods, then the greedy)."""
    if leaders is None:
        leaders = (*joint_exact(), greedy())
    cells: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        cells[(row["profile"], row["budget_fraction"], row["scenario"], row["draw"])][
            row["method"]
        ] = row
    out = []
    for (profile, fraction, scenario, draw), per_method in sorted(cells.items()):
        leader = next((m for m in leaders if m in per_method), None)
        if leader is None:
            continue
        lead = per_method[leader]
        for method, other in per_method.items():
            if method == leader:
                continue
            nominal = other["nominal_makespan_s"] / lead["nominal_makespan_s"] - 1
            if nominal < MIN_ADVANTAGE:
                continue  # no nominal advantage to keep
            noisy = other["makespan_s"] / lead["makespan_s"] - 1
            out.append(
                {
                    "profile": profile,
                    "budget_fraction": fraction,
                    "scenario": scenario,
                    "draw": draw,
                    "leader": leader,
                    "method": method,
                    "nominal_advantage": nominal,
                    "noisy_advantage": noisy,
                    "kept": noisy / nominal,
                    "still_faster": noisy > 0,
                }
            )
    return out


def advantage_table(rows: Sequence[dict], **kwargs) -> Table:
    pairs = advantage_rows(rows, **kwargs)
    groups: dict[tuple[str, str, str], list[dict]] = defaultdict(list)
    for row in pairs:
        groups[(row["scenario"], row["leader"], row["method"])].append(row)
    out = []
    for (scenario, leader, method), members in sorted(groups.items()):
        out.append(
            {
                "scenario": scenario,
                "pair": f"{leader} over {method}",
                "instances": len({(m["profile"], m["budget_fraction"]) for m in members}),
                "nominal": median([m["nominal_advantage"] for m in members]),
                "noisy": median([m["noisy_advantage"] for m in members]),
                "kept": median([m["kept"] for m in members]),
                "still_faster": sum(m["still_faster"] for m in members) / len(members),
            }
        )
    return Table(
        "robustness_advantage",
        "How much of a nominal advantage survives the noise",
        (
            Column("scenario", "noise", right=False),
            Column("pair", "advantage of", fmt_text, right=False),
            Column("instances", "instances", fmt_int),
            Column("nominal", "median nominal advantage", percent),
            Column("noisy", "median noisy advantage", percent),
            Column("kept", "median share kept", percent),
            Column("still_faster", "draws still faster", percent),
        ),
        tuple(out),
        note=(
            "Advantage of A over B = T_B / T_A - 1, nominal (on the measured profile) and "
            "on each noisy draw; only instances where A's nominal advantage is at least 1%. "
            "Share kept = noisy / nominal advantage."
        ),
    )


def plan_rows(rows: Sequence[dict]) -> list[dict]:
    """Per plan (instance, method) and scenario: its re-scorings summarised."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["profile"], row["budget_fraction"], row["method"], row["scenario"])].append(row)
    out = []
    for (profile, fraction, method, scenario), members in sorted(groups.items()):
        first = members[0]
        out.append(
            {
                "group": first["group"],
                "profile": profile,
                "n_layers": first["n_layers"],
                "budget_fraction": fraction,
                "method": method,
                "scenario": scenario,
                "draws": len(members),
                "nominal_overhead": first["nominal_overhead"],
                "median_overhead": median([m["overhead"] for m in members]),
                "max_overhead": max(m["overhead"] for m in members),
                "broken_share": sum(1 for m in members if not m["fits"]) / len(members),
                "max_peak_over_budget": max(m["peak_over_budget"] for m in members),
            }
        )
    return out


def robustness_tables(rows: Sequence[dict]) -> list[Table]:
    detail = Table(
        "robustness_plans",
        "Every plan under noise",
        (
            Column("profile", "profile", right=False),
            Column("budget_fraction", "budget", fmt_budget),
            Column("method", "method", right=False),
            Column("scenario", "noise", right=False),
            Column("nominal_overhead", "nominal overhead", percent),
            Column("median_overhead", "median noisy overhead", percent),
            Column("broken_share", "budget broken", percent),
        ),
        tuple(plan_rows(rows)),
        extra_csv_keys=("group", "n_layers", "draws", "max_overhead", "max_peak_over_budget"),
        markdown=False,
    )
    return [budget_table(rows), advantage_table(rows), detail]
