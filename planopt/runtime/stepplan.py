"""A plan checked against its chain and indexed for the executor's step.

`check_plan` refuses a plan made for another chain or profile; `StepPlan`
holds what the step looks up: the recompute runs and the backward step of
each block, which outputs have a backward reader (what a swap copies), the
copies back each step issues and the forwards that wait for a copy out.
"""

from __future__ import annotations

from planopt.errors import InvalidPlanError, InvalidProfileError, ProfileMismatchError, where
from planopt.plan import RECOMPUTE, SWAP, Plan
from planopt.profile import Profile
from planopt.runtime.chain import Chain
from planopt.simulate import Scorer


def check_plan(chain: Chain, plan: Plan, profile: Profile | None) -> None:
    """Refuse a plan that was not made for this chain (and this profile)."""
    n = len(chain)
    if len(plan) != n:
        raise InvalidPlanError(f"plan: must have one entry per chain layer ({n}), got {len(plan)}")
    if plan.has_options and profile is None:
        chosen = next(i for i, o in enumerate(plan.options or ()) if o is not None)
        raise InvalidPlanError(
            f"{where(chosen, chain.names[chosen])}: a plan with layer options (cost model v3) "
            f"needs profile= (the /3 profile it was solved for), got option "
            f"{plan.options[chosen]!r} without one: the option's policy is in its menu"
        )
    if profile is not None:
        if not isinstance(profile, Profile):
            raise InvalidProfileError(
                f"profile must be a planopt.Profile, got {type(profile).__name__}"
            )
        plan.check(profile)
        for i, (mine, theirs) in enumerate(zip(profile.names, chain.names, strict=True)):
            if mine != theirs:
                raise ProfileMismatchError(
                    f"{where(i, theirs)}: profile layer name must match the chain, got "
                    f"{mine!r}; the profile was measured on another model"
                )
    elif plan.profile is not None:
        raise ProfileMismatchError(
            f"plan: was made for profile {plan.profile}; pass profile= (the profile it was "
            "solved for) so the executor can check it belongs to this chain"
        )
    if plan.names:
        for i, (mine, theirs) in enumerate(zip(plan.names, chain.names, strict=True)):
            if mine is not None and mine != theirs:
                raise InvalidPlanError(
                    f"{where(i, theirs)}: name must match the chain, got {mine!r}"
                )


def option_policies(plan: Plan, profile: Profile | None) -> list[tuple[int, ...] | None]:
    """Per layer, the op positions its chosen option saves (its menu's policy), or None."""
    names = plan.options or (None,) * len(plan)
    if profile is None:
        return [None] * len(plan)
    out: list[tuple[int, ...] | None] = []
    for layer, name in zip(profile.layers, names, strict=True):
        menu = {o.name: o for o in layer.options}
        out.append(None if name is None else tuple(menu[name].policy))
    return out


class StepPlan:
    """The plan, indexed for the step: runs and their block steps, readers, waits, prefetches."""

    def __init__(self, plan: Plan, profile: Profile | None) -> None:
        n = len(plan)
        self.actions = plan.actions
        self.trivial = not plan.has_options and not any(
            a is SWAP or a is RECOMPUTE for a in plan.actions
        )
        self.policies = option_policies(plan, profile)
        if profile is None:
            # keep-all: no layer needs to know who reads what.
            self.block_at: dict[int, tuple[int, int]] = {}
            self.out_read = [True] * n
            self.reads_back: list[list[int]] = [[] for _ in range(n)]
        else:
            scorer = Scorer(profile)
            # A partial layer reads its input at its step (its regeneration does):
            # the runs' block steps, the outputs read and the waits follow (v3).
            runs = scorer.runs(plan.actions, plan.options)
            self.block_at = runs.block_at  # backward step u -> run (first, top)
            self.out_read = runs.out_read
            self.reads_back = [scorer.reads_back(t, plan.actions, runs) for t in range(n)]
        self.run_starts = {first for first, _ in self.block_at.values()}
        self.bases = {first - 1 for first in self.run_starts if first > 0}
        self.saves_output = (
            [True] * n if profile is None else [layer.saves_output for layer in profile.layers]
        )
        # The layer above changes layer i's output in place (a partial layer's SAC cache).
        self.output_changed = [False] * n
        if profile is not None:
            self.output_changed[: n - 1] = [x.modifies_input for x in profile.layers[1:]]
        self.waiters: dict[int, list[int]] = {}
        self.prefetch: dict[int, list[int]] = {}
        for i in range(n):
            if plan.actions[i] is SWAP:
                self.prefetch.setdefault(plan.prefetch_at[i], []).append(i)
                if plan.swap_wait[i] is not None:
                    self.waiters.setdefault(plan.swap_wait[i], []).append(i)
        for layers in self.prefetch.values():
            layers.sort(reverse=True)  # spec: higher layer index first
