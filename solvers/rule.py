"""The in-place rule for the methods: starts and fixed rules mended to run, plans filtered.

`planopt.runnable` holds the rule (which plans run when a layer changes its
input in place); this module applies it to `Plan`s: `repaired` keeps layers
until a plan runs (keep-all always does), which is how a fixed rule or a
start that breaks the rule becomes a plan of the profile; `runs` says
whether a plan keeps it. The exact methods put the rule in their model
(`solvers.model.decisions.add_inplace_rule`, `solvers.remat.chain`'s
forbidden segments); the searches ask `runs` of every candidate.
"""

from __future__ import annotations

from collections.abc import Sequence

from planopt.plan import Action, Plan
from planopt.profile import Profile
from planopt.runnable import repair, runnable


def runs(profile: Profile, plan: Plan) -> bool:
    """Whether `plan` keeps the in-place rule on `profile`."""
    return runnable(profile, plan.actions, plan.options, plan.swap_wait)


def repaired(profile: Profile, plan: Plan) -> Plan:
    """`plan`, or the plan with layers kept until it keeps the rule (`planopt.runnable.repair`)."""
    if runs(profile, plan):
        return plan
    actions, prefetch, wait, options = repair(
        profile, plan.actions, plan.prefetch_at, plan.swap_wait, plan.options
    )
    return Plan.build(actions, prefetch, wait, profile=profile, options=options)


def repaired_actions(profile: Profile, actions: Sequence[Action]) -> list[Action]:
    """Keep/recompute (or keep/swap) actions mended as `repaired` mends a plan."""
    n = len(actions)
    return repair(profile, actions, [None] * n, [None] * n)[0]


def kept_note(before: Plan | Sequence[Action], after: Plan) -> str:
    """` (k layers kept for the in-place rule)` when mending kept some, else ``."""
    old = before.actions if isinstance(before, Plan) else tuple(before)
    moved = sum(a is not b for a, b in zip(old, after.actions, strict=True))
    return f" ({moved} layers kept for the in-place rule)" if moved else ""
