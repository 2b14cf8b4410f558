"""Improve a plan by search, every candidate scored by the simulator: the large-net engine.

The exact model does not scale to hundreds of layers and the greedy has no
quality guarantee, so big nets are planned by improving a starting plan (the
greedy's) with three neighbourhoods. Every candidate is a whole-chain plan
scored by `problem.scorer` (the one cost model) and taken only when it fits
the budget and is faster, so the result is never worse than the start.

* Group moves (`improve_groups`): set the action of a *group* of layers (one
  layer, or the same layer in several copies of a repeated block, so one
  move changes every copy at once), change the prefetch lead (`prefetch_at -
  need`) or the swap_wait of a swapped group, or change the actions of two
  groups at once (one frees memory, the other spends it). A move costs one
  simulation, O(L).
* Kicks (`kicks`): force a group to another action, re-optimise its class,
  keep the result only if it ends better (iterated local search).
* Exact windows (`exact_window`): the actions, prefetch steps and waits of
  a window of consecutive layers are re-optimised by CP-SAT on the exact
  model of the whole chain, every other layer pinned to the incumbent's
  decisions (`formulation.Choices`, which collapses their copy-back queue
  slots: the model grows with L, not L^2). The window's optimum is exact
  up to the model's time rounding; a window can also be copied to other
  copies of a repeated block (`Window.shifts`), then it is a candidate.
  Windows that find nothing double in size for the next pass, up to the
  whole chain (so on small nets the search ends in an exact solve).

NOTE (what we tried and dropped): a window model on a *reduced* chain (the
window, a few fixed neighbours, everything else collapsed into a few `keep`
layers with the incumbent's spans and memory) builds in milliseconds, but
it cannot see the collapsed layers' copies: on GPT-48 at 30% every one of
14 windows it proposed was slower in the simulator. The whole-chain model
costs about 2 s a window at 628 layers (0.5 s building, 1 s translating to
CP-SAT, 0.5 s solving); it is exact but, after the group search, rarely
finds more on nets of hundreds of layers, so it runs last.

`search` runs a method's phases in order and repeats them until a round
improves nothing or the time (or `max_evals`) runs out; without a time limit
it stops after `DEFAULT_SECONDS`. The path is deterministic (fixed move
order, single-threaded CP-SAT seeded with the problem's seed); where a limit
stops it early, the result depends on where it stopped.

NOTE (never worse than the greedy): the search starts from the greedy's plan.
Under a time limit the greedy gets half of it (`greedy_start`); when it does
not finish in that time its partly-improved plan (which fits) is the start,
so on the biggest nets the guarantee is against the greedy stopped at half
the limit.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from planopt.budget import min_memory_plan
from planopt.errors import SolverOptionError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan, need_indices
from planopt.problem import Problem
from planopt.result import SolverOutput, Status
from solvers.formulation import Expr, Linear

# (layer, action, lead, wait offset): for a swap, prefetch_at = need + lead
# (capped at L-1) and swap_wait = layer + offset (None: no wait).
Change = tuple[int, Action, int | None, int | None]
Key = tuple[int, float]  # (0, makespan) when the plan fits the budget, else (1, peak)

# A move must shorten the makespan by more than this fraction to count.
_IMPROVEMENT = 1e-9
# The search's time when the problem has no limit (it stops earlier when converged).
DEFAULT_SECONDS = 60.0
# What the LP relaxation takes to build and solve, per layer (GPT-48/96 measured).
LP_SECONDS_PER_LAYER = 3e-3
# An exact window's swaps may wait for their copy out at any of this many
# forwards after their own (a window over the whole chain: any forward).
WINDOW_WAITS = 3
# Prefetch leads tried for a swapped group (and the current lead +- 1).
LEAD_LADDER = (0, 1, 2, 3, 5, 8, 13, 21, 34, 55)


@dataclass(frozen=True)
class Snapshot:
    """A saved incumbent (see `Incumbent.force`)."""

    actions: tuple[Action, ...]
    prefetch: tuple[int | None, ...]
    wait: tuple[int | None, ...]
    need: tuple[int, ...]
    key: Key


class Incumbent:
    """The current plan (mutable lists), its score and the work done; `probe`/`commit` moves.

    The incumbent only gets better: `commit` is called with moves whose probed
    key beat it. The one exception is a kick (`force`), which the caller undoes
    with `restore` unless the search it starts ends better than the snapshot.
    """

    def __init__(
        self,
        problem: Problem,
        plan: Plan,
        *,
        max_evals: int | None = None,
        target: float | None = None,
        patience: float | None = None,
    ) -> None:
        self.problem = problem
        self.target = target  # stop once a fitting plan is this fast (a known lower bound)
        self.patience = patience  # stop after this many seconds without a new best plan
        # NOTE: without a time limit the search still stops: converged, or
        # after DEFAULT_SECONDS (an anytime method needs some end).
        self.deadline = (
            problem.deadline if problem.deadline is not None else time.monotonic() + DEFAULT_SECONDS
        )
        self.scorer = problem.scorer
        self.n = problem.n
        self.actions: list[Action] = list(plan.actions)
        self.prefetch: list[int | None] = list(plan.prefetch_at)
        self.wait: list[int | None] = list(plan.swap_wait)
        self.need = need_indices(self.actions)
        self.evals = 0
        self.windows = 0
        self.max_evals = max_evals
        self.key = self._score()
        self.best_key = self.key
        self.improved_at = time.monotonic()

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
        if self.target is not None and self.key[0] == 0 and self.key[1] <= self.target:
            return True
        if self.patience is not None and time.monotonic() - self.improved_at > self.patience:
            return True
        return time.monotonic() >= self.deadline

    def time_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

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
        self._note_best()

    def _note_best(self) -> None:
        if self.better(self.key, self.best_key):
            self.best_key = self.key
            self.improved_at = time.monotonic()

    def force(self, changes: Sequence[Change]) -> None:
        """Make `changes` whatever they cost (a kick); `snapshot`/`restore` undo it."""
        _, need = self._apply(changes)
        self.need = need
        self.key = self._score()

    def snapshot(self) -> Snapshot:
        return Snapshot(
            tuple(self.actions), tuple(self.prefetch), tuple(self.wait), tuple(self.need), self.key
        )

    def restore(self, snap: Snapshot) -> None:
        self.actions, self.prefetch = list(snap.actions), list(snap.prefetch)
        self.wait, self.need, self.key = list(snap.wait), list(snap.need), snap.key

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
        self._note_best()
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


# -- exact windows ------------------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """Layers `lo .. hi-1` to re-optimise exactly; the moves found are also made
    at each offset in `shifts` (other copies of a repeated block). `shifts ==
    (0,)` means the window alone: then the model's plan is taken as it is."""

    lo: int
    hi: int
    shifts: tuple[int, ...] = (0,)


