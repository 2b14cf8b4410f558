"""Improve a plan by search, every candidate scored by the simulator: the large-net engine.

The exact model does not scale to hundreds of layers and the greedy has no
quality guarantee, so big nets are planned by improving a starting plan
(the greedy's) with two neighbourhoods, each candidate a whole-chain plan
scored by `problem.scorer` (the one cost model) and accepted only when it
fits the budget and is faster:

* group moves (`LocalSearch`): set the action of a *group* of layers (one
  layer, or the same layer in several copies of a repeated block, so one
  move changes every copy at once), change the prefetch lead (`prefetch_at -
  need`) or the swap_wait of a swapped group, or exchange the actions of two
  groups at once (one frees memory, the other spends it). A move costs one
  simulation, O(L).
* exact windows (`solvers.window`-style, in `window_candidate` below): the
  actions, prefetch steps and waits of a window of consecutive layers are
  re-optimised by the exact CP-SAT model on a *reduced chain*, the rest of
  the plan fixed (see `reduced_chain` for what the reduction keeps).

`lns` (method "lns") alternates them under the time limit. The incumbent is
never worse than the starting plan, so the result is never worse than the
greedy. The search path is deterministic (fixed move order, seeded window
order, single-threaded CP-SAT); where the time limit stops it early the
result depends on where it stopped, and `max_evals` gives a work limit that
does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from planopt.budget import min_memory_plan
from planopt.errors import InvalidPlanError, SolverOptionError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan, need_indices
from planopt.problem import Problem
from planopt.profile import MIN_POSITIVE_SECONDS, Layer, Profile
from planopt.result import SolverOutput, Status
from solvers.formulation import Expr, Linear, Var

# (layer, action, lead, wait offset): for a swap, prefetch_at = need + lead
# (capped at L-1) and swap_wait = layer + offset (None: no wait).
Change = tuple[int, Action, int | None, int | None]
Key = tuple[int, float]  # (0, makespan) when the plan fits the budget, else (1, peak)

# A move must shorten the makespan by more than this fraction to count.
_IMPROVEMENT = 1e-9
# Prefetch leads tried for a swapped group (and the current lead +- 1).
LEAD_LADDER = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55)


class Incumbent:
    """The current plan (mutable lists), its score and the work done; `probe`/`commit` moves.

    The incumbent only ever gets better: `commit` is called with moves whose
    probed key beat it.
    """

    def __init__(self, problem: Problem, plan: Plan, *, max_evals: int | None = None) -> None:
        self.problem = problem
        self.scorer = problem.scorer
        self.n = problem.n
        self.actions: list[Action] = list(plan.actions)
        self.prefetch: list[int | None] = list(plan.prefetch_at)
        self.wait: list[int | None] = list(plan.swap_wait)
        self.need = need_indices(self.actions)
        self.evals = 0
        self.max_evals = max_evals
        self.key = self._score()

    # -- scoring ----------------------------------------------------------------

    def _score(self) -> Key:
        self.evals += 1
        makespan, peak = self.scorer.score(self.actions, self.prefetch, self.wait)
        return (0, makespan) if self.problem.fits(peak) else (1, float(peak))

    @staticmethod
    def better(new: Key, old: Key) -> bool:
        if new[0] != old[0]:
            return new[0] < old[0]
        return new[1] < old[1] * (1 - _IMPROVEMENT)

    @property
    def feasible(self) -> bool:
        return self.key[0] == 0

    @property
    def makespan(self) -> float:
        return self.key[1]

    def out_of_work(self) -> bool:
        if self.max_evals is not None and self.evals >= self.max_evals:
            return True
        return self.problem.expired()

    def plan(self) -> Plan:
        return Plan.build(self.actions, self.prefetch, self.wait, profile=self.problem.profile)

    def lead(self, i: int) -> int | None:
        p = self.prefetch[i]
        return None if p is None else p - self.need[i]

    def wait_offset(self, i: int) -> int | None:
        w = self.wait[i]
        return None if w is None else w - i

    # -- moves ----------------------------------------------------------------------

    def _apply(self, changes: Sequence[Change]) -> tuple[dict, list[int]]:
        """Make `changes` (see the note on other swapped layers). Returns the undo and need."""
        n = self.n
        undo: dict[int, tuple[Action, int | None, int | None]] = {}
        for i, action, _, _ in changes:
            undo[i] = (self.actions[i], self.prefetch[i], self.wait[i])
            self.actions[i] = action
        need = need_indices(self.actions)
        touched = set(undo)
        for i, action, lead, offset in changes:
            if action is SWAP:
                self.prefetch[i] = min(need[i] + (lead or 0), n - 1)
                w = None if offset is None else i + offset
                self.wait[i] = w if w is not None and w <= n - 1 else None
            else:
                self.prefetch[i] = self.wait[i] = None
        # NOTE: when a swapped layer's need rises (a recompute run above it
        # grew) its copy back keeps its lead; when need falls it keeps its
        # step (issued as early as before: no new stall). Tried both ways on
        # GPT-48: keeping the lead when need falls lost most moves.
        old_need = self.need
        for j in range(n):
            if need[j] > old_need[j] and self.actions[j] is SWAP and j not in touched:
                undo[j] = (self.actions[j], self.prefetch[j], self.wait[j])
                self.prefetch[j] = min(self.prefetch[j] - old_need[j] + need[j], n - 1)
        return undo, need

    def _revert(self, undo: dict) -> None:
        for i, (a, p, w) in undo.items():
            self.actions[i], self.prefetch[i], self.wait[i] = a, p, w

    def probe(self, changes: Sequence[Change]) -> Key:
        """The key the plan would have after `changes` (the plan is left as it was)."""
        undo, _ = self._apply(changes)
        key = self._score()
        self._revert(undo)
        return key

    def commit(self, changes: Sequence[Change], key: Key) -> None:
        """Make `changes`, whose probed key is `key`."""
        _, need = self._apply(changes)
        self.need = need
        self.key = key

    def offer(self, plan: Plan) -> bool:
        """Take `plan` when it beats the incumbent (one simulation)."""
        makespan, peak = self.scorer.score_plan(plan)
        self.evals += 1
        key: Key = (0, makespan) if self.problem.fits(peak) else (1, float(peak))
        if not self.better(key, self.key):
            return False
        self.actions = list(plan.actions)
        self.prefetch = list(plan.prefetch_at)
        self.wait = list(plan.swap_wait)
        self.need = need_indices(self.actions)
        self.key = key
        return True


# -- group local search -----------------------------------------------------------------


def group_moves(inc: Incumbent, group: Sequence[int]) -> Iterable[list[Change]]:
    """Candidate moves of one group (same change to every member), in a fixed order."""
    head = group[0]
    current = inc.actions[head]
    for action in (KEEP, RECOMPUTE):
        if any(inc.actions[i] is not action for i in group):
            yield [(i, action, None, None) for i in group]
    lead = inc.lead(head) if current is SWAP else None
    offset = inc.wait_offset(head) if current is SWAP else None
    leads = list(LEAD_LADDER)
    if lead is not None:
        leads += [lead - 1, lead + 1]
    seen: set[int] = set()
    for ell in leads:
        if ell < 0 or ell in seen or ell > inc.n - 1:
            continue
        seen.add(ell)
        if current is SWAP and ell == lead and all(inc.actions[i] is SWAP for i in group):
            continue
        yield [(i, SWAP, ell, offset) for i in group]
    if current is SWAP:
        for off in (None, 1, 2):
            if off != offset:
                yield [(i, SWAP, inc.lead(i) or 0, off) for i in group]


def pair_moves(inc: Incumbent, g1: Sequence[int], g2: Sequence[int]) -> Iterable[list[Change]]:
    """Both groups change action at once (a swap keeps its lead, a new swap gets lead 1)."""
    a1, a2 = inc.actions[g1[0]], inc.actions[g2[0]]
    for b1 in (KEEP, SWAP, RECOMPUTE):
        if b1 is a1:
            continue
        for b2 in (KEEP, SWAP, RECOMPUTE):
            if b2 is a2:
                continue
            yield [*_set(inc, g1, b1), *_set(inc, g2, b2)]


def _set(inc: Incumbent, group: Sequence[int], action: Action) -> list[Change]:
    if action is SWAP:
        return [(i, SWAP, 1, None) for i in group]
    return [(i, action, None, None) for i in group]


def improve_groups(
    inc: Incumbent,
    groups: Sequence[Sequence[int]],
    pairs: Sequence[tuple[int, int]] = (),
    *,
    max_sweeps: int | None = None,
) -> bool:
    """Sweep `groups` (then the group `pairs`, by index), taking each group's best
    improving move, until a sweep improves nothing. Returns whether anything improved."""
    improved_any = False
    sweeps = 0
    while max_sweeps is None or sweeps < max_sweeps:
        sweeps += 1
        improved = False
        candidates: Iterable = (
            *((g,) for g in groups),
            *((groups[a], groups[b]) for a, b in pairs),
        )
        for item in candidates:
            if inc.out_of_work():
                return improved_any
            moves = group_moves(inc, item[0]) if len(item) == 1 else pair_moves(inc, *item)
            best: tuple[Key, list[Change]] | None = None
            for changes in moves:
                key = inc.probe(changes)
                if inc.better(key, inc.key if best is None else best[0]):
                    best = (key, changes)
                if inc.out_of_work():
                    break
            if best is not None:
                inc.commit(best[1], best[0])
                improved = improved_any = True
        if not improved:
            break
    return improved_any


# -- the registered method ---------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """A starting plan and where it came from (for the result message)."""

    plan: Plan
    source: str


def greedy_start(problem: Problem) -> tuple[Start | None, SolverOutput]:
    """The greedy's plan (the plan every search here must not lose to) and its output."""
    from solvers.pooch import pooch

    out = pooch(problem)
    if out.plan is not None:
        return Start(out.plan, "greedy"), out
    fallback = min_memory_plan(problem.profile)
    _, peak = problem.scorer.score_plan(fallback)
    if problem.fits(peak):
        return Start(fallback, "min-memory plan"), out
    return None, out


