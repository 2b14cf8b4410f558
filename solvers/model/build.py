"""`build`: the plan model of one profile and budget, section by section; `Formulation`.

The spec's schedule is a *function* of the plan (every operation starts as
soon as its predecessors allow), so the model defines every time exactly
with max-equalities instead of letting a solver delay operations: a
delayed copy back would free memory the real executor does not free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from planopt.errors import UnsupportedProfileError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.profile import Profile
from planopt.runnable import reads_below
from solvers.model.backward import add_backward_times, add_recompute_and_backward
from solvers.model.copies import add_copy_back_queue
from solvers.model.cuts import add_compute_stream_row, add_relaxation_cuts
from solvers.model.decisions import Choices, add_decisions, add_inplace_rule
from solvers.model.forward import add_forward
from solvers.model.ir import Define, MaxEq, Model, var
from solvers.model.memory import add_memory
from solvers.model.reads import reads_of
from solvers.model.units import TimeScale, exact_memory, time_scale

# Operations per layer whose times are rounded: forward, recomputation,
# backward and two copies at most.
OPS_PER_LAYER = 5


@dataclass
class Formulation:
    """The model of one profile and budget, with the indices needed to read a plan back."""

    model: Model
    profile: Profile
    budget: float
    times: TimeScale
    keep: list[int]
    swap: list[int]
    rec: list[int]
    prefetch: list[dict[int, int]]
    wait: list[dict[int, int]]
    n_ops: int
    # Cost model v3: per layer one literal per option of its menu (menu order).
    opt: list[list[int]] = field(default_factory=list)

    @property
    def time_unit(self) -> float:
        """Seconds per tick."""
        return self.times.unit

    def decode(self, value: Callable[[int], int]) -> Plan:
        """The plan a solution picks; `value(var_index) -> int`."""
        n = len(self.keep)
        actions: list[Action] = []
        prefetch: list[int | None] = []
        wait: list[int | None] = []
        options: list[str | None] = [None] * n
        for i in range(n):
            for k, v in enumerate(self.opt[i] if self.opt else ()):
                if value(v):
                    options[i] = self.profile.layers[i].options[k].name
            if value(self.swap[i]):
                actions.append(SWAP)
                prefetch.append(next(j for j, v in self.prefetch[i].items() if value(v)))
                wait.append(next((j for j, v in self.wait[i].items() if value(v)), None))
            else:
                actions.append(RECOMPUTE if value(self.rec[i]) else KEEP)
                prefetch.append(None)
                wait.append(None)
        return Plan.build(actions, prefetch, wait, profile=self.profile, options=options)

    def decisions(self, plan: Plan) -> dict[int, int]:
        """Values of the decision variables that encode `plan` (for hints and warm starts)."""
        out: dict[int, int] = {}
        for i, action in enumerate(plan.actions):
            out[self.keep[i]] = int(action is KEEP)
            out[self.swap[i]] = int(action is SWAP)
            out[self.rec[i]] = int(action is RECOMPUTE)
            for j, v in self.prefetch[i].items():
                out[v] = int(action is SWAP and plan.prefetch_at[i] == j)
            for j, v in self.wait[i].items():
                out[v] = int(action is SWAP and plan.swap_wait[i] == j)
            chosen = plan.options[i] if plan.options else None
            for k, v in enumerate(self.opt[i] if self.opt else ()):
                out[v] = int(self.profile.layers[i].options[k].name == chosen)
        return out

    def decision_vars(self) -> list[int]:
        """Indices of the variables that make up a plan (actions, prefetch, waits)."""
        out = [*self.keep, *self.swap, *self.rec]
        for i in range(len(self.keep)):
            out += self.prefetch[i].values()
            out += self.wait[i].values()
            out += self.opt[i] if self.opt else ()
        return out

    def seconds(self, ticks: float) -> float:
        return self.times.seconds(ticks)

    def time_error_bound(self) -> float:
        """Largest |model makespan - real makespan| of one plan, in seconds."""
        return self.n_ops * self.time_unit / 2.0

    def allows(self, plan: Plan) -> bool:
        """Whether the model's restricted action set contains `plan`."""
        d = self.decisions(plan)
        return all(self.model.vars[v].hi >= val for v, val in d.items())


def build(
    profile: Profile,
    budget: float,
    *,
    actions: Sequence[Action] = (KEEP, SWAP, RECOMPUTE),
    with_swap_wait: bool = True,
    redundant: bool = False,
    choices: Mapping[int, Choices] | None = None,
) -> Formulation:
    """Formulate the spec for `profile` under `budget`, over the given action set.

    `choices` (default none) restricts the layers it names to a few decisions
    each (the large-neighbourhood search fixes every layer outside its window
    this way); other layers keep every choice. `redundant` adds the implied
    rows of `solvers.model.cuts.add_relaxation_cuts`.
    """
    choices = choices or {}
    layers = profile.layers
    n = len(layers)
    times = time_scale(profile)
    f = [times.ticks(layer.fwd) for layer in layers]
    b = [times.ticks(layer.bwd) for layer in layers]
    reads = reads_of(profile, times)
    m = Model(horizon=times.horizon)

    menus = [len(x.options) for x in layers]
    names = [[o.name for o in x.options] for x in layers]
    d = add_decisions(m, n, actions, with_swap_wait, choices, reads.saves_input, menus, names)
    if profile.modifies_inputs:
        rule_reads = [j > 0 and reads_below(profile, j) for j in range(n)]
        add_inplace_rule(m, d, [x.modifies_input for x in layers], rule_reads)
    fwd = add_forward(m, d, f, reads)
    bt = add_backward_times(m, n, fwd.end[n - 1])
    h2d_free = add_copy_back_queue(m, d, fwd, bt, reads)
    reads_own = [x.saved_bytes > 0 or x.saves_output for x in layers]
    regen = [[times.ticks(o.recompute) for o in x.options] for x in layers]
    opt_own = [[o.saved_bytes > 0 or x.saves_output for o in x.options] for x in layers]
    add_recompute_and_backward(m, d, bt, f, b, reads, reads_own, regen, opt_own)
    # The makespan: the last compute operation, or a copy nobody waits for (a
    # swap whose products no backward reads still copies back its 0 bytes).
    makespan = m.time("makespan")
    last_copy_out = var(fwd.d2h_free[n - 1])
    m.add(MaxEq(makespan, ((var(bt.end[0]), None), (h2d_free, None), (last_copy_out, None))))
    after_end = m.time("after_end")
    m.add(Define(after_end, var(makespan) + 1, None))
    memory = exact_memory(profile)
    add_memory(m, profile, budget, memory, d, fwd, bt, f, b, reads, after_end)

    add_compute_stream_row(m, bt.end[0], d.rec, f, b)
    if redundant:
        if not profile.is_v1:
            raise UnsupportedProfileError(
                "redundant cuts: the profile must be a version-1 reading, got version-2 fields"
            )
        d_out = [reads.out_least(i) for i in range(n)]
        d_back = [reads.back_least(i) for i in range(n)]
        add_relaxation_cuts(m, profile, bt.end[0], d, f, b, d_out, d_back, memory)
    m.objective = makespan
    n_ops = (OPS_PER_LAYER + int(profile.has_options)) * n  # v3: R_i is one more
    return Formulation(
        m, profile, budget, times, d.keep, d.swap, d.rec, d.prefetch, d.wait, n_ops, d.opt
    )
