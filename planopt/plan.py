"""A plan: one keep/swap/recompute action per layer (spec: "The plan").

The plan is stored as parallel tuples (struct of arrays) because every hot
loop, the simulator's and the solvers', walks it by layer index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from planopt.action import KEEP, RECOMPUTE, SWAP, Action, parse_action
from planopt.errors import InvalidPlanError, InvalidProfileError, ProfileMismatchError, show, where
from planopt.need import block_step, need_indices, reads_input, recompute_runs
from planopt.profile import Profile
from planopt.runnable import check_runnable


@dataclass(frozen=True)
class Plan:
    """An action per layer, with `prefetch_at`/`swap_wait` for swapped layers.

    `profile` is the fingerprint of the profile the plan was made for (or
    None for hand-written plans); `names` are optional layer names that must
    match the profile's when present. `options` (cost model v3) names the
    option of a kept or swapped layer's menu, None for the whole layer;
    given as None it means no option anywhere, and is stored as a tuple.
    """

    actions: tuple[Action, ...]
    prefetch_at: tuple[int | None, ...]
    swap_wait: tuple[int | None, ...]
    names: tuple[str | None, ...] | None = None
    profile: str | None = None
    options: tuple[str | None, ...] | None = None

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
        options = _check_options(self.options, actions, name_of)
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
        object.__setattr__(self, "options", options)

    # -- construction -----------------------------------------------------

    @classmethod
    def build(
        cls,
        actions: Sequence[Action | str],
        prefetch_at: Sequence[int | None] | None = None,
        swap_wait: Sequence[int | None] | None = None,
        *,
        profile: Profile | None = None,
        options: Sequence[str | None] | None = None,
    ) -> Plan:
        """A plan from actions, filling the defaults the spec leaves open.

        A swapped layer without `prefetch_at` prefetches one backward step
        ahead of need (`min(need(i) + 1, L - 1)`, vDNN's rule); with
        `profile`, the plan carries its names and fingerprint. `options`
        names each layer's chosen option (None: the whole layer).
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
        if options is not None:
            _check_sequence(options, "options")
            if len(options) != n:
                raise InvalidPlanError(
                    f"plan: options must have one entry per layer ({n}), got {len(options)}"
                )
        need = need_indices(acts, profile, options)
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
        chosen = None if options is None else tuple(options)
        plan = cls(tuple(acts), tuple(prefetch), tuple(wait), names, fingerprint, chosen)
        if profile is not None and plan.has_options:
            plan.check(profile)
        return plan

    @classmethod
    def keep_all(cls, profile: Profile) -> Plan:
        """Every layer kept: the plan of no memory saving (and of `T_ideal`)."""
        profile = _resolve(profile)
        return cls.build([KEEP] * len(profile.layers), profile=profile)

    # -- queries ----------------------------------------------------------

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def has_options(self) -> bool:
        """Whether any layer takes an option of its menu (a version-3 plan)."""
        return any(option is not None for option in self.options or ())

    def need(self, profile: Profile | None = None) -> list[int]:
        """`need(i)` per layer (version 1's rule without `profile`)."""
        return need_indices(self.actions, profile, self.options if profile else None)

    def runs(self) -> list[tuple[int, int]]:
        return recompute_runs(self.actions)

    def count(self, action: Action) -> int:
        return sum(1 for a in self.actions if a is action)

    def check(self, profile: Profile) -> None:
        """Refuse this plan for `profile`: another fingerprint, wrong length or names,
        a copy back issued too early, or the in-place rule broken (`planopt.runnable`).

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
        options = self.options or ()
        for i, option in enumerate(options):
            if option is not None and not any(o.name == option for o in profile.layers[i].options):
                menu = ", ".join(repr(o.name) for o in profile.layers[i].options) or "none"
                raise InvalidPlanError(
                    f"{where(i, profile.names[i])}: option must name an option of the "
                    f"layer's menu ({menu}), got {option!r}"
                )
        if not profile.is_v1:
            need = need_indices(self.actions, profile, self.options)
            for i, action in enumerate(self.actions):
                if action is SWAP and self.prefetch_at[i] < need[i]:
                    raise InvalidPlanError(
                        f"{where(i, profile.names[i])}: prefetch_at must be in "
                        f"[{need[i]}, {n - 1}] (need({i}) under this profile), "
                        f"got {self.prefetch_at[i]}"
                    )
        check_runnable(profile, self.actions, self.options, self.swap_wait)

    def for_profile(self, profile: Profile) -> Plan:
        """This plan checked against `profile`, carrying its names and fingerprint."""
        self.check(profile)
        return Plan(
            self.actions,
            self.prefetch_at,
            self.swap_wait,
            profile.names,
            profile.fingerprint,
            self.options,
        )

    def summary(self) -> str:
        """`keep 5, swap 3, recompute 2`: the one-line description tables use."""
        return ", ".join(f"{a.value} {self.count(a)}" for a in Action)


def _check_options(value: Any, actions: tuple[Action, ...], name_of: Any) -> tuple[str | None, ...]:
    """The options tuple normalised (None: no option anywhere); refused on recompute."""
    n = len(actions)
    if value is None:
        return (None,) * n
    _check_sequence(value, "options")
    if len(value) != n:
        raise InvalidPlanError(
            f"plan: options must have one entry per layer ({n}), got {len(value)}"
        )
    for i, option in enumerate(value):
        if option is None:
            continue
        at = where(i, name_of(i))
        if not isinstance(option, str) or not option:
            raise InvalidPlanError(
                f"{at}: option must be an option's name (a non-empty string) or None, "
                f"got {show(option)}"
            )
        if actions[i] is RECOMPUTE:
            raise InvalidPlanError(
                f"{at}: option is only allowed for actions keep and swap (a recomputed "
                f"layer is regenerated whole), got {option!r} with action recompute"
            )
    return tuple(value)


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


__all__ = [
    "KEEP",
    "RECOMPUTE",
    "SWAP",
    "Action",
    "Plan",
    "block_step",
    "need_indices",
    "parse_action",
    "reads_input",
    "recompute_runs",
]