def check_max_evals(max_evals: int | None) -> int | None:
    if max_evals is None:
        return None
    if isinstance(max_evals, bool) or not isinstance(max_evals, int) or max_evals < 1:
        raise SolverOptionError(f"max_evals must be None or an integer >= 1, got {max_evals!r}")
    return max_evals


def lns(problem: Problem, *, max_evals: int | None = None) -> SolverOutput:
    """The greedy's plan improved by local search over single layers and neighbour pairs."""
    max_evals = check_max_evals(max_evals)
    start, greedy_out = greedy_start(problem)
    if start is None:
        return greedy_out
    inc = Incumbent(problem, start.plan, max_evals=max_evals)
    n = problem.n
    groups = [[i] for i in range(n - 1, -1, -1)]
    improve_groups(inc, groups)
    pairs = [(a, a + d) for d in (1, 2) for a in range(n - d)]
    improve_groups(inc, groups, pairs)
    status = Status.FEASIBLE
    return SolverOutput(
        inc.plan(),
        status,
        message=f"lns: from the {start.source}, {inc.evals} simulations",
    )


# -- exact windows on a reduced chain --------------------------------------------------


@dataclass(frozen=True)
class Reduced:
    """A short chain standing for the whole one around a window of free layers.

    `members[q]` are the full chain's layers that reduced layer `q` stands
    for (one layer, or a collapsed region); `free` are the reduced indices of
    the window, `fixed` the decisions (action, prefetch, wait in reduced
    indices) of every other reduced layer.
    """

    profile: Profile
    members: tuple[range, ...]
    free: range
    fixed: dict[int, tuple[Action, int | None, int | None]]


