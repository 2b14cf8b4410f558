"""A plan: one keep/swap/recompute action per layer (spec: "The plan").

The plan is stored as parallel tuples (struct of arrays) because every hot
loop, the simulator's and the solvers', walks it by layer index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from planopt.errors import InvalidPlanError, InvalidProfileError, ProfileMismatchError, show, where
from planopt.profile import Profile


class Action(StrEnum):
    """What happens to a layer's saved tensor between forward and backward."""

    KEEP = "keep"
    SWAP = "swap"
    RECOMPUTE = "recompute"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value: object) -> Action:
        choices = ", ".join(a.value for a in cls)
        raise InvalidPlanError(f"action must be one of {choices}, got {show(value)}")


KEEP, SWAP, RECOMPUTE = Action.KEEP, Action.SWAP, Action.RECOMPUTE


def parse_action(value: Any, index: int, name: str | None = None) -> Action:
    """An `Action` from an enum member or its string; errors name the layer."""
    if isinstance(value, Action):
        return value
    try:
        return Action(value)
    except (ValueError, TypeError):  # TypeError: an unhashable value
        choices = ", ".join(a.value for a in Action)
        raise InvalidPlanError(
            f"{where(index, name)}: action must be one of {choices}, got {show(value)}"
        ) from None


def block_step(actions: Sequence[Action], top: int, profile: Profile | None = None) -> int:
    """The backward step at which the recompute run ending at `top` is regenerated.

    `top + 1` when that layer exists and its backward reads the run's top
    output (`saves_input`), else `top` (spec v2: "The plan"; without a
    profile, version 1's rule: always `top`).
    """
    nxt = top + 1
    if profile is not None and nxt < len(actions) and profile.layers[nxt].saves_input:
        return nxt
    return top


def need_indices(actions: Sequence[Action], profile: Profile | None = None) -> list[int]:
    """`need(i)` for every layer: the highest backward step holding a reader of layer
    `i`'s products (`i`, `i+1`, or the step of the recompute block above), `i` if none.

    Without a profile, version 1's rule (every layer's backward reads its own
    output, none reads its input): `i`, or the top of the recompute run above.
    Version 2's need is never below version 1's, so a plan valid for the
    profile also passes the profile-free check.
    """
    n = len(actions)
    need = list(range(n))
    layers = None if profile is None else profile.layers
    i = n - 1
    while i >= 0:
        if actions[i] is RECOMPUTE:
            top = i
            j = i
            while j >= 0 and actions[j] is RECOMPUTE:
                j -= 1
            # j is the base below the run (or -1); the run is j+1 .. top.
            if j >= 0:
                need[j] = block_step(actions, top, profile)
            i = j
        else:
            i -= 1
    if layers is not None:
        for i in range(n - 1):
            if layers[i + 1].saves_input and need[i] < i + 1:
                need[i] = i + 1
    return need


def recompute_runs(actions: Sequence[Action]) -> list[tuple[int, int]]:
    """Maximal runs of recompute layers as `(first, top)`, bottom to top."""
    runs: list[tuple[int, int]] = []
    i, n = 0, len(actions)
    while i < n:
        if actions[i] is RECOMPUTE:
            j = i
            while j + 1 < n and actions[j + 1] is RECOMPUTE:
                j += 1
            runs.append((i, j))
            i = j + 1
        else:
            i += 1
    return runs


