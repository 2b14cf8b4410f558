"""The plan's decisions as model variables: actions, prefetch steps, swap waits.

These are the only variables a plan fixes; every time and memory variable
follows from them (`solvers.model.ir.evaluate`). `Choices` restricts what a
layer may still decide (the search tier pins every layer outside its
window this way).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planopt.plan import KEEP, RECOMPUTE, SWAP, Action
from solvers.model.ir import AndEq, Clause, ExactlyOne, Expr, Linear, Lit, Model, Var, neg, pos

# A fact that is fixed for some layers and a plan's choice for others: a
# constant, or a literal of the model (cost model v3: "step i reads x_i").
Flag = bool | Lit


def negate(x: Lit) -> Lit:
    return (x[0], not x[1])


def conj(m: Model, lits: Sequence[Lit | None], name: str) -> Lit | None:
    """A literal true exactly when every one of `lits` is (None: always true)."""
    present = [x for x in lits if x is not None]
    if len(present) <= 1:
        return present[0] if present else None
    v = m.new_bool(name)
    m.add(AndEq(v, tuple(present)))
    return pos(v)


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
    # Cost model v3: the options (names; None = whole) it may take; None: any.
    options: tuple[str | None, ...] | None = None


@dataclass(frozen=True)
class DecisionVars:
    """Indices of the decision variables: per layer its action literals, and per
    swapped layer one literal per allowed prefetch step and per allowed wait."""

    keep: list[int]
    swap: list[int]
    rec: list[int]
    prefetch: list[dict[int, int]]
    wait: list[dict[int, int]]
    # Cost model v3: per layer one literal per option of its menu (in menu
    # order; none when the layer has no menu or may only be recomputed), the
    # literal "the layer is partial" (None: never), and whether step i reads
    # x_i (`saves_input`, or partial), length n + 1.
    opt: list[list[int]] = field(default_factory=list)
    partial: list[Lit | None] = field(default_factory=list)
    reads_in: list[Flag] = field(default_factory=list)

    def whole(self, i: int) -> Lit | None:
        """The literal "layer i takes no option" (None: always)."""
        part = self.partial[i]
        return None if part is None else negate(part)


def add_decisions(
    m: Model,
    n: int,
    actions: Sequence[Action],
    with_swap_wait: bool,
    choices: Mapping[int, Choices],
    saves_input: Sequence[bool],
    menu_sizes: Sequence[int] = (),
    menu_names: Sequence[Sequence[str]] = (),
) -> DecisionVars:
    """Create the decision variables of `n` layers and the rules that tie them.

    Exactly one action per layer (banned actions fixed to 0); a swapped layer
    prefetches at exactly one step `j >= need(i)` (spec v2) and waits for its
    copy out at most once. `saves_input[k]`: whether `B_k` reads its input
    (length `n + 1`). `menu_sizes[i]`: how many options layer i's menu has
    (v3): one literal each, at most one taken, only on a kept or swapped layer.
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
    opt, partial = _add_options(m, n, keep, swap, menu_sizes, choices, menu_names)
    reads_in: list[Flag] = [
        True if saves_input[i] else (False if partial[i] is None else partial[i]) for i in range(n)
    ]
    reads_in.append(False)

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
                rin = reads_in[j + 1]
                if rin is True:
                    m.add(Clause((neg(v), *run)))
                else:
                    m.add(Clause((neg(v), *run, neg(rec[j + 1]))))
                    if rin is not False:  # a partial layer j+1 reads x_{j+1} at step j+1
                        m.add(Clause((neg(v), *run, negate(rin))))
        waits = range(i + 1, n) if with_swap_wait and can_swap else ()
        if i in choices and can_swap:
            waits = sorted({j for j in choices[i].wait if i + 1 <= j < n})
        sw = {j: m.new_bool(f"sw{i}_{j}") for j in waits}
        wait.append(sw)
        if sw:
            m.add(Linear(Expr((*((v, 1) for v in sw.values()), (swap[i], -1))), None, 0))
    return DecisionVars(keep, swap, rec, prefetch, wait, opt, partial, reads_in)


def add_inplace_rule(m: Model, d: DecisionVars, modifies: Sequence[bool], reads: Sequence[bool]):
    """The in-place rule (`planopt.runnable`) as clauses, for each layer `j` that
    modifies its input in place: replayed (recomputed or an option) implies the layer
    below is not kept (layer 0: never replayed), and, when the layer below is
    swapped, that `F_j` waits for its copy out (`swap_wait[j-1] = j`; without that
    literal, not swapped); when `reads[j]` (`x_j` has a backward reader below), not
    replayed implies the layer below is kept."""
    for j, flag in enumerate(modifies):
        if not flag:
            continue
        replayed = [pos(d.rec[j]), *(pos(v) for v in d.opt[j])]
        if j == 0:
            for lit in replayed:
                m.add(Clause((negate(lit),)))
            continue
        wait = d.wait[j - 1].get(j)
        for lit in replayed:
            m.add(Clause((negate(lit), neg(d.keep[j - 1]))))
            race = (negate(lit), neg(d.swap[j - 1]))
            m.add(Clause(race if wait is None else (*race, pos(wait))))
        if reads[j]:
            m.add(Clause((*replayed, pos(d.keep[j - 1]))))


def _add_options(
    m: Model,
    n: int,
    keep: list[int],
    swap: list[int],
    menu_sizes: Sequence[int],
    choices: Mapping[int, Choices],
    menu_names: Sequence[Sequence[str]],
) -> tuple[list[list[int]], list[Lit | None]]:
    """The option literals of every layer (at most one, on a kept or swapped layer) and
    each layer's "partial" literal (None where it cannot be).

    A layer whose `choices` name its options may take only those (the search
    tier pins a layer outside its window to the incumbent's option).
    """
    opt: list[list[int]] = []
    partial: list[Lit | None] = []
    for i in range(n):
        size = menu_sizes[i] if i < len(menu_sizes) else 0
        if size and m.vars[keep[i]].hi == 0 and m.vars[swap[i]].hi == 0:
            size = 0
        lits = [m.new_bool(f"opt{i}_{k}") for k in range(size)]
        opt.append(lits)
        if not lits:
            partial.append(None)
            continue
        terms = (*((v, 1) for v in lits), (keep[i], -1), (swap[i], -1))
        m.add(Linear(Expr(terms), None, 0))
        allowed = choices[i].options if i in choices else None
        if allowed is not None:
            names = list(menu_names[i])
            for k, v in enumerate(lits):
                if names[k] not in allowed:
                    m.vars[v] = Var(m.vars[v].name, 0, 0, True)
            if None not in allowed:  # an option it must take
                m.add(Linear(Expr(tuple((v, 1) for v in lits)), 1, None))
        whole = conj(m, [neg(v) for v in lits], f"whole{i}")
        partial.append(negate(whole) if whole is not None else None)
    return opt, partial
