"""The test oracle: try every valid plan of a tiny net and keep the fastest that fits.

Exact methods must match it and heuristics must never beat it, so it is kept
as plain as possible: no pruning, no bounds, just enumeration in a fixed
order and the one cost model (`problem.scorer`). `need(i)` is recomputed
here from the spec's wording rather than borrowed from `planopt.plan`, so a
mistake there shows up as a disagreement instead of being shared.

Enumeration order (it decides ties): action tuples in `itertools.product`
order over (keep, swap, recompute) with layer 0 varying slowest; within one
action tuple (version 3, a profile with menus), the options of the kept and
swapped layers with a menu in `itertools.product` order, each layer trying
the whole layer (None) first, then its menu in order; within those, swapped
layers in index order, each trying `prefetch_at` ascending and, for each,
`swap_wait` None first, then ascending.

A profile whose layers modify their input in place (`Layer.modifies_input`)
admits only the plans that keep the in-place rule (cost model, "The in-place
rule"); the enumeration skips the others, by `_breaks_rule`, written here
from the rule's text rather than borrowed from `planopt.runnable`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator

from planopt.errors import SolverOptionError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.problem import Problem
from planopt.result import SolverOutput, Status

ACTIONS: tuple[Action, ...] = (KEEP, SWAP, RECOMPUTE)
_CHECK_EVERY = 256  # candidates between deadline checks

RawPlan = tuple[tuple[Action, ...], tuple[int | None, ...], tuple[int | None, ...]]
# A version-3 candidate: the raw plan and each layer's option (None: the whole layer).
RawPlanV3 = tuple[
    tuple[Action, ...], tuple[int | None, ...], tuple[int | None, ...], tuple[str | None, ...]
]


def _need(actions: tuple[Action, ...], i: int, saves_input: tuple[bool, ...]) -> int:
    """The highest backward step holding a reader of layer `i`'s products, `i` if none.

    Readers (spec v2): `B_i`; `B_{i+1}` when layer `i+1` saves its input; the
    block of the recompute run starting at `i+1`, which runs at the step of
    the run's top `t`, or at `t+1` when layer `t+1` saves its input.
    """
    n = len(actions)
    need = i
    if i + 1 < n and saves_input[i + 1]:
        need = i + 1
    if i + 1 < n and actions[i + 1] is RECOMPUTE:
        top = i + 1
        while top + 1 < n and actions[top + 1] is RECOMPUTE:
            top += 1
        step = top + 1 if top + 1 < n and saves_input[top + 1] else top
        need = max(need, step)
    return need


def _breaks_rule(
    actions: tuple[Action, ...],
    options: tuple[str | None, ...],
    wait: tuple[int | None, ...],
    modifies: tuple[bool, ...],
    reads: tuple[bool, ...],
) -> bool:
    """Whether some layer j that modifies its input in place is replayed (recomputed
    or with an option) above a kept layer (the batch below layer 0 counts as kept), or
    above a swapped one whose copy out F_j does not wait for, or is not replayed above
    a swapped or recomputed layer whose output is read in backward (`reads[j]`: the
    layer below saves its output or layer j its input)."""
    for j, flag in enumerate(modifies):
        if not flag:
            continue
        replayed = actions[j] is RECOMPUTE or options[j] is not None
        below_kept = j == 0 or actions[j - 1] is KEEP
        if replayed == below_kept and (replayed or reads[j]):
            return True
        if replayed and j > 0 and actions[j - 1] is SWAP and wait[j - 1] != j:
            return True
    return False


def enumerate_raw(
    n_layers: int, *, with_swap_wait: bool = True, saves_input: tuple[bool, ...] | None = None
) -> Iterator[RawPlan]:
    """Every valid plan as `(actions, prefetch_at, swap_wait)` tuples, in the module's order.

    `saves_input` (per layer; default none) is all `need(i)` depends on.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    n = n_layers
    flags = saves_input if saves_input is not None else (False,) * n
    for actions in itertools.product(ACTIONS, repeat=n):
        yield from _with_swaps(actions, n, with_swap_wait, flags)


def enumerate_raw_v3(
    n_layers: int,
    *,
    with_swap_wait: bool = True,
    saves_input: tuple[bool, ...] | None = None,
    menus: tuple[tuple[str, ...], ...] | None = None,
) -> Iterator[RawPlanV3]:
    """Every valid plan of a chain with menus, options included, in the module's order.

    `menus[i]` names layer `i`'s options. A layer that takes an option reads
    its input (spec v3), so it counts as saving it for `need`.
    """
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    n = n_layers
    flags = saves_input if saves_input is not None else (False,) * n
    menus = menus if menus is not None else ((),) * n
    for actions in itertools.product(ACTIONS, repeat=n):
        choices = [(None, *menus[i]) if actions[i] is not RECOMPUTE else (None,) for i in range(n)]
        for options in itertools.product(*choices):
            reads = tuple(flags[i] or options[i] is not None for i in range(n))
            for raw in _with_swaps(actions, n, with_swap_wait, reads):
                yield (*raw, options)