def exact_window(
    inc: Incumbent,
    window: Window,
    *,
    time_limit: float,
    reach: int = 16,
    waits: int = WINDOW_WAITS,
) -> bool:
    """Re-optimise `window` with the exact whole-chain model; True when the incumbent improved.

    A window layer may prefetch at any step up to `reach` above the window (or
    where it prefetches now) and wait for its copy out at any of the next
    `waits` forwards; every other layer keeps the incumbent's decisions.
    """
    from solvers.cpsat import solve_cpsat
    from solvers.formulation import Choices, build

    n, lo, hi = inc.n, window.lo, window.hi
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
    for i in range(n):
        w = inc.wait[i]
        if not lo <= i < hi and inc.actions[i] is SWAP and w is not None:
            form.model.add(Linear(Expr(((form.wait[i][w], 1),)), 1, 1))  # pin the wait
    hint = [0] * len(form.model.vars)  # CP-SAT is hinted the decisions only
    for v, val in form.decisions(inc.plan()).items():
        hint[v] = val
    result = solve_cpsat(form, time_limit=time_limit, threads=1, seed=inc.problem.seed, hint=hint)
    inc.windows += 1
    if result.values is None:
        return False
    plan = form.decode(lambda v: result.values[v])
    if all(
        plan.actions[i] is inc.actions[i]
        and plan.prefetch_at[i] == inc.prefetch[i]
        and plan.swap_wait[i] == inc.wait[i]
        for i in range(lo, hi)
    ):
        return False
    if window.shifts == (0,):
        return inc.offer(plan)
    need = need_indices(plan.actions)
    changes: list[Change] = []
    for shift in window.shifts:
        for i in range(lo, hi):
            a = plan.actions[i]
            if a is SWAP:
                w = plan.swap_wait[i]
                lead, off = plan.prefetch_at[i] - need[i], None if w is None else w - i
                changes.append((i + shift, SWAP, lead, off))
            else:
                changes.append((i + shift, a, None, None))
    key = inc.probe(changes)
    if inc.better(key, inc.key):
        inc.commit(changes, key)
        return True
    return False


