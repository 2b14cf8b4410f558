"""The plan's decisions as model variables: actions, prefetch steps, swap waits.

These are the only variables a plan fixes; every time and memory variable
follows from them (`solvers.model.ir.evaluate`). `Choices` restricts what a
layer may still decide (the search tier pins every layer outside its
window this way).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planopt.plan import KEEP, RECOMPUTE, SWAP, Action
from solvers.model.ir import Clause, ExactlyOne, Expr, Linear, Model, Var, neg, pos


@dataclass(frozen=True)
class Choices:
    """What one layer may still choose (see `build`'s `choices`): its actions, the
    backward steps its copy back may be issued at, the forward layers its
    swap_wait may name (no wait is always allowed). Outside a search window a
    layer gets a single choice each, so its copy-back queue slots collapse and
    the model grows with L, not L^2."""

    actions: tuple[Action, ...]
    prefetch: tuple[int, ...] = ()
    wait: tuple[int, ...] = ()


@dataclass(frozen=True)
class DecisionVars:
    """Indices of the decision variables: per layer its action literals, and per
    swapped layer one literal per allowed prefetch step and per allowed wait."""

    keep: list[int]
    swap: list[int]
    rec: list[int]
    prefetch: list[dict[int, int]]
    wait: list[dict[int, int]]


def add_decisions(
    m: Model,
    n: int,
    actions: Sequence[Action],
    with_swap_wait: bool,
    choices: Mapping[int, Choices],
    saves_input: Sequence[bool],
) -> DecisionVars:
    """Create the decision variables of `n` layers and the rules that tie them.

    Exactly one action per layer (banned actions fixed to 0); a swapped layer
    prefetches at exactly one step `j >= need(i)` (spec v2) and waits for its
    copy out at most once. `saves_input[k]`: whether `B_k` reads its input
    (length `n + 1`).
    """
    keep = [m.new_bool(f"keep{i}") for i in range(n)]
    swap = [m.new_bool(f"swap{i}") for i in range(n)]
    rec = [m.new_bool(f"rec{i}") for i in range(n)]
    for i in range(n):
        m.add(ExactlyOne((pos(keep[i]), pos(swap[i]), pos(rec[i]))))
        allowed = choices[i].actions if i in choices else actions
        for action, v in ((KEEP, keep[i]), (SWAP, swap[i]), (RECOMPUTE, rec[i])):
            if action not in allowed:
                m.vars[v] = Var(m.vars[v].name, 0, 0, True)

    prefetch: list[dict[int, int]] = []
    wait: list[dict[int, int]] = []
    for i in range(n):
        # A layer that may not swap gets no prefetch or wait literals at all
        # (they would all be 0): a keep/recompute model grows with L, not L^2.
        can_swap = SWAP in (choices[i].actions if i in choices else actions)
        steps = range(i, n) if can_swap else ()
        if i in choices and can_swap:
            steps = sorted({j for j in choices[i].prefetch if i <= j < n})
        pf = {j: m.new_bool(f"pf{i}_{j}") for j in steps}
        prefetch.append(pf)
        m.add(Linear(Expr((*((v, 1) for v in pf.values()), (swap[i], -1))), 0, 0))
        for j, v in pf.items():
            # j >= need(i): a step j is too early when layers i+1 .. j are all
            # recompute (none when j = i) and the step after is needed too: layer
            # j+1 is recompute (the run goes on), or reads its input (the block
            # moves to B_{j+1}; for j = i, B_{i+1} reads x_{i+1} itself).
            if j + 1 <= n - 1:
                run = tuple(neg(rec[k]) for k in range(i + 1, j + 1))
                if saves_input[j + 1]:
                    m.add(Clause((neg(v), *run)))
                else:
                    m.add(Clause((neg(v), *run, neg(rec[j + 1]))))
        waits = range(i + 1, n) if with_swap_wait and can_swap else ()
        if i in choices and can_swap:
            waits = sorted({j for j in choices[i].wait if i + 1 <= j < n})
        sw = {j: m.new_bool(f"sw{i}_{j}") for j in waits}
        wait.append(sw)
        if sw:
            m.add(Linear(Expr((*((v, 1) for v in sw.values()), (swap[i], -1))), None, 0))
    return DecisionVars(keep, swap, rec, prefetch, wait)
