"""The incumbent: the one place that probes, commits, snapshots and restores plans.

A neighbourhood proposes changes (`Change` tuples) and the engine scores
them with the problem's metered scorer; `take_best` commits the best
improving change of a batch of alternatives, `trial` forces a change,
re-optimises around it and keeps the result only if it ends better. The
incumbent only gets better, except inside a `trial`, which restores its
snapshot unless it won.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from planopt.plan import RECOMPUTE, SWAP, Action, Plan, need_indices
from planopt.problem import Problem

# (layer, action, lead, wait offset): for a swap, prefetch_at = need + lead
# (capped at L-1) and swap_wait = layer + offset (None: no wait).
Change = tuple[int, Action, int | None, int | None]
Key = tuple[int, float]  # (0, makespan) when the plan fits the budget, else (1, peak)

# A move must shorten the makespan by more than this fraction to count.
IMPROVEMENT = 1e-9


@dataclass(frozen=True)
class Snapshot:
    """A saved incumbent (see `Incumbent.trial`)."""

    actions: tuple[Action, ...]
    prefetch: tuple[int | None, ...]
    wait: tuple[int | None, ...]
    need: tuple[int, ...]
    key: Key
    options: tuple[str | None, ...] = ()


def better(new: Key, old: Key) -> bool:
    """A fitting plan beats one that does not; then faster (or smaller peak) wins."""
    if new[0] != old[0]:
        return new[0] < old[0]
    return new[1] < old[1] * (1 - IMPROVEMENT)


class Incumbent:
    """The current plan (mutable lists), its score and the work done.

    Stops (`out_of_work`) when the problem's time or work runs out, when a
    fitting plan reaches `target` (a known lower bound), or after
    `patience` work units without a new best plan.
    """

    better = staticmethod(better)

    def __init__(
        self,
        problem: Problem,
        plan: Plan,
        *,
        target: float | None = None,
        patience: float | None = None,
    ) -> None:
        self.problem = problem
        self.target = target
        self.patience = patience
        self.scorer = problem.scorer
        self.n = problem.n
        self.actions: list[Action] = list(plan.actions)
        self.prefetch: list[int | None] = list(plan.prefetch_at)
        self.wait: list[int | None] = list(plan.swap_wait)
        # Cost model v3: each layer's option (None: whole). Moves keep a layer's
        # option while it stays kept or swapped and drop it when it is recomputed;
        # options come from the starts and the exact windows.
        self.options: list[str | None] = list(plan.options or (None,) * self.n)
        self.need = need_indices(self.actions, self.problem.profile, self.options)
        self.evals = 0
        self.windows = 0
        self.key = self._score()
        self.best_key = self.key
        self.improved_at = problem.meter.used

    # -- state ----------------------------------------------------------------------

    def _score(self) -> Key:
        self.evals += 1
        makespan, peak = self.scorer.score(
            self.actions, self.prefetch, self.wait, options=self.options
        )
        return (0, makespan) if self.problem.fits(peak) else (1, float(peak))

    @property
    def feasible(self) -> bool:
        return self.key[0] == 0

    @property
    def makespan(self) -> float:
        return self.key[1]

    def out_of_work(self) -> bool:
        if self.target is not None and self.key[0] == 0 and self.key[1] <= self.target:
            return True
        if self.patience is not None and self.problem.meter.used - self.improved_at > self.patience:
            return True
        return self.problem.expired()

    def plan(self) -> Plan:
        return Plan.build(
            self.actions,
            self.prefetch,
            self.wait,
            profile=self.problem.profile,
            options=self.options,
        )

    def lead(self, i: int) -> int | None:
        p = self.prefetch[i]
        return None if p is None else p - self.need[i]

    def wait_offset(self, i: int) -> int | None:
        w = self.wait[i]
        return None if w is None else w - i

    # -- changes --------------------------------------------------------------------

    def _apply(self, changes: Sequence[Change]) -> tuple[dict, list[int]]:
        """Make `changes` (see the note on other swapped layers). Returns the undo and need."""
        n = self.n
        undo: dict[int, tuple[Action, int | None, int | None, str | None]] = {}
        for i, action, _, _ in changes:
            undo[i] = (self.actions[i], self.prefetch[i], self.wait[i], self.options[i])
            self.actions[i] = action
            if action is RECOMPUTE:
                self.options[i] = None
        need = need_indices(self.actions, self.problem.profile, self.options)
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
                undo[j] = (self.actions[j], self.prefetch[j], self.wait[j], self.options[j])
                self.prefetch[j] = min(self.prefetch[j] - old_need[j] + need[j], n - 1)
        return undo, need

    def _revert(self, undo: dict) -> None:
        for i, (a, p, w, o) in undo.items():
            self.actions[i], self.prefetch[i], self.wait[i], self.options[i] = a, p, w, o

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
        if better(self.key, self.best_key):
            self.best_key = self.key
            self.improved_at = self.problem.meter.used

    def best_of(
        self, alternatives: Iterable[Sequence[Change]], against: Key | None = None
    ) -> tuple[Key, Sequence[Change]] | None:
        """The best of `alternatives` that beats `against` (default: the incumbent), probed
        in order (ties: the first); stops early when out of work."""
        best: tuple[Key, Sequence[Change]] | None = None
        for changes in alternatives:
            key = self.probe(changes)
            if better(key, (against or self.key) if best is None else best[0]):
                best = (key, changes)
            if self.out_of_work():
                break
        return best

    def take_best(self, alternatives: Iterable[Sequence[Change]]) -> bool:
        """Commit the best improving change of `alternatives`; True when one was taken."""
        best = self.best_of(alternatives)
        if best is None:
            return False
        self.commit(best[1], best[0])
        return True

    def trial(self, changes: Sequence[Change], reoptimise: Callable[[], object]) -> bool:
        """Force `changes` whatever they cost (a kick), run `reoptimise`, and keep the
        result only when it beats the plan from before; True when kept."""
        saved = self.snapshot()
        _, need = self._apply(changes)
        self.need = need
        self.key = self._score()
        reoptimise()
        if better(self.key, saved.key):
            return True
        self.restore(saved)
        return False

    def offer(self, plan: Plan) -> bool:
        """Take `plan` when it beats the incumbent (one simulation)."""
        self.evals += 1
        makespan, peak = self.scorer.score_plan(plan)
        key: Key = (0, makespan) if self.problem.fits(peak) else (1, float(peak))
        if not better(key, self.key):
            return False
        self.actions = list(plan.actions)
        self.prefetch = list(plan.prefetch_at)
        self.wait = list(plan.swap_wait)
        self.options = list(plan.options or (None,) * self.n)
        self.need = need_indices(self.actions, self.problem.profile, self.options)
        self.key = key
        self._note_best()
        return True

    def snapshot(self) -> Snapshot:
        return Snapshot(
            tuple(self.actions),
            tuple(self.prefetch),
            tuple(self.wait),
            tuple(self.need),
            self.key,
            tuple(self.options),
        )

    def restore(self, snap: Snapshot) -> None:
        self.actions, self.prefetch = list(snap.actions), list(snap.prefetch)
        self.wait, self.need, self.key = list(snap.wait), list(snap.need), snap.key
        self.options = list(snap.options or (None,) * self.n)
