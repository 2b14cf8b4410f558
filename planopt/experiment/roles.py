"""Which part each method plays in a sweep, read from the registry (never a list of names).

A method registered tomorrow with the right `role` and `space` joins the
right tables without a change here: the full-space optima (`full_space`)
are every exact method or oracle over the joint space, the restricted
optima (`restricted`) the exact methods over one mechanism, the bounds
(`is_bound`) the methods of role `bound`, and the published greedy the
method the registry calls `greedy`.

Results may name a method that is no longer registered (an old cache, a
test's own method): such a name plays no part here (`role_of` is None).
"""

from __future__ import annotations

from planopt import registry
from planopt.errors import UnknownMethodError
from planopt.registry import SPACE_ACTIONS, Role, Space

# The registry's name (an alias) for the published greedy, whose gap the tables single out.
GREEDY_ALIAS = "greedy"


def _spec(method: str) -> registry.MethodSpec | None:
    try:
        return registry.get(method)
    except UnknownMethodError:
        return None


def role_of(method: str) -> Role | None:
    spec = _spec(method)
    return None if spec is None else spec.role


def is_bound(method: str) -> bool:
    """A method of role `bound`: a proven lower bound, never a plan."""
    return role_of(method) is Role.BOUND


def is_exact(method: str) -> bool:
    """An exact method or oracle: it proves the optimum of its space."""
    spec = _spec(method)
    return spec is not None and spec.exact


def full_space() -> tuple[str, ...]:
    """Exact methods and oracles over the joint space: their optimum is the global one."""
    return tuple(
        name
        for name in registry.names()
        if registry.get(name).exact and registry.get(name).space is Space.JOINT
    )


def joint_exact() -> tuple[str, ...]:
    """Exact methods (not oracles) over the joint space: what a restricted one is held to."""
    return tuple(
        name for name in registry.by_role(Role.EXACT, available_only=False)
        if registry.get(name).space is Space.JOINT
    )  # fmt: skip


def space_label(space: Space) -> str:
    """`keep/recompute` for the recompute-only space: keep first, then the others."""
    actions = sorted(SPACE_ACTIONS[space] - {"keep"})
    return "/".join(["keep", *actions])


def restricted() -> dict[str, str]:
    """Exact methods over one mechanism, each with its space's label (`keep/swap`)."""
    return {
        name: space_label(registry.get(name).space)
        for name in registry.by_role(Role.EXACT, available_only=False)
        if registry.get(name).space in (Space.RECOMPUTE_ONLY, Space.SWAP_ONLY)
    }


def greedy() -> str:
    """The published greedy's canonical name (the method registered as `greedy`)."""
    return registry.get(GREEDY_ALIAS).name