def _with_swaps(
    actions: tuple[Action, ...], n: int, with_swap_wait: bool, flags: tuple[bool, ...]
) -> Iterator[RawPlan]:
    per_swap: list[list[tuple[int, int, int | None]]] = []
    for i, action in enumerate(actions):
        if action is SWAP:
            waits: list[int | None] = [None]
            if with_swap_wait:
                waits += list(range(i + 1, n))
            per_swap.append([(i, p, w) for p in range(_need(actions, i, flags), n) for w in waits])
    for combo in itertools.product(*per_swap):
        prefetch: list[int | None] = [None] * n
        wait: list[int | None] = [None] * n
        for i, p, w in combo:
            prefetch[i] = p
            wait[i] = w
        yield actions, tuple(prefetch), tuple(wait)


def enumerate_plans(
    n_layers: int, *, with_swap_wait: bool = True, saves_input: tuple[bool, ...] | None = None
) -> Iterator[Plan]:
    """Every valid plan of an `n_layers` chain (without names or fingerprint)."""
    raws = enumerate_raw(n_layers, with_swap_wait=with_swap_wait, saves_input=saves_input)
    for actions, prefetch, wait in raws:
        yield Plan(actions, prefetch, wait)


def _check_options(with_swap_wait: object, max_layers: object) -> None:
    if not isinstance(with_swap_wait, bool):
        raise SolverOptionError(
            f"method 'brute-force': with_swap_wait must be true or false, got {with_swap_wait!r}"
        )
    if isinstance(max_layers, bool) or not isinstance(max_layers, int) or max_layers < 1:
        raise SolverOptionError(
            f"method 'brute-force': max_layers must be an integer >= 1, got {max_layers!r}"
        )


def brute_force(
    problem: Problem, *, with_swap_wait: bool = True, max_layers: int = 6
) -> SolverOutput:
    """The fastest plan within the budget over all plans (ties: lowest peak, then first).

    Refuses nets longer than `max_layers` (the count of plans grows faster
    than exponentially). Stops at the deadline with the best plan so far
    (`feasible`) or none (`timeout`).
    """
    _check_options(with_swap_wait, max_layers)
    n = problem.n
    if n > max_layers:
        raise SolverOptionError(
            f"method 'brute-force': the net must have at most max_layers={max_layers} layers "
            f"(the number of plans explodes), got {n}; to allow it pass max_layers={n} to "
            f"planopt.solve (--option max_layers={n} on the command line), or prove the "
            f"optimum of a net this size with method 'exact' (--method exact)"
        )
    score = problem.scorer.score
    best: RawPlanV3 | None = None
    best_key = (math.inf, math.inf)
    smallest_peak = math.inf
    tried = 0
    flags = tuple(layer.saves_input for layer in problem.profile.layers)
    menus = tuple(tuple(o.name for o in layer.options) for layer in problem.profile.layers)
    candidates = enumerate_raw_v3(n, with_swap_wait=with_swap_wait, saves_input=flags, menus=menus)
    layers = problem.profile.layers
    modifies = tuple(layer.modifies_input for layer in layers)
    reads = tuple(j > 0 and (layers[j - 1].saves_output or layers[j].saves_input) for j in range(n))
    rule = any(modifies)
    for candidate in candidates:
        if tried % _CHECK_EVERY == 0 and problem.expired():
            return _stopped(problem, best, best_key, tried)
        actions, prefetch, wait, options = candidate
        if rule and _breaks_rule(actions, options, wait, modifies, reads):
            continue  # not runnable: not a plan of this profile
        tried += 1
        makespan, peak = score(actions, prefetch, wait, options=options)
        smallest_peak = min(smallest_peak, peak)
        if problem.fits(peak) and (makespan, peak) < best_key:
            best, best_key = candidate, (makespan, peak)
    if best is None:
        return SolverOutput(
            None,
            Status.INFEASIBLE,
            message=(
                f"no plan fits the budget {problem.budget:.0f} bytes: the smallest peak of "
                f"all {tried} plans is {smallest_peak} bytes"
            ),
        )
    return SolverOutput(
        _as_plan(problem, best),
        Status.OPTIMAL,
        lower_bound=best_key[0],
        message=f"best of {tried} plans",
    )


def _stopped(
    problem: Problem, best: RawPlanV3 | None, best_key: tuple[float, float], tried: int
) -> SolverOutput:
    if best is None:
        return SolverOutput(
            None,
            Status.TIMEOUT,
            message=f"time limit reached after {tried} plans, none within the budget yet",
        )
    return SolverOutput(
        _as_plan(problem, best),
        Status.FEASIBLE,
        lower_bound=problem.profile.t_ideal,
        message=f"time limit reached after {tried} plans; best so far {best_key[0]:.6g} s",
    )


def _as_plan(problem: Problem, raw: RawPlanV3) -> Plan:
    actions, prefetch, wait, options = raw
    return Plan.build(actions, prefetch, wait, profile=problem.profile, options=options)
