"""PoocH, the published greedy (Ito et al., IPSJ SIG-HPC 2018; PPoPP 2019
poster; arXiv:1907.05013): keep vs swap, then swap vs recompute, then
prefetch timing, every candidate scored by our simulator.

NOTE (what follows the published method, as the project's issue states it
from the paper and the authors' Chainer code, and what is our reading; we
could not consult the paper's full text ourselves):

* Stage 1, keep vs swap (published): start from swapping everything; give
  memory back to `keep` while the budget holds, first to the tensors whose
  copy out made the forward wait, latest first, stopping at the first that
  does not fit; then to every other tensor in reverse forward order,
  skipping those that do not fit. No time comparison. Our reading of "made
  the forward wait": in our model the forward waits on a copy only through
  swap_wait, so a copy out counts as exposed when it is still running at the
  end of the next forward (`out_end[i] > f_end[i+1]`, the instant PoocH's
  forward would have had to wait for that memory), or when it delayed a
  forward through its swap_wait. The set is read once from the starting
  plan's schedule, as PoocH reads it from its all-swap profiling run.
* Stage 2, swap vs recompute (published): for each swapped tensor, swap cost
  = the makespan it adds (makespan minus makespan with its copies free) and
  recompute cost = the compute it would add (its forward time: merging it
  into a recompute run adds exactly `fwd_i` to the recomputed work),
  infinite when recomputing breaks the budget. Tensors with swap cost 0 or
  ratio recompute/swap >= 1 are dropped for good; the smallest ratio is
  turned into recompute; the rest are re-scored; repeat. Our reading: the
  budget is checked only for candidates with ratio < 1, in ratio order, and
  one that breaks it is dropped for good (its ratio is infinite); ties go to
  the lower layer index. All probes of a round are one batched pass
  (`solvers.scoring.free_copy_makespans`). Option `retry_over_budget=True`
  (ours) instead tries such a candidate again in later rounds: recomputing
  others changes memory, and dropping it can leave a large copy exposed
  (experiments/results/solver_time.md shows the effect).
* Stage 3, prefetch timing (published: issue each copy back as early as
  memory allows, then as late as it can go without exposing its transfer).
  Our reading: (a) in order of need, move each copy back to the earliest
  step that fits the budget, never ahead of the copy needed before it (the
  H2D queue stays in order of need); the search gallops down from the
  earliest allowed step, so it finds a fitting step, not always the earliest
  one when fitting is not monotone; (b) with the makespan `T` so reached, in
  reverse order of need move each copy back as late as it goes with
  makespan <= `T` and the budget held, starting from the step the schedule
  says its transfer can still be hidden behind.
* Stage 4, memory fallback (ours; PoocH's forward simply waits at run time
  for a copy to free memory): when all-swap does not fit, we start from
  `planopt.min_memory_plan` (every forward waits for the copy out below it,
  every copy back is issued at the step that needs it; its peak is exactly
  `min_budget` when every time is positive, so any budget >= min_budget is
  met; with zero-time layers we also try keep-all before giving up) and take
  back what the budget does not need: first each just-in-time copy back
  becomes one step ahead, then each swap_wait is removed, latest layer
  first, skipping those that would break the budget. Stages 1-3 then start
  from that plan, and before stage 3 the waits that stages 1-2 made unneeded
  are removed again, and each one left is moved as late as the budget
  allows (without a wait, or with a later one, the forward only starts
  earlier). In stage 2, a recompute that breaks the budget is tried again
  with stage 4's waits on the other swapped layers, since PoocH's runtime
  would make the forward wait for those copies out (our reading; dropped for
  good without them, it left swaps worth 154.8% over T_ideal on the roofline
  ResNet-50 at 50% once its forward times were corrected, where a waiting
  forward gives 57.8%); the added waits the budget does not need are removed
  and the rest moved as late as it allows.

Cost model v2 (our reading): the paper decides per *tensor*; in v2 a layer
owns its products (its output and its internals), and every stage decides
them together, as one action per layer, the same unit the spec's plan has.
A swap copies what has a backward reader (`c_i`, which grows when the layer
above becomes recompute: stage 2's swap cost is re-measured every round, so
it sees that), and "the compute a recomputation adds" stays `fwd_i` (a
block moved to `B_{t+1}` adds no compute). Stage 1's lower bound counts a
kept layer's internals and its output when a backward always reads it.

Speed (ours, same choices): "skip those that do not fit" passes try
candidates in blocks that grow while they fit (`_Greedy.accept_each`),
"stop at the first that does not fit" bisects (`accept_prefix`); both take
exactly what one-at-a-time would when fitting is monotone in the set of
changes. Stage 1 skips the simulation of a keep whose kept bytes alone exceed
the budget (`keeps_cannot_fit`, a proven lower bound).

Determinism: every loop runs in layer order (ties by layer index). The time
and work limits are checked between candidates; on expiry the current plan,
which fits the budget at every step, is returned. The time limit (the clock
alone, never the work: a work-limited run takes the same steps anywhere) is
also looked at inside each simulation and every `STOP_EVERY` layers of the
greedy's own passes over the chain, since at 10^6 layers one simulation
takes seconds (issue 16): a check cut short undoes its candidate change, so
the plan returned is still the last one that fitted; cut short before any
plan fitted (keep-all, all-swap and the stage-4 plan are each one
simulation), the greedy answers `Status.TIMEOUT` with no plan.

Cost model v3 (ours): on a profile with menus, stage 5 runs after stage 3
(`solvers.pooch_menus` states its rule): each layer left swapped or
recomputed whole is offered its menu's options, cheapest regeneration first.

NOTE (size): one published algorithm whose four stages share one working
plan and one set of acceptance helpers; this header's "published vs our
reading" notes are the reason to keep them in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from planopt.errors import SolverOptionError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan, need_indices
from planopt.problem import Problem
from planopt.result import SolverOutput, Status
from planopt.runnable import repair
from planopt.simulate import STOP_EVERY, SimulationStopped, Timing
from solvers.baselines import all_swap_actions
from solvers.pooch_menus import take_options
from solvers.scoring import free_copy_makespans

# One vectorised pass of `free_copy_makespans` with k candidates, in simulations of
# the chain: measured (issue 25) at L * (2.1 us + 2.8 ns * k) of CPU against a
# simulation's ~1.1 us a layer (L = 300-2000, k = 57-373 on average), i.e. two
# simulations plus one per ~360 probes. The old charge (1 + k/16) counted the
# probes 20x too dear, so the greedy's unit cost 0.15-0.34 CPU-seconds.
VECTOR_PASS_SIMULATIONS = 2.0
PROBES_PER_SIMULATION = 360.0

# A swap cost at or below this fraction of the makespan counts as zero.
_ZERO_COST = 1e-12


@dataclass
class _Work:
    """The plan being improved, as mutable lists (the scorer's input form)."""

    actions: list[Action]
    prefetch: list[int | None]
    wait: list[int | None]
    options: list[str | None] | None = None  # cost model v3: each layer's option

    def lists(self):
        return self.actions, self.prefetch, self.wait

    def swapped(self) -> list[int]:
        return [i for i, a in enumerate(self.actions) if a is SWAP]


@dataclass
class _Log:
    """What each stage did, for the result's message."""

    stage4: bool = False
    kept: int = 0
    recomputed: int = 0
    moved: int = 0
    options: int = 0


_Change = Callable[[int], Callable[[], None]]
"""Makes one change to the working plan and returns the function that undoes it."""


class _NoPlan(Exception):
    """No plan found within the budget; the message says why."""


class _Expired(Exception):
    """The time or work limit passed; the last plan that fitted is returned."""


class _Greedy:
    def __init__(self, problem: Problem, *, retry_over_budget: bool = False) -> None:
        self.problem = problem
        self.retry_over_budget = retry_over_budget
        self.scorer = problem.scorer
        self.n = problem.n
        self.log = _Log()
        # Whether the working plan fits the budget (false until the start finds one).
        self.found = False

    # -- scoring helpers ------------------------------------------------------

    def tick(self) -> None:
        if self.problem.expired():
            raise _Expired

    def out_of_time(self, done: int) -> None:
        """Inside a long pass: every STOP_EVERY items, stop once past the deadline."""
        if done and done % STOP_EVERY == 0 and self.problem.out_of_time():
            raise _Expired

    def score(self, w: _Work) -> tuple[float, int]:
        try:
            return self.scorer.score(*w.lists(), stop=self.problem.out_of_time, options=w.options)
        except SimulationStopped:
            raise _Expired from None

    def fits(self, w: _Work) -> bool:
        return self.problem.fits(self.score(w)[1])

    def fits_or_undo(self, w: _Work, undo: Callable[[], None]) -> bool:
        """Whether `w` fits; `undo()` when it does not or the limit cuts the check short."""
        ok = False
        try:
            ok = self.fits(w)
        finally:
            if not ok:
                undo()
        return ok

    def timing(self, w: _Work) -> Timing:
        try:
            return self.scorer.timing(*w.lists(), stop=self.problem.out_of_time)
        except SimulationStopped:
            raise _Expired from None

    def accept_each(
        self,
        w: _Work,
        items: list[int],
        change: _Change,
        cannot_fit: Callable[[list[int]], bool] | None = None,
    ) -> int:
        """Make `change(i)` for each item in order, skipping those that break the budget.

        Items are tried in blocks whose size doubles after a block fits and
        halves after one does not (down to one item, which is then skipped).
        When fitting is monotone in the set of changes this takes exactly what
        one-at-a-time would, in fewer simulations when long runs fit.
        `cannot_fit(block)`, when given, is a cheap lower-bound test that
        skips the simulation of a block that surely breaks the budget.
        """
        taken, k, size = 0, 0, 1
        while k < len(items):
            self.tick()
            part = items[k : k + size]
            if cannot_fit is not None and cannot_fit(part):
                ok = False
            else:
                undos = [change(i) for i in part]

                def undo_all(undos=undos) -> None:
                    for undo in reversed(undos):
                        undo()

                ok = self.fits_or_undo(w, undo_all)
            if ok:
                taken += len(part)
                k += len(part)
                size *= 2
            elif size > 1:
                size //= 2
            else:
                k += 1
        return taken

    def accept_prefix(self, w: _Work, items: list[int], change: _Change) -> int:
        """Make `change(i)` for items in order, stopping at the first that breaks the budget.

        The cut is found by bisection (exact when fitting is monotone in the prefix).
        """
        undos: list[Callable[[], None]] = []

        def set_prefix(k: int) -> None:
            while len(undos) > k:
                undos.pop()()
            while len(undos) < k:
                self.out_of_time(len(undos))
                undos.append(change(items[len(undos)]))

        good, bad = 0, len(items) + 1
        probe = len(items)
        while bad - good > 1:
            set_prefix(good)  # a plan that fits, should the time limit stop us here
            self.tick()
            try:
                set_prefix(probe)
                ok = self.fits(w)
            except _Expired:
                set_prefix(good)
                raise
            if ok:
                good = probe
            else:
                bad = probe
            probe = (good + bad) // 2
        set_prefix(good)
        return good

    # -- start and stage 4 ---------------------------------------------------

    def start(self, w: _Work) -> None:
        """Leave all-swap (`w`) when it fits, else make `w` the stage-4 plan.

        Where layers change their input in place, all-swap is first mended to
        keep the in-place rule (`planopt.runnable.repair`: the layers it needs
        kept), so that every plan the stages try from it can run.
        """
        n = self.n
        mended = repair(self.problem.profile, w.actions, w.prefetch, w.wait, w.options)
        w.actions[:], w.prefetch[:], w.wait[:] = mended[:3]
        if self.fits(w):
            self.found = True
            return
        # Stage 4: the minimum-memory plan, then take back what the budget allows.
        # Copies back just in time: at need(i), which v2 puts at i + 1 when
        # layer i + 1 reads its input.
        need = need_indices(w.actions, self.problem.profile)
        for i in w.swapped():
            w.prefetch[i] = need[i]
            w.wait[i] = i + 1
        if not self.fits(w):
            self.fallback(w)
            self.found = True
            return
        self.found = True
        self.log.stage4 = True

        def ahead(i: int) -> Callable[[], None]:
            w.prefetch[i] = need[i] + 1
            return lambda: w.prefetch.__setitem__(i, need[i])

        self.accept_each(w, [i for i in reversed(w.swapped()) if need[i] + 1 <= n - 1], ahead)
        self.drop_waits(w)

    def fallback(self, w: _Work) -> None:
        """min_memory_plan misses a budget >= min_budget only where min_budget is a
        lower bound (zero-time layers, or a v2 copy back holding more than its first
        reader reads); keep-all, whose tensors zero-time layers can make vanish, is
        the one other plan we try. Finding none proves nothing: `no plan found`."""
        n = self.n
        min_peak = self.score(w)[1]
        w.actions[:], w.prefetch[:], w.wait[:] = [KEEP] * n, [None] * n, [None] * n
        if not self.fits(w):
            raise _NoPlan(
                f"pooch: found no plan within the budget {self.problem.budget:.0f} bytes: "
                f"the minimum-memory plan peaks at {min_peak} bytes and keep-all does not "
                f"fit either"
            )

    def drop_waits(self, w: _Work, layers: list[int] | None = None, late: bool = False) -> None:
        """Remove every swap_wait the budget does not need, latest layer first; with
        `late`, move each one left as late as the budget allows (`wait_late`).

        Without a wait (or with a later one) the forward only starts earlier, so
        no time is lost. `layers`: only these layers' waits (default: all).
        """

        def no_wait(i: int) -> Callable[[], None]:
            old = w.wait[i]
            w.wait[i] = None
            return lambda: w.wait.__setitem__(i, old)

        mine = w.swapped() if layers is None else sorted(layers)
        mine = [i for i in reversed(mine) if w.actions[i] is SWAP and w.wait[i] is not None]
        self.accept_each(w, mine, no_wait)
        if late:
            for i in mine:
                if w.wait[i] is not None:
                    self.wait_late(w, i)

    def wait_late(self, w: _Work, i: int) -> None:
        """Move layer `i`'s swap_wait to the latest forward step found that keeps the
        budget (bisection above the current one, which fits): PoocH's forward waits
        for a copy out only when memory runs short, and a later wait starts the
        forwards between earlier, so it never costs time."""
        good, bad = w.wait[i], self.n
        while bad - good > 1:
            self.tick()
            mid = (good + bad) // 2
            w.wait[i] = mid
            if self.fits_or_undo(w, lambda good=good: w.wait.__setitem__(i, good)):
                good = mid
            else:
                bad = mid
        w.wait[i] = good

    # -- stage 1 ---------------------------------------------------------------

    def exposed(self, w: _Work) -> list[int]:
        """Swapped tensors whose copy out made (or would make) the forward wait."""
        tm = self.timing(w)
        n = self.n
        out = []
        for k, i in enumerate(w.swapped()):
            self.out_of_time(k)
            late = i + 1 < n and tm.out_end[i] > tm.f_end[i + 1]
            j = w.wait[i]
            waited = j is not None and tm.out_end[i] > tm.f_end[j - 1]
            if late or waited:
                out.append(i)
        return out

    def stage1(self, w: _Work) -> None:
        def keep(i: int) -> Callable[[], None]:
            old = (w.prefetch[i], w.wait[i])
            w.actions[i], w.prefetch[i], w.wait[i] = KEEP, None, None

            def undo() -> None:
                w.actions[i] = SWAP
                w.prefetch[i], w.wait[i] = old

            return undo

        self.log.kept += self.accept_prefix(w, sorted(self.exposed(w), reverse=True), keep)
        self.log.kept += self.accept_each(
            w, list(reversed(w.swapped())), keep, self.keeps_cannot_fit(w)
        )

    def keeps_cannot_fit(self, w: _Work) -> Callable[[list[int]], bool] | None:
        """A lower bound for keeping more: every kept tensor is live at once.

        When the highest kept layer `k` allocates (start of `F_k`), no kept
        tensor has been freed yet (frees come at the end of backward steps,
        after `F_k` ends); with `fwd_k > 0` that instant is strictly before
        any such free, so the peak is at least static + all kept bytes. Used
        only when every forward time is positive (zero-time layers would
        allow a free at that very instant).
        """
        if min(self.scorer.fwd) <= 0:
            return None
        # What a kept layer surely holds then: its internals, and its output when a
        # backward reads it whatever the plan (a block above may add a reader: then
        # the bound is lower than it could be, still a bound).
        size = [
            s + (o if read else 0)
            for s, o, read in zip(
                self.scorer.internals, self.scorer.out, self.scorer.out_read_always, strict=True
            )
        ]
        static = self.scorer.static

        def cannot_fit(part: list[int]) -> bool:
            kept = sum(s for s, a in zip(size, w.actions, strict=True) if a is KEEP)
            return not self.problem.fits(static + kept + sum(size[i] for i in part))

        return cannot_fit

    # -- stage 2 ---------------------------------------------------------------

    def to_recompute(self, w: _Work, i: int) -> bool:
        """Recompute `i` (see `recompute_as_is`); when that breaks the budget, try it
        again with the forward waiting for the copies out still in flight, as
        PoocH's runtime does when memory runs short: every other swapped layer
        without a wait gets stage 4's (`F_{j+1}` waits for the copy out of `j`);
        the added waits the budget does not need are then removed and the rest
        moved as late as it allows (`drop_waits`). Without this, a recompute
        that fits once the forward waits was dropped for good, and the swaps
        left beside it cost far more (issue: on the roofline ResNet-50 at 50%,
        154.8% over T_ideal where it now finds 57.8%).
        """
        saved = (list(w.actions), list(w.prefetch), list(w.wait))
        if self.recompute_as_is(w, i):
            return True
        added = [j for j in w.swapped() if j != i and w.wait[j] is None and j + 1 < self.n]
        if not added:
            return False
        for j in added:
            w.wait[j] = j + 1
        if not self.recompute_as_is(w, i):
            w.actions, w.prefetch, w.wait = (list(x) for x in saved)
            return False
        self.drop_waits(w, added, late=True)
        return True

    def recompute_as_is(self, w: _Work, i: int) -> bool:
        """Recompute `i`, moving the copy back of the run's base to keep its lead."""
        self.tick()
        profile = self.problem.profile
        old_need = need_indices(w.actions, profile)
        saved = (list(w.actions), list(w.prefetch), list(w.wait))
        w.actions[i], w.prefetch[i], w.wait[i] = RECOMPUTE, None, None
        need = need_indices(w.actions, profile)
        for j in range(i - 1, -1, -1):
            if w.actions[j] is not RECOMPUTE:
                if w.actions[j] is SWAP and w.prefetch[j] < need[j]:
                    lead = w.prefetch[j] - old_need[j]
                    w.prefetch[j] = min(need[j] + lead, self.n - 1)
                break

        def undo() -> None:
            w.actions, w.prefetch, w.wait = saved

        return self.fits_or_undo(w, undo)

    def stage2(self, w: _Work) -> None:
        fwd = self.scorer.fwd
        candidates = w.swapped()
        while candidates:
            self.tick()
            self.scorer.charge(VECTOR_PASS_SIMULATIONS + len(candidates) / PROBES_PER_SIMULATION)
            try:
                makespan, free = free_copy_makespans(
                    self.scorer.base, *w.lists(), candidates, stop=self.problem.out_of_time
                )
            except SimulationStopped:
                raise _Expired from None
            ranked = []
            for c, t_free in zip(candidates, free.tolist(), strict=True):
                swap_cost = makespan - t_free
                if swap_cost <= _ZERO_COST * makespan or fwd[c] >= swap_cost:
                    continue  # dropped for good
                ranked.append((fwd[c] / swap_cost, c))
            ranked.sort()
            chosen = None
            for k, (_, c) in enumerate(ranked):
                if self.to_recompute(w, c):
                    chosen = k
                    break
            if chosen is None:
                return
            self.log.recomputed += 1
            # Those that broke the budget (ranked before the chosen one) are
            # dropped for good unless `retry_over_budget`.
            keep_from = 0 if self.retry_over_budget else chosen + 1
            candidates = sorted(
                c for k, (_, c) in enumerate(ranked) if k >= keep_from and k != chosen
            )

    # -- stage 3 ---------------------------------------------------------------

    def stage3(self, w: _Work) -> None:
        n = self.n
        # The waits (stage 4's, stage 2's) that stages 1-2 no longer need, and the
        # rest as late as the budget allows.
        self.drop_waits(w, late=True)
        swaps = w.swapped()
        need = need_indices(w.actions, self.problem.profile)
        # (a) as early as memory allows, in order of need (highest index first).
        ceiling = n - 1
        for i in reversed(swaps):
            cur = w.prefetch[i]
            best = self._gallop_down(w, i, cur, ceiling)
            if best != cur:
                self.log.moved += 1
            ceiling = w.prefetch[i]
        makespan, _ = self.score(w)
        limit = makespan * (1 + 1e-12)
        # (b) as late as it goes without a longer makespan, last needed first.
        floor = 0
        for i in swaps:
            lo = max(need[i], floor)
            cur = w.prefetch[i]
            if cur > lo:
                guess = self._hidden_step(w, i, lo, cur)
                self._gallop_up(w, i, guess, cur, limit)
            floor = w.prefetch[i]

    def _set_ok(self, w: _Work, i: int, j: int, limit: float | None) -> bool:
        self.tick()
        old = w.prefetch[i]
        w.prefetch[i] = j
        ok = False
        try:
            makespan, peak = self.score(w)
            ok = self.problem.fits(peak) and (limit is None or makespan <= limit)
        finally:
            if not ok:
                w.prefetch[i] = old
        return ok

    def _gallop_down(self, w: _Work, i: int, cur: int, top: int) -> int:
        """Largest-found step in (cur, top] that fits, galloping down from `top`."""
        step, bad = 1, None
        j = top
        while j > cur:
            if self._set_ok(w, i, j, None):
                break
            bad = j
            j = max(cur, top - step)
            step *= 2
        else:
            return cur
        good = j
        # bisect between the last failure above and the success
        hi = bad if bad is not None else good
        while hi - good > 1:
            mid = (hi + good) // 2
            if self._set_ok(w, i, mid, None):
                good = mid
            else:
                hi = mid
        w.prefetch[i] = good
        return good

    def _hidden_step(self, w: _Work, i: int, lo: int, cur: int) -> int:
        """The latest step whose issue time still leaves the whole transfer before use."""
        tm = self.timing(w)
        n, sc = self.n, self.scorer
        # The first reader in time: the block above, then B_{i+1}, then B_i.
        uses = []
        if i + 1 < n and w.actions[i + 1] is RECOMPUTE:
            uses.append(tm.r_start[i + 1])
        if sc.saves_input[i + 1]:
            uses.append(tm.b_start[i + 1])
        if sc.internals[i] > 0 or sc.saves_output[i]:
            uses.append(tm.b_start[i])
        use = min(uses) if uses else tm.b_start[i]
        latest = use - sc.copy_durations(w.actions)[1][i]
        for j in range(lo, cur):
            issue = tm.f_end[n - 1] if j == n - 1 else tm.b_end[j + 1]
            if issue <= latest:
                return j
        return cur

    def _gallop_up(self, w: _Work, i: int, guess: int, cur: int, limit: float) -> None:
        """Smallest-found step in [guess, cur) keeping makespan <= limit and the budget."""
        step, j, bad = 1, guess, None
        while j < cur:
            if self._set_ok(w, i, j, limit):
                break
            bad = j
            j = min(cur, guess + step)
            step *= 2
        else:
            return
        good = j
        if bad is None:
            self.log.moved += 1
            return
        while good - bad > 1:
            mid = (good + bad) // 2
            if self._set_ok(w, i, mid, limit):
                good = mid
            else:
                bad = mid
        w.prefetch[i] = good
        self.log.moved += 1


def pooch(problem: Problem, *, retry_over_budget: bool = False) -> SolverOutput:
    """The published greedy PoocH (see the module note for the stages and our readings).

    `retry_over_budget=True` departs from the statement we follow: in stage 2
    a tensor whose recomputation breaks the budget is tried again in later
    rounds (memory changes as others are recomputed) instead of being dropped
    for good.
    """
    if not isinstance(retry_over_budget, bool):
        raise SolverOptionError(
            f"method 'pooch': retry_over_budget must be true or false, got {retry_over_budget!r}"
        )
    if problem.budget < problem.min_budget:
        return SolverOutput(
            None,
            Status.INFEASIBLE,
            message=(
                f"pooch: budget must be at least {problem.min_budget} bytes (the minimum any "
                f"plan needs), got {problem.budget:.0f}"
            ),
        )
    n = problem.n
    greedy = _Greedy(problem, retry_over_budget=retry_over_budget)
    # NOTE: when keep-all fits, stage 1 would give every tensor back to keep
    # (each keep fits) and stages 2-3 would find nothing to do: the published
    # greedy ends at keep-all. Checking it first costs one simulation instead
    # of stage 1's dozens; on 10^6 layers with memory to spare stage 1 did
    # not finish in 30 s and the greedy returned a plan swapping everything.
    keep_all = _Work([KEEP] * n, [None] * n, [None] * n)
    try:
        keep_all_fits = greedy.fits(keep_all)
    except _Expired:
        return _timeout("the check whether keep-all fits")
    if keep_all_fits:
        plan = Plan.build(keep_all.actions, profile=problem.profile)
        return SolverOutput(plan, Status.FEASIBLE, message="pooch: keep-all fits the budget")
    w = _Work(all_swap_actions(n), [None] * n, [None] * n)
    for i in w.swapped():
        w.prefetch[i] = min(i + 1, n - 1)
    stopped = ""
    try:
        for name, stage in (
            ("4", greedy.start),
            ("1", greedy.stage1),
            ("2", greedy.stage2),
            ("3", greedy.stage3),
            ("5", lambda w: take_options(greedy, w)),
        ):
            stopped = name
            stage(w)
        stopped = ""
    except _Expired:
        if not greedy.found:
            return _timeout("the search for a first plan that fits (all-swap, then stage 4)")
    except _NoPlan as exc:
        return SolverOutput(None, Status.NO_PLAN, message=str(exc))
    log = greedy.log
    plan = Plan.build(w.actions, w.prefetch, w.wait, profile=problem.profile, options=w.options)
    parts = [plan.summary()]
    if plan.has_options:
        parts.append(f"stage 5 gave {log.options} layer(s) an option")
    waits = sum(1 for x in plan.swap_wait if x is not None)
    if log.stage4:
        parts.append("all-swap did not fit (stage 4)")
    if waits:
        parts.append(f"{waits} swap_wait kept (stages 4 and 2)")
    parts.append(f"stage 1 kept {log.kept}, stage 2 recomputed {log.recomputed}")
    parts.append(f"stage 3 moved {log.moved} copies back")
    if stopped:
        parts.append(f"limit reached in stage {stopped}")
    return SolverOutput(
        plan, Status.FEASIBLE, message="pooch: " + "; ".join(parts), stopped=bool(stopped)
    )


def _timeout(during: str) -> SolverOutput:
    return SolverOutput(
        None,
        Status.TIMEOUT,
        message=f"pooch: the time limit passed during {during}, before any plan fitted",
        stopped=True,
    )