# -- the driver ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Level:
    """One resolution of the group search: its groups, the group pairs tried
    together, and its classes (group indices re-optimised together after a kick)."""

    name: str
    groups: list[list[int]]
    pairs: list[tuple[int, int]] = field(default_factory=list)
    classes: list[list[int]] = field(default_factory=list)


def layer_level(n: int, reach: int = 2, chunk: int = 8) -> Level:
    """Every layer its own group, top layer first; pairs of layers at most `reach`
    apart; classes of `chunk` consecutive layers."""
    groups = [[i] for i in range(n - 1, -1, -1)]
    pairs = [(a, a + d) for d in range(1, reach + 1) for a in range(n - d)]
    classes = [list(range(c, min(n, c + chunk))) for c in range(0, n, chunk)]
    return Level("layers", groups, pairs, classes)


def sliding_windows(n: int, size: int) -> list[Window]:
    """Windows of `size` layers from the top of the chain down, overlapping by half."""
    if n <= size:
        return [Window(0, n)]
    stride = max(1, size // 2)
    starts = list(range(n - size, -1, -stride))
    if starts[-1] != 0:
        starts.append(0)
    return [Window(s, s + size) for s in starts]


def kicks(inc: Incumbent, level: Level, *, min_members: int = 1) -> bool:
    """Iterated local search: force one group to another action (a *kick*, which may
    break the budget), re-optimise the group's class (two sweeps), keep the result
    when it beats the incumbent from before the kick. Escapes optima that need
    several groups to change at once (GPT-48 at 50%, before the block options
    existed: 9.4% -> 6.6% overhead), but costs a few hundred simulations a kick,
    so it runs after the cheaper phases. Only classes whose groups have at least
    `min_members` layers are kicked."""
    improved = False
    for cls in level.classes:
        groups = [level.groups[g] for g in cls]
        if min(len(g) for g in groups) < min_members:
            continue
        for group in groups:
            for action in (KEEP, SWAP, RECOMPUTE):
                if inc.out_of_work():
                    return improved
                if all(inc.actions[i] is action for i in group):
                    continue
                saved = inc.snapshot()
                inc.force(_set(inc, group, action))
                improve_groups(inc, groups, max_sweeps=2)
                if inc.better(inc.key, saved.key):
                    improved = True
                else:
                    inc.restore(saved)
    return improved


Phase = tuple[str, Callable[[Incumbent], bool]]


def level_phases(level: Level) -> list[Phase]:
    """Single moves, then pair moves, of one level."""
    out: list[Phase] = [(level.name, lambda inc: improve_groups(inc, level.groups))]
    if level.pairs:
        out.append(
            (level.name + " pairs", lambda inc: improve_groups(inc, level.groups, level.pairs))
        )
    return out


def kick_phase(level: Level, *, min_members: int = 1) -> Phase:
    return (level.name + " kicks", lambda inc: kicks(inc, level, min_members=min_members))


def window_phase(
    windows: Callable[[int], Sequence[Window]], size: int, n: int, window_seconds: float
) -> Phase:
    """Exact windows of `size` layers (`windows(size)`), each given at most
    `window_seconds`; when a whole pass improves nothing, the size doubles for
    the next pass (up to the whole chain), so a net of a few dozen layers ends
    in windows that hold all of it."""
    sizes = [size]
    while sizes[-1] < n:
        sizes.append(min(n, 2 * sizes[-1]))

    def run(inc: Incumbent) -> bool:
        for current in sizes:
            improved = False
            for window in windows(current):
                if inc.out_of_work():
                    return improved
                limit = min(window_seconds, inc.time_left())
                if limit <= 0.05:
                    return improved
                # A window over the whole chain is the whole plan space: any wait.
                waits = n if current >= n else WINDOW_WAITS
                improved |= exact_window(inc, window, time_limit=limit, waits=waits)
            if improved:
                return True
        return False

    return ("exact windows", run)


@dataclass
class Report:
    """What `search` did, for the result message."""

    rounds: int = 0
    improved_by: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    converged: bool = False

    def note(self, what: str) -> None:
        self.improved_by[what] = self.improved_by.get(what, 0) + 1


def search(inc: Incumbent, phases: Sequence[Phase]) -> Report:
    """Run the phases in order; again until a whole round improves nothing
    (converged) or the limits stop it."""
    report = Report()
    while not inc.out_of_work():
        report.rounds += 1
        improved = False
        for name, phase in phases:
            if inc.out_of_work():
                break
            began = time.monotonic()
            if phase(inc):
                improved = True
                report.note(name)
            report.seconds[name] = report.seconds.get(name, 0.0) + time.monotonic() - began
        if not improved:
            report.converged = not inc.out_of_work()
            break
    return report


# -- shared by the methods ---------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """A starting plan and where it came from (for the result message)."""

    plan: Plan
    source: str


def greedy_start(problem: Problem, share: float = 0.5) -> tuple[Start | None, SolverOutput]:
    """The greedy's plan (the plan every search here must not lose to) and its output.

    Under a time limit the greedy gets at most `share` of the time left: on
    the biggest nets it would take it all (GPT-96 at 30%: 5.9 s), and the
    search improves a partly-improved greedy plan faster than the greedy
    finishes. Such a plan still fits the budget (the greedy keeps it fitting
    at every step); the message says the greedy was stopped. The best of it,
    sqrt-n's plan and the minimum-memory plan (which fits every budget >=
    min_budget when every time is positive) is the start.
    """
    from solvers.baselines import sqrt_n
    from solvers.pooch import pooch

    left = problem.time_left()
    limited = problem
    if left is not None:
        limited = dataclasses.replace(problem, deadline=time.monotonic() + share * left)
    out = pooch(limited)
    candidates: list[Start] = []
    if out.plan is not None:
        stopped = "time limit reached" in out.message
        candidates.append(
            Start(out.plan, "greedy (stopped by its time share)" if stopped else "greedy")
        )
    fallback = min_memory_plan(problem.profile)
    candidates.append(Start(fallback, "minimum-memory plan"))
    # NOTE: on 1,252 layers under load the greedy did not finish in its share
    # of a 4.5 s limit and its partial plan was 267% over T_ideal; sqrt-n
    # (0.1 s there) bounds how bad the start can be.
    chen = sqrt_n(problem).plan
    if chen is not None:
        candidates.append(Start(chen, "sqrt-n plan"))
    best: tuple[float, Start] | None = None
    for cand in candidates:
        makespan, peak = problem.scorer.score_plan(cand.plan)
        if problem.fits(peak) and (best is None or makespan < best[0]):
            best = (makespan, cand)
    return (None if best is None else best[1]), out


def relaxation_lower_bound(
    problem: Problem, share: float = 0.1, *, cap: float | None = None, relax: bool = True
) -> float | None:
    """The relaxation's bound (`planopt.lower_bound`, as an LP by default), given at
    most `share` of the time left and at most `cap` seconds (T_ideal when the LP
    does not finish in time; a MIP cut short gives its proven bound)."""
    from solvers.relaxation import relaxation_bound

    left = problem.time_left()
    limit = None if left is None else max(0.05, share * left)
    if cap is not None:
        limit = cap if limit is None else max(0.05, min(limit, cap))
    if relax and limit is not None and limit < LP_SECONDS_PER_LAYER * problem.n:
        # NOTE: building the LP takes ~3 ms a layer whatever its time limit
        # (GPT-96, 1,252 layers: 3.8 s to the bound); a share that cannot
        # cover it gave only T_ideal and starved the search. Say T_ideal at once.
        return problem.profile.t_ideal
    return relaxation_bound(problem.profile, problem.budget, time_limit=limit, relax=relax)


def check_options(
    max_evals: int | None, window: int, window_seconds: float
) -> tuple[int | None, int, float]:
    """Validate the options the search methods share."""
    if max_evals is not None and (
        isinstance(max_evals, bool) or not isinstance(max_evals, int) or max_evals < 1
    ):
        raise SolverOptionError(f"max_evals must be None or an integer >= 1, got {max_evals!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise SolverOptionError(
            f"window must be an integer >= 0 (layers; 0: no exact windows), got {window!r}"
        )
    if (
        isinstance(window_seconds, bool)
        or not isinstance(window_seconds, int | float)
        or not window_seconds > 0
    ):
        raise SolverOptionError(f"window_seconds must be a number > 0, got {window_seconds!r}")
    return max_evals, window, float(window_seconds)


def finish(
    name: str, inc: Incumbent, start: Start, report: Report, bound: float | None, detail: str
) -> SolverOutput:
    """The method's output: the incumbent (it fits: it started from a plan that fits)."""
    moves = ", ".join(f"{k} {v}" for k, v in report.improved_by.items()) or "none"
    state = "converged" if report.converged else "stopped by the limit"
    message = (
        f"{name}: {detail}; from the {start.source}, {report.rounds} rounds ({state}), "
        f"{inc.evals} simulations, {inc.windows} exact windows; improving moves: {moves}"
    )
    return SolverOutput(inc.plan(), Status.FEASIBLE, bound, message)


def lns(
    problem: Problem,
    *,
    window: int = 8,
    window_seconds: float = 2.0,
    max_evals: int | None = None,
    lower_bound: bool = True,
) -> SolverOutput:
    """The greedy's plan improved by layer moves, kicks and exact windows of `window` layers.

    `window=0` turns the exact windows off; `max_evals` caps the simulations
    (a work limit independent of the clock); `lower_bound` reports the LP
    relaxation's bound.
    """
    max_evals, window, window_seconds = check_options(max_evals, window, window_seconds)
    start, greedy_out = greedy_start(problem)
    if start is None:
        return greedy_out
    bound = relaxation_lower_bound(problem) if lower_bound else None
    inc = Incumbent(problem, start.plan, max_evals=max_evals)
    report = search(inc, layer_phases(problem.n, window, window_seconds))
    return finish("lns", inc, start, report, bound, f"{problem.n} layers")


def layer_phases(n: int, window: int, window_seconds: float) -> list[Phase]:
    """The phases of the plain layer search (no repeated blocks)."""
    level = layer_level(n)
    phases = level_phases(level)
    if window:
        phases.append(
            window_phase(lambda size: sliding_windows(n, size), window, n, window_seconds)
        )
    return [*phases, kick_phase(level)]