@dataclass(frozen=True)
class Plan:
    """An action per layer, with `prefetch_at`/`swap_wait` for swapped layers.

    `profile` is the fingerprint of the profile the plan was made for (or
    None for hand-written plans); `names` are optional layer names that must
    match the profile's when present.
    """

    actions: tuple[Action, ...]
    prefetch_at: tuple[int | None, ...]
    swap_wait: tuple[int | None, ...]
    names: tuple[str | None, ...] | None = None
    profile: str | None = None

    def __post_init__(self) -> None:
        for attr in ("actions", "prefetch_at", "swap_wait", "names"):
            value = getattr(self, attr)
            if not (attr == "names" and value is None):
                _check_sequence(value, attr)
        if self.profile is not None and not isinstance(self.profile, str):
            raise InvalidPlanError(
                f"plan: profile must be a fingerprint string or None, got {show(self.profile)}"
            )
        names = None if self.names is None else tuple(self.names)
        if names is not None and not all(n is None or isinstance(n, str) for n in names):
            bad = next(n for n in names if not (n is None or isinstance(n, str)))
            raise InvalidPlanError(f"plan: names must be strings or None, got {show(bad)}")
        n = len(self.actions)
        if n == 0:
            raise InvalidPlanError("plan: layers must hold at least one entry, got 0")
        if len(self.prefetch_at) != n or len(self.swap_wait) != n or (names and len(names) != n):
            raise InvalidPlanError(
                f"plan: actions, prefetch_at, swap_wait and names must have one entry per "
                f"layer ({n}), got {len(self.prefetch_at)}, {len(self.swap_wait)}, "
                f"{len(names) if names else '-'}"
            )

        def name_of(i: int) -> str | None:
            return names[i] if names else None

        actions = tuple(parse_action(a, i, name_of(i)) for i, a in enumerate(self.actions))
        need = need_indices(actions)
        # NOTE: the common case is checked without building a message (the
        # messages cost more than the checks: 1 s of every 10^5-layer plan,
        # which every solve builds after its method stops); anything else
        # takes the full checks below, which raise with the layer named.
        for i, action in enumerate(actions):
            prefetch, wait = self.prefetch_at[i], self.swap_wait[i]
            if action is SWAP:
                if (
                    type(prefetch) is int
                    and need[i] <= prefetch < n
                    and (wait is None or (type(wait) is int and i < wait < n))
                ):
                    continue
            elif prefetch is None and wait is None:
                continue
            at = where(i, name_of(i))
            if action is SWAP:
                _check_index(prefetch, need[i], n - 1, f"{at}: prefetch_at", required=True)
                _check_index(wait, i + 1, n - 1, f"{at}: swap_wait", required=False)
            else:
                if prefetch is not None:
                    raise InvalidPlanError(
                        f"{at}: prefetch_at is only allowed for action swap, got "
                        f"{show(prefetch)} with action {action.value}"
                    )
                if wait is not None:
                    raise InvalidPlanError(
                        f"{at}: swap_wait is only allowed for action swap, got "
                        f"{show(wait)} with action {action.value}"
                    )
        object.__setattr__(self, "actions", actions)
        object.__setattr__(self, "prefetch_at", tuple(self.prefetch_at))
        object.__setattr__(self, "swap_wait", tuple(self.swap_wait))
        object.__setattr__(self, "names", names)

    # -- construction -----------------------------------------------------

    @classmethod
    def build(
        cls,
        actions: Sequence[Action | str],
        prefetch_at: Sequence[int | None] | None = None,
        swap_wait: Sequence[int | None] | None = None,
        *,
        profile: Profile | None = None,
    ) -> Plan:
        """A plan from actions, filling the defaults the spec leaves open.

        A swapped layer without `prefetch_at` prefetches one backward step
        ahead of need (`min(need(i) + 1, L - 1)`, vDNN's rule); with
        `profile`, the plan carries its names and fingerprint.
        """
        for what, value in (
            ("actions", actions),
            ("prefetch_at", prefetch_at),
            ("swap_wait", swap_wait),
        ):
            if value is not None or what == "actions":
                _check_sequence(value, what)
        if profile is not None:
            profile = _resolve(profile)
        n = len(actions)
        acts = [parse_action(a, i) for i, a in enumerate(actions)]
        if profile is not None and len(profile.layers) != n:
            raise InvalidPlanError(
                f"plan: must have one entry per profile layer ({len(profile.layers)}), got {n}"
            )
        need = need_indices(acts, profile)
        prefetch = list(prefetch_at) if prefetch_at is not None else [None] * n
        wait = list(swap_wait) if swap_wait is not None else [None] * n
        if len(prefetch) == n:
            for i, a in enumerate(acts):
                if a is SWAP and prefetch[i] is None:
                    prefetch[i] = min(need[i] + 1, n - 1)
                elif a is not SWAP:
                    prefetch[i] = None
        if len(wait) == n:
            for i, a in enumerate(acts):
                if a is not SWAP:
                    wait[i] = None
        names = None
        fingerprint = None
        if profile is not None:
            if len(profile.layers) != n:
                raise InvalidPlanError(
                    f"plan: must have one entry per profile layer ({len(profile.layers)}), got {n}"
                )
            names = profile.names
            fingerprint = profile.fingerprint
        return cls(tuple(acts), tuple(prefetch), tuple(wait), names, fingerprint)

    @classmethod
    def keep_all(cls, profile: Profile) -> Plan:
        """Every layer kept: the plan of no memory saving (and of `T_ideal`)."""
        profile = _resolve(profile)
        return cls.build([KEEP] * len(profile.layers), profile=profile)

    # -- queries ----------------------------------------------------------

    def __len__(self) -> int:
        return len(self.actions)

    def need(self, profile: Profile | None = None) -> list[int]:
        """`need(i)` per layer (version 1's rule without `profile`)."""
        return need_indices(self.actions, profile)

    def runs(self) -> list[tuple[int, int]]:
        return recompute_runs(self.actions)

    def count(self, action: Action) -> int:
        return sum(1 for a in self.actions if a is action)

    def check(self, profile: Profile) -> None:
        """Refuse this plan for `profile`: another fingerprint, wrong length or names.

        The fingerprint is checked first: a plan made for another profile is
        refused as such, whatever else (its length) differs.
        """
        profile = _resolve(profile)
        if self.profile is not None and self.profile != profile.fingerprint:
            raise ProfileMismatchError(
                f"plan: was made for profile {self.profile}, not for {profile.name!r} "
                f"({profile.fingerprint}); solve again for this profile"
            )
        n = len(profile.layers)
        if len(self.actions) != n:
            raise InvalidPlanError(
                f"plan: must have one entry per profile layer ({n}), got {len(self.actions)}"
            )
        if self.names:
            for i, (mine, theirs) in enumerate(zip(self.names, profile.names, strict=True)):
                if mine is not None and mine != theirs:
                    raise InvalidPlanError(
                        f"{where(i, theirs)}: name must match the profile, got {show(mine)}"
                    )
        if not profile.is_v1:
            need = need_indices(self.actions, profile)
            for i, action in enumerate(self.actions):
                if action is SWAP and self.prefetch_at[i] < need[i]:
                    raise InvalidPlanError(
                        f"{where(i, profile.names[i])}: prefetch_at must be in "
                        f"[{need[i]}, {n - 1}] (need({i}) under this profile), "
                        f"got {self.prefetch_at[i]}"
                    )

    def for_profile(self, profile: Profile) -> Plan:
        """This plan checked against `profile`, carrying its names and fingerprint."""
        self.check(profile)
        return Plan(
            self.actions, self.prefetch_at, self.swap_wait, profile.names, profile.fingerprint
        )

    def summary(self) -> str:
        """`keep 5, swap 3, recompute 2`: the one-line description tables use."""
        return ", ".join(f"{a.value} {self.count(a)}" for a in Action)


def _check_sequence(value: Any, what: str) -> None:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidPlanError(
            f"plan: {what} must be a sequence with one entry per layer, got {show(value)}"
        )


def _resolve(profile: Any) -> Profile:
    # NOTE: a plan takes a `Profile`, never a name or a path: resolving those
    # reads profile files (planopt.io, which parses plans and so sits above
    # this module). The functions that take a profile resolve names first.
    if not isinstance(profile, Profile):
        raise InvalidProfileError(
            f"profile must be a planopt.Profile here (load a bundled name with "
            f"planopt.bundled_profile, a file with planopt.load_profile), got {show(profile)}"
        )
    return profile


def _check_index(value: Any, low: int, high: int, what: str, *, required: bool) -> None:
    if value is None:
        if required:
            raise InvalidPlanError(f"{what} is required for action swap, in [{low}, {high}]")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPlanError(f"{what} must be an integer layer index, got {show(value)}")
    if not low <= value <= high:
        raise InvalidPlanError(f"{what} must be in [{low}, {high}], got {value}")
