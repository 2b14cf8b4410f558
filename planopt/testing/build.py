"""Regenerate the bank's JSON file: `python -m planopt.testing.build`.

Random instances are seeded `planopt.random_chain` chains whose optimum of
each space is found by enumerating every plan (`solvers.brute_force`) and
scoring it with the simulator; hand-worked instances state their optimum
and why, and the tests check those against the same enumeration.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from planopt.budget import keep_all_peak, min_budget
from planopt.io import profile_to_dict
from planopt.plan import RECOMPUTE, SWAP
from planopt.profile import Device, Layer, Profile
from planopt.random_chain import random_chain
from planopt.registry import Space
from planopt.simulate import Scorer
from planopt.testing.bank import BANK_FILE

# (layers, family, seed, cost-model version of the chain)
CHAINS = (
    (2, "uniform", 0, 1),
    (2, "mixed", 1, 1),
    (3, "cnn", 0, 1),
    (3, "mixed", 2, 1),
    (4, "uniform", 3, 1),
    (3, "transformer", 5, 2),
    (3, "mixed", 6, 2),
    (4, "cnn", 7, 2),
    (4, "mixed", 8, 2),
)
FRACTIONS = (0.4, 0.7)
# The spec's hand-made version-2 cases (tests/data/ holds a copy).
SPEC_CASES = Path(__file__).resolve().parents[2] / "tests" / "data" / "v2-cases.json"


def space_optima(profile: Profile, budget: int) -> dict[str, float | None]:
    """The fastest fitting plan of each space, by enumerating every plan."""
    from solvers.brute_force import enumerate_raw

    scorer = Scorer(profile)
    best: dict[Space, float] = {}
    flags = tuple(layer.saves_input for layer in profile.layers)
    for raw in enumerate_raw(len(profile.layers), saves_input=flags):
        actions = raw[0]
        makespan, peak = scorer.score(*raw)
        if peak > budget:
            continue
        spaces = [Space.JOINT]
        if SWAP not in actions:
            spaces.append(Space.RECOMPUTE_ONLY)
        if RECOMPUTE not in actions:
            spaces.append(Space.SWAP_ONLY)
        for space in spaces:
            if makespan < best.get(space, math.inf):
                best[space] = makespan
    return {s.value: best.get(s) for s in (Space.JOINT, Space.RECOMPUTE_ONLY, Space.SWAP_ONLY)}


def _three_layers(link: float, name: str) -> Profile:
    layers = tuple(Layer.v1(f"l{i}", fwd=1.0, bwd=2.0, saved_bytes=4) for i in range(3))
    return Profile(name, Device("link", link, link, 0.0), 0, layers)


def hand_worked() -> list[dict]:
    """Small chains whose optima are worked out by hand (the tests re-check them)."""
    hidden = _three_layers(4.0, "hand-swap-hides")
    slow = _three_layers(1.0, "hand-slow-link")
    why_hidden = (
        "3 layers, fwd 1 s, bwd 2 s, 4 bytes each, link 4 B/s (a copy takes 1 s), static 0. "
        "Keep-all: F0 [0,1] F1 [1,2] F2 [2,3] B2 [3,5] B1 [5,7] B0 [7,9], T_ideal 9 s, "
        "peak 12 B during [2,5]. At 8 B one tensor must leave before F2. Swap layer 0 "
        "(prefetch at step 1): its copy out [1,2] ends with F1, so it is freed at 2; the copy "
        "back, issued when B2 ends (5), runs [5,6] while B1 runs, before B0 needs it (7): "
        "T = 9 s with peak 8 B (joint and swap-only). Recompute-only: layer 0 is the only "
        "layer whose drop frees memory before F2 (1 and 2 are still read by F2 or its own "
        "backward), and regenerating it costs F0 again: 10 s."
    )
    why_slow = (
        "The same chain on a link of 1 B/s (a copy takes 4 s). Recomputing layer 0 costs "
        "1 s (T = 10 s, peak 8 B), as in the case above. A swap of layer 0 keeps its 4 bytes "
        "until its copy out ends at 5, so F2 must wait for it (swap_wait 2, F2 [5,6]), and "
        "its copy back (4 s) cannot start before the peak has passed: the best swap-only "
        "plan is slower. Joint optimum = recompute-only optimum = 10 s."
    )
    cases = [
        ("hand-keep-all-fits", hidden, 12, "Keep-all fits its own peak: T_ideal 9 s everywhere."),
        ("hand-swap-hides", hidden, 8, why_hidden),
        ("hand-slow-link", slow, 8, why_slow),
    ]
    stated = {
        "hand-keep-all-fits": {"joint": 9.0, "recompute-only": 9.0, "swap-only": 9.0},
        "hand-swap-hides": {"joint": 9.0, "recompute-only": 10.0, "swap-only": 9.0},
        "hand-slow-link": {"joint": 10.0, "recompute-only": 10.0},
    }
    out = []
    for name, profile, budget, why in cases:
        optimum = space_optima(profile, budget)
        for space, value in stated[name].items():
            if optimum[space] != value:
                raise AssertionError(f"{name}: {space} optimum {optimum[space]}, stated {value}")
        out.append(
            {
                "name": name,
                "profile": profile_to_dict(profile),
                "budget": budget,
                "optimum": optimum,
                "source": "hand-worked (checked by enumeration)",
                "why": why,
            }
        )
    return out


def generated() -> list[dict]:
    """Seeded random chains at budgets from below the minimum to keep-all."""
    out = []
    for n, family, seed, version in CHAINS:
        profile = random_chain(n, seed=seed, family=family, version=version)
        low, high = min_budget(profile), keep_all_peak(profile)
        budgets = {"below-min": low - 1, "min": low, "keep-all": high}
        for r in FRACTIONS:
            budgets[f"{round(100 * r)}pct"] = math.floor(low + r * (high - low))
        for label, budget in budgets.items():
            out.append(
                {
                    "name": f"{family}-n{n}-seed{seed}-v{version}-{label}",
                    "profile": profile_to_dict(profile),
                    "budget": budget,
                    "optimum": space_optima(profile, budget),
                    "source": (
                        f"random_chain({n}, seed={seed}, family={family!r}, version={version}), "
                        "enumeration"
                    ),
                }
            )
    return out


def spec_cases() -> list[dict]:
    """The spec's version-2 cases, each at the budget of its own plan's peak."""
    from planopt.io import plan_from_dict, profile_from_dict
    from planopt.simulate import simulate

    if not SPEC_CASES.exists():
        return []
    out = []
    for case in json.loads(SPEC_CASES.read_text(encoding="utf-8"))["cases"]:
        profile = profile_from_dict(case["profile"])
        schedule = simulate(profile, plan_from_dict(case["plan"]))
        budget = schedule.peak_bytes
        out.append(
            {
                "name": f"spec-{profile.name}",
                "profile": profile_to_dict(profile),
                "budget": budget,
                "optimum": space_optima(profile, budget),
                "source": "the spec's hand-made v2 case at its plan's peak; optima by enumeration",
                "why": (
                    f"{case['what']}. The spec's plan runs in {schedule.makespan:g} s at this "
                    f"peak ({budget} B), so the optimum is at most that."
                ),
            }
        )
    return out


def main() -> None:
    path = Path(__file__).with_name(BANK_FILE)
    data = {
        "about": "planopt's known-answer bank (cost model v2; v1 chains too); see planopt.testing",
        "instances": hand_worked() + spec_cases() + generated(),
    }
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(data['instances'])} instances to {path}")


if __name__ == "__main__":
    main()