def _max_live(alloc, free, size, mask, t0: float, t1: float) -> int:
    """Largest total size of the masked tensors alive at one instant in [t0, t1]
    (frees before allocations at equal times, as in the spec)."""
    a = np.maximum(alloc[mask], t0)
    f = np.minimum(free[mask], t1)
    s = size[mask]
    live = (s > 0) & (f > a)
    a, f, s = a[live], f[live], s[live]
    if s.size == 0:
        return 0
    times = np.concatenate((a, f))
    delta = np.concatenate((s, -s))
    prio = np.concatenate((np.ones(s.size, dtype=np.int8), np.zeros(s.size, dtype=np.int8)))
    order = np.lexsort((prio, times))
    return int(max(0, np.cumsum(delta[order]).max()))


def _seconds(x: float) -> float:
    """A span as a valid layer time (float noise below a picosecond is zero)."""
    return x if x >= MIN_POSITIVE_SECONDS else 0.0


def reduced_chain(
    inc: Incumbent, lo: int, hi: int, *, below: int = 3, above: int = 6, chunks: int = 4
) -> Reduced:
    """The reduced chain for the window `lo .. hi-1` of the incumbent's plan.

    Kept as they are: the window, `below` layers under it and `above` layers
    over it (those fixed to the incumbent's decisions). Collapsed into one
    `keep` layer each: everything further down (`Z`), and everything further
    up in at most `chunks` consecutive regions. A collapsed region's forward
    and backward times are its spans in the incumbent's schedule (stalls
    included); its saved bytes are the most its own tensors hold at once
    between its forward and its backward, its scratch what they add during
    its forward and its backward. `Z`'s saved bytes are the most its tensors
    hold at once while the window's layers are alive.

    NOTE (what the reduction cannot see): copies of collapsed layers (they
    leave the copy engines free for the window, optimistic), stalls a
    window change would add or remove inside a collapsed region (spans are
    fixed), and collapsed regions' tensors outside their own span (their
    copy-out backlog and early prefetches are charged to their own span,
    conservative). So a window optimum is only a candidate: the full plan
    is re-scored and kept only when it fits and is faster.
    """
    n = inc.n
    profile = inc.problem.profile
    scorer = inc.scorer
    tm = scorer.timing(inc.actions, inc.prefetch, inc.wait)
    # NOTE: the simulator's own lifetimes table (one source of truth for the
    # spec's memory rules); rows are kinds x layers, so owner = row % n.
    alloc, free, size = scorer._tensors(inc.actions, tm)
    owner = np.arange(alloc.size) % n
    a0 = max(0, lo - below)
    b1 = min(n, hi + above)

    def issue(step: int) -> float:
        return tm.f_end[n - 1] if step == n - 1 else tm.b_end[step + 1]

    layers: list[Layer] = []
    members: list[range] = []
    if a0 > 0:
        mask = owner < a0
        held = _max_live(alloc, free, size, mask, tm.f_start[a0], tm.b_end[a0])
        fwd = _seconds(tm.f_end[a0 - 1])
        bwd = _seconds(tm.b_end[0] - tm.b_end[a0])
        layers.append(Layer("Z", fwd, bwd, held))
        members.append(range(0, a0))
    first_individual = len(layers)
    for i in range(a0, b1):
        layers.append(profile.layers[i])
        members.append(range(i, i + 1))
    rest = n - b1
    for c in range(min(chunks, rest)):
        x = b1 + c * rest // min(chunks, rest)
        y = b1 + (c + 1) * rest // min(chunks, rest)
        mask = (owner >= x) & (owner < y)
        f0, f1 = tm.f_start[x], tm.f_end[y - 1]
        g0, g1 = issue(y - 1), tm.b_end[x]
        held = _max_live(alloc, free, size, mask, f1, g0) if g0 > f1 else 0
        fpeak = _max_live(alloc, free, size, mask, f0, f1)
        bpeak = _max_live(alloc, free, size, mask, g0, g1)
        layers.append(
            Layer(
                f"U{c}",
                _seconds(f1 - f0),
                _seconds(g1 - g0),
                held,
                max(0, fpeak - held),
                max(0, bpeak - held),
            )
        )
        members.append(range(x, y))
    where = {}  # full index -> reduced index (a collapsed region maps all its layers)
    for q, rng in enumerate(members):
        for j in rng:
            where[j] = q
    free_r = range(first_individual + (lo - a0), first_individual + (hi - a0))
    fixed: dict[int, tuple[Action, int | None, int | None]] = {}
    for q, rng in enumerate(members):
        if q in free_r:
            continue
        if len(rng) > 1 or q < first_individual or q >= first_individual + (b1 - a0):
            fixed[q] = (KEEP, None, None)
            continue
        i = rng[0]
        action = inc.actions[i]
        if action is SWAP:
            w = inc.wait[i]
            fixed[q] = (SWAP, where[inc.prefetch[i]], None if w is None else where[w])
        else:
            fixed[q] = (action, None, None)
    reduced = profile.replace_layers(layers, name=f"{profile.name}[window {lo}..{hi - 1}]")
    return Reduced(reduced, tuple(members), free_r, fixed)


def _full_step(red: Reduced, q: int, *, wait: bool) -> int:
    """The full chain's step for reduced step `q`: a collapsed region's backward
    step is issued with its top layer's, its forward starts with its bottom layer."""
    rng = red.members[q]
    return rng[0] if wait else rng[-1]


def _fix(form, red: Reduced) -> None:
    """Pin the decision literals of every fixed reduced layer (bounds and equalities)."""
    m = form.model
    for q, (action, pf, w) in red.fixed.items():
        for act, v in ((KEEP, form.keep[q]), (SWAP, form.swap[q]), (RECOMPUTE, form.rec[q])):
            if act is not action:
                m.vars[v] = Var(m.vars[v].name, 0, 0, True)
        for j, v in form.prefetch[q].items():
            if j != pf:
                m.vars[v] = Var(m.vars[v].name, 0, 0, True)
        for j, v in form.wait[q].items():
            if j != w:
                m.vars[v] = Var(m.vars[v].name, 0, 0, True)
            else:
                m.add(Linear(Expr(((v, 1),)), 1, 1))


def window_candidate(
    inc: Incumbent,
    lo: int,
    hi: int,
    *,
    time_limit: float,
    below: int = 3,
    above: int = 6,
    chunks: int = 4,
) -> list[Change] | None:
    """Re-optimise layers `lo .. hi-1` exactly on the reduced chain; the moves that
    give the window the reduced optimum (leads and wait offsets in full-chain
    steps), or None when the solver found nothing new."""
    from solvers.cpsat import solve_cpsat
    from solvers.formulation import build, evaluate

    red = reduced_chain(inc, lo, hi, below=below, above=above, chunks=chunks)
    form = build(red.profile, inc.problem.budget)
    _fix(form, red)
    hint = None
    current = _reduced_plan(inc, red)
    if current is not None:
        hint = evaluate(form, form.decisions(current))
    result = solve_cpsat(form, time_limit=time_limit, threads=1, seed=inc.problem.seed, hint=hint)
    if result.values is None:
        return None
    plan = form.decode(lambda v: result.values[v])
    if (
        current is not None
        and plan.actions == current.actions
        and (plan.prefetch_at == current.prefetch_at and plan.swap_wait == current.swap_wait)
    ):
        return None
    actions = list(inc.actions)
    for q in red.free:
        actions[red.members[q][0]] = plan.actions[q]
    need = need_indices(actions)
    changes: list[Change] = []
    for q in red.free:
        i = red.members[q][0]
        action = plan.actions[q]
        if action is SWAP:
            step = _full_step(red, plan.prefetch_at[q], wait=False)
            w = plan.swap_wait[q]
            offset = None if w is None else _full_step(red, w, wait=True) - i
            changes.append((i, SWAP, max(0, step - need[i]), offset))
        else:
            changes.append((i, action, None, None))
    return changes


def _reduced_plan(inc: Incumbent, red: Reduced) -> Plan | None:
    """The incumbent's plan seen on the reduced chain (None if it is no valid plan there)."""
    where = {}
    for q, rng in enumerate(red.members):
        for j in rng:
            where[j] = q
    m = len(red.members)
    actions: list[Action] = [KEEP] * m
    prefetch: list[int | None] = [None] * m
    wait: list[int | None] = [None] * m
    for q, (action, pf, w) in red.fixed.items():
        actions[q], prefetch[q], wait[q] = action, pf, w
    for q in red.free:
        i = red.members[q][0]
        actions[q] = inc.actions[i]
        if inc.actions[i] is SWAP:
            prefetch[q] = where[inc.prefetch[i]]
            w = inc.wait[i]
            wait[q] = None if w is None else where[w]
    try:
        return Plan.build(actions, prefetch, wait, profile=red.profile)
    except InvalidPlanError:
        return None


def exact_window_candidate(
    inc: Incumbent,
    lo: int,
    hi: int,
    *,
    time_limit: float,
    reach: int = 16,
    waits: int = 3,
) -> list[Change] | None:
    """Re-optimise layers `lo .. hi-1` with the exact model of the *whole* chain,
    every other layer fixed to the incumbent's decisions (`formulation.Choices`).

    A window layer may prefetch at any step up to `reach` above the window (or
    where it prefetches now) and wait on any of the next `waits` forwards.
    Exact up to the model's time rounding, but its size grows with L.
    """
    from solvers.cpsat import solve_cpsat
    from solvers.formulation import Choices, build

    n = inc.n
    choices: dict[int, Choices] = {}
    for i in range(n):
        a = inc.actions[i]
        if lo <= i < hi:
            steps = set(range(i, min(n, hi + reach)))
            wsteps = set(range(i + 1, min(n, i + 1 + waits)))
            if a is SWAP:
                steps.add(inc.prefetch[i])
                if inc.wait[i] is not None:
                    wsteps.add(inc.wait[i])
            choices[i] = Choices(
                (KEEP, SWAP, RECOMPUTE), tuple(sorted(steps)), tuple(sorted(wsteps))
            )
        elif a is SWAP:
            w = inc.wait[i]
            choices[i] = Choices((SWAP,), (inc.prefetch[i],), () if w is None else (w,))
        else:
            choices[i] = Choices((a,))
    form = build(inc.problem.profile, inc.problem.budget, choices=choices)
    m = form.model
    for i in range(n):
        if not lo <= i < hi and inc.actions[i] is SWAP and inc.wait[i] is not None:
            m.add(Linear(Expr(((form.wait[i][inc.wait[i]], 1),)), 1, 1))
    current = inc.plan()
    hint = [0] * len(m.vars)
    for v, val in form.decisions(current).items():
        hint[v] = val
    result = solve_cpsat(form, time_limit=time_limit, threads=1, seed=inc.problem.seed, hint=hint)
    if result.values is None:
        return None
    plan = form.decode(lambda v: result.values[v])
    need = need_indices(plan.actions)
    changes: list[Change] = []
    for i in range(lo, hi):
        a = plan.actions[i]
        if a is SWAP:
            w = plan.swap_wait[i]
            changes.append((i, SWAP, plan.prefetch_at[i] - need[i], None if w is None else w - i))
        else:
            changes.append((i, a, None, None))
    same = all(
        plan.actions[i] is inc.actions[i]
        and plan.prefetch_at[i] == inc.prefetch[i]
        and plan.swap_wait[i] == inc.wait[i]
        for i in range(lo, hi)
    )
    return None if same else changes
