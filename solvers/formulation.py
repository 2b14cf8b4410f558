"""The back-end-neutral model of the cost model: one formulation, several solvers.

The spec's schedule is a *function* of the plan (every operation starts as
soon as its predecessors allow), so the model defines every time exactly with
max-equalities instead of letting a solver delay operations: a delayed copy
back would free memory the real executor does not free.

Units (the one place they are decided):

* time: integer *ticks*. One tick `u` is chosen so the horizon (all
  durations serialised) is about `TIME_RESOLUTION` ticks; every duration is
  rounded to the nearest tick, and a positive one to at least one tick, so a
  tensor lives zero time in the model exactly when it does in the spec (and
  then, by the free-before-allocate rule, occupies nothing: CP-SAT's
  cumulative ignores empty intervals the same way).
* memory: bytes divided by their greatest common divisor: exact.

Rounding changes times by at most `u / 2` per operation; the caller re-scores
the plan in floating point and widens the bound by that amount (see
`time_error_bound`).

Constraint kinds (each back-end translates exactly these):
`Define` (target == expr when a literal holds), `MaxEq` (target == max(0,
present terms)), `AndEq`, `GeqReify` (b <=> expr >= 0), `Clause`,
`ExactlyOne`, `Linear` and one `Cumulative` for memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from planopt.errors import UnsupportedProfileError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.profile import Profile

TIME_RESOLUTION = 10**9

# A literal: (variable index, positive?).
Lit = tuple[int, bool]
# A linear expression: ((variable index, coefficient), ...) and a constant.
Terms = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Expr:
    terms: Terms = ()
    const: int = 0

    def __add__(self, other: Expr | int) -> Expr:
        if isinstance(other, int):
            return Expr(self.terms, self.const + other)
        return Expr(self.terms + other.terms, self.const + other.const)

    def __sub__(self, other: Expr | int) -> Expr:
        if isinstance(other, int):
            return Expr(self.terms, self.const - other)
        return Expr(self.terms + tuple((v, -c) for v, c in other.terms), self.const - other.const)


def var(index: int, coef: int = 1) -> Expr:
    return Expr(((index, coef),), 0)


def const(value: int) -> Expr:
    return Expr((), value)


@dataclass(frozen=True)
class Var:
    name: str
    lo: int
    hi: int
    is_bool: bool


@dataclass(frozen=True)
class Define:
    target: int
    expr: Expr
    when: Lit | None


@dataclass(frozen=True)
class MaxEq:
    target: int
    terms: tuple[tuple[Expr, Lit | None], ...]


@dataclass(frozen=True)
class AndEq:
    target: int
    lits: tuple[Lit, ...]


@dataclass(frozen=True)
class GeqReify:
    target: int
    expr: Expr


@dataclass(frozen=True)
class Clause:
    lits: tuple[Lit, ...]


@dataclass(frozen=True)
class ExactlyOne:
    lits: tuple[Lit, ...]


@dataclass(frozen=True)
class Linear:
    expr: Expr
    lo: int | None
    hi: int | None
    in_ticks: bool = False  # a time-valued constraint (back-ends may rescale time)


@dataclass(frozen=True)
class Interval:
    start: int
    end: int
    demand: int
    present: Lit | None
    in_forward: bool = False  # starts at some F_i start (MIP pruning uses it)
    may_be_empty: bool = False  # can last zero time (then it occupies nothing)


@dataclass
class Model:
    """Variables, constraints, the memory resource and the objective (a variable)."""

    vars: list[Var] = field(default_factory=list)
    constraints: list = field(default_factory=list)
    intervals: list[Interval] = field(default_factory=list)
    capacity: int = 0
    objective: int = -1
    horizon: int = 0

    def new(self, name: str, lo: int, hi: int) -> int:
        self.vars.append(Var(name, lo, hi, False))
        return len(self.vars) - 1

    def new_bool(self, name: str) -> int:
        self.vars.append(Var(name, 0, 1, True))
        return len(self.vars) - 1

    def add(self, constraint) -> None:
        self.constraints.append(constraint)


def pos(v: int) -> Lit:
    return (v, True)


def neg(v: int) -> Lit:
    return (v, False)


@dataclass
class Formulation:
    """The model of one profile and budget, with the indices needed to read a plan back."""

    model: Model
    profile: Profile
    budget: float
    time_unit: float
    keep: list[int]
    swap: list[int]
    rec: list[int]
    prefetch: list[dict[int, int]]
    wait: list[dict[int, int]]
    n_ops: int

    def decode(self, value) -> Plan:
        """The plan a solution picks; `value(var_index) -> int`."""
        n = len(self.keep)
        actions: list[Action] = []
        prefetch: list[int | None] = []
        wait: list[int | None] = []
        for i in range(n):
            if value(self.swap[i]):
                actions.append(SWAP)
                prefetch.append(next(j for j, v in self.prefetch[i].items() if value(v)))
                wait.append(next((j for j, v in self.wait[i].items() if value(v)), None))
            else:
                actions.append(RECOMPUTE if value(self.rec[i]) else KEEP)
                prefetch.append(None)
                wait.append(None)
        return Plan.build(actions, prefetch, wait, profile=self.profile)

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
        return out

    def decision_vars(self) -> list[int]:
        """Indices of the variables that make up a plan (actions, prefetch, waits)."""
        out = [*self.keep, *self.swap, *self.rec]
        for i in range(len(self.keep)):
            out += self.prefetch[i].values()
            out += self.wait[i].values()
        return out

    def seconds(self, ticks: float) -> float:
        return ticks * self.time_unit

    def time_error_bound(self) -> float:
        """Largest |model makespan - real makespan| of one plan, in seconds."""
        return self.n_ops * self.time_unit / 2.0

    def allows(self, plan: Plan) -> bool:
        """Whether the model's restricted action set contains `plan`."""
        d = self.decisions(plan)
        return all(self.model.vars[v].hi >= val for v, val in d.items())


def _time_unit(profile: Profile) -> tuple[float, int]:
    """The time unit (seconds) and the horizon bound in units."""
    dev = profile.device
    total = 0.0
    for layer in profile.layers:
        total += 2 * layer.fwd + layer.bwd
        total += dev.d2h_seconds(layer.product_bytes) + dev.h2d_seconds(layer.product_bytes)
    unit = total / TIME_RESOLUTION if total > 0 else 1.0
    return unit, TIME_RESOLUTION + 4 * len(profile.layers) + 4


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
    this way); other layers keep every choice.

    `redundant` adds implied constraints (`_add_relaxation_cuts`) that only
    strengthen the solvers' relaxations. Off by default until measured: on a
    16-layer chain they lifted CP-SAT's bound from 0 to 0.7% overhead (the
    optimum lies near 6%) without proving more.
    """
    choices = choices or {}
    n = len(profile.layers)
    unit, horizon_units = _time_unit(profile)
    dev = profile.device

    def ticks(seconds: float) -> int:
        return max(1, round(seconds / unit)) if seconds > 0 else 0

    layers = profile.layers
    f = [ticks(layer.fwd) for layer in layers]
    b = [ticks(layer.bwd) for layer in layers]
    # Whose backward reads what (spec v2): the output of i is read by B_i
    # (saves_output), B_{i+1} (saves_input of i+1), or the block of the run
    # starting at i+1 (plan-dependent: when i+1 is recompute).
    saves_in = [layer.saves_input for layer in layers] + [False]
    saves_out = [layer.saves_output for layer in layers]
    read_always = [saves_out[i] or saves_in[i + 1] for i in range(n)]
    # A swap copies its internals, and its output when a backward reads it.
    d_out_full = [ticks(dev.d2h_seconds(layer.product_bytes)) for layer in layers]
    d_back_full = [ticks(dev.h2d_seconds(layer.product_bytes)) for layer in layers]
    d_out_int = [ticks(dev.d2h_seconds(layer.saved_bytes)) for layer in layers]
    d_back_int = [ticks(dev.h2d_seconds(layer.saved_bytes)) for layer in layers]
    # The durations every plan's copies take at least (relaxation cuts use these).
    d_out = [d_out_full[i] if read_always[i] else d_out_int[i] for i in range(n)]
    d_back = [d_back_full[i] if read_always[i] else d_back_int[i] for i in range(n)]
    horizon = horizon_units
    m = Model(horizon=horizon)

    def time(name: str) -> int:
        return m.new(name, 0, horizon)

    keep = [m.new_bool(f"keep{i}") for i in range(n)]
    swap = [m.new_bool(f"swap{i}") for i in range(n)]
    rec = [m.new_bool(f"rec{i}") for i in range(n)]
    for i in range(n):
        m.add(ExactlyOne((pos(keep[i]), pos(swap[i]), pos(rec[i]))))
        allowed = choices[i].actions if i in choices else actions
        for action, v in ((KEEP, keep[i]), (SWAP, swap[i]), (RECOMPUTE, rec[i])):
            if action not in allowed:
                m.vars[v] = Var(m.vars[v].name, 0, 0, True)

    # prefetch_at: one literal per allowed step; exactly one when swapped.
    prefetch: list[dict[int, int]] = []
    wait: list[dict[int, int]] = []
    for i in range(n):
        steps = range(i, n)
        if i in choices:
            steps = sorted({j for j in choices[i].prefetch if i <= j < n})
        pf = {j: m.new_bool(f"pf{i}_{j}") for j in steps}
        prefetch.append(pf)
        m.add(Linear(Expr((*((v, 1) for v in pf.values()), (swap[i], -1))), 0, 0))
        for j, v in pf.items():
            # j >= need(i) (spec v2): a step j is too early when layers i+1 .. j are
            # all recompute (none when j = i) and the step after is needed too:
            # layer j+1 is recompute (the run goes on), or reads its input (the
            # block moves to B_{j+1}; for j = i, B_{i+1} reads x_{i+1} itself).
            if j + 1 <= n - 1:
                run = tuple(neg(rec[k]) for k in range(i + 1, j + 1))
                if saves_in[j + 1]:
                    m.add(Clause((neg(v), *run)))
                else:
                    m.add(Clause((neg(v), *run, neg(rec[j + 1]))))
        waits = range(i + 1, n) if with_swap_wait else ()
        if i in choices:
            waits = sorted({j for j in choices[i].wait if i + 1 <= j < n})
        sw = {j: m.new_bool(f"sw{i}_{j}") for j in waits}
        wait.append(sw)
        if sw:
            m.add(Linear(Expr((*((v, 1) for v in sw.values()), (swap[i], -1))), None, 0))

    # -- forward and copies out ------------------------------------------------
    fs = [time(f"F{i}.start") for i in range(n)]
    fe = [time(f"F{i}.end") for i in range(n)]
    os_ = [time(f"out{i}.start") for i in range(n)]
    oe = [time(f"out{i}.end") for i in range(n)]
    d2h = [time(f"d2h_free{i}") for i in range(n)]
    for i in range(n):
        terms: list[tuple[Expr, Lit | None]] = [] if i == 0 else [(var(fe[i - 1]), None)]
        for x in range(i):
            if i in wait[x]:
                terms.append((var(oe[x]), pos(wait[x][i])))
        m.add(MaxEq(fs[i], tuple(terms)))
        m.add(Define(fe[i], var(fs[i]) + f[i], None))
        prev_free = [] if i == 0 else [(var(d2h[i - 1]), None)]
        m.add(MaxEq(os_[i], ((var(fe[i]), None), *prev_free)))
        if read_always[i] or i == n - 1 or d_out_full[i] == d_out_int[i]:
            m.add(Define(oe[i], var(os_[i]) + d_out[i], None))
        else:  # the output is copied only when the layer above is recomputed
            m.add(Define(oe[i], var(os_[i]) + d_out_full[i], pos(rec[i + 1])))
            m.add(Define(oe[i], var(os_[i]) + d_out_int[i], neg(rec[i + 1])))
        m.add(Define(d2h[i], var(oe[i]), pos(swap[i])))
        m.add(Define(d2h[i], var(d2h[i - 1]) if i else const(0), neg(swap[i])))

    # -- backward -----------------------------------------------------------------
    issue = [time(f"issue{t}") for t in range(n)]
    e = [time(f"B{t}.end") for t in range(n)]
    bs = [time(f"B{t}.start") for t in range(n)]
    cbs = [time(f"back{x}.start") for x in range(n)]
    cbe = [time(f"back{x}.end") for x in range(n)]
    block_issue = [time(f"X{j}") for j in range(n)]
    rs = [time(f"R{j}.start") for j in range(n)]
    re_ = [time(f"R{j}.end") for j in range(n)]
    for t in range(n):
        m.add(Define(issue[t], var(fe[n - 1]) if t == n - 1 else var(e[t + 1]), None))

    # Copy back: enqueued at the issue of its prefetch step, higher layer
    # first, FIFO; waits for its own copy out. The queue is walked in its
    # fixed order of (step, layer) slots; slot (j, x) is used when x's
    # prefetch step is j, and `h2d` carries the engine's free time along.
    h2d: Expr = const(0)
    for j in range(n - 1, -1, -1):
        for x in range(j, -1, -1):
            if j not in prefetch[x]:
                continue  # x is never fetched at step j: its slot stays empty
            used = prefetch[x][j]
            start = time(f"slot{j}_{x}.start")
            m.add(MaxEq(start, ((var(issue[j]), None), (h2d, None), (var(oe[x]), None))))
            m.add(Define(cbs[x], var(start), pos(used)))
            after = time(f"h2d_free{j}_{x}")
            m.add(Define(after, var(cbe[x]), pos(used)))
            m.add(Define(after, h2d, neg(used)))
            h2d = var(after)
    for x in range(n):
        m.add(Define(cbs[x], const(0), neg(swap[x])))
        if read_always[x] or x == n - 1 or d_back_full[x] == d_back_int[x]:
            m.add(Define(cbe[x], var(cbs[x]) + d_back[x], None))
        else:
            m.add(Define(cbe[x], var(cbs[x]) + d_back_full[x], pos(rec[x + 1])))
            m.add(Define(cbe[x], var(cbs[x]) + d_back_int[x], neg(rec[x + 1])))

    # Recompute blocks: X_j is the issue time of the step whose block
    # regenerates j (the top of j's run); the block waits for a swapped base.
    first = [m.new_bool(f"first{j}") for j in range(n)]
    cont = [m.new_bool(f"cont{j}") for j in range(n)]
    top = [m.new_bool(f"top{t}") for t in range(n)]
    # The run's block is issued at its top's step, or at the next step when that
    # layer reads the top's output (spec v2).
    for j in range(n - 1, -1, -1):
        if j == n - 1:
            m.add(Define(block_issue[j], var(issue[j]), None))
        else:
            m.add(Define(block_issue[j], var(block_issue[j + 1]), pos(rec[j + 1])))
            step = issue[j + 1] if saves_in[j + 1] else issue[j]
            m.add(Define(block_issue[j], var(step), neg(rec[j + 1])))
    for j in range(n):
        if j == 0:
            m.add(AndEq(first[j], (pos(rec[j]),)))
            m.add(AndEq(cont[j], (pos(rec[j]), neg(rec[j]))))
        else:
            m.add(AndEq(first[j], (pos(rec[j]), neg(rec[j - 1]))))
            m.add(AndEq(cont[j], (pos(rec[j]), pos(rec[j - 1]))))
        start_terms: list[tuple[Expr, Lit | None]] = [(var(block_issue[j]), None)]
        if j > 0:
            start_terms.append((var(cbe[j - 1]), pos(swap[j - 1])))
        block_start = time(f"blockstart{j}")
        m.add(MaxEq(block_start, tuple(start_terms)))
        m.add(Define(rs[j], var(block_start), pos(first[j])))
        if j > 0:
            m.add(Define(rs[j], var(re_[j - 1]), pos(cont[j])))
        m.add(Define(rs[j], const(0), neg(rec[j])))
        m.add(Define(re_[j], var(rs[j]) + f[j], None))
    for t in range(n):
        m.add(AndEq(top[t], (pos(rec[t]),) if t == n - 1 else (pos(rec[t]), neg(rec[t + 1]))))
    for t in range(n):
        # B_t follows the block issued at step t, if any: the run whose top is t
        # (its block stays at t), or the run whose top is t-1 (moved to t).
        pred = time(f"pred{t}")
        # (a run topped at t is regenerated at t+1 when layer t+1 reads its input)
        here = None if t + 1 < n and saves_in[t + 1] else top[t]
        moved = top[t - 1] if t > 0 and saves_in[t] else None
        if here is not None:
            m.add(Define(pred, var(re_[t]), pos(here)))
        if moved is not None:
            m.add(Define(pred, var(re_[t - 1]), pos(moved)))
        idle = tuple(neg(x) for x in (here, moved) if x is not None)
        if idle:
            none_here = m.new_bool(f"noblock{t}")
            m.add(AndEq(none_here, idle))
            m.add(Define(pred, var(issue[t]), pos(none_here)))
        else:
            m.add(Define(pred, var(issue[t]), None))
        waits: list[tuple[Expr, Lit | None]] = [(var(pred), None)]
        if layers[t].saved_bytes > 0 or saves_out[t]:
            waits.append((var(cbe[t]), pos(swap[t])))
        if t > 0 and saves_in[t]:
            waits.append((var(cbe[t - 1]), pos(swap[t - 1])))
        m.add(MaxEq(bs[t], tuple(waits)))
        m.add(Define(e[t], var(bs[t]) + b[t], None))

    # -- memory --------------------------------------------------------------------
    # The makespan: the last compute operation, or a copy nobody waits for (a
    # swap whose products no backward reads still copies back its 0 bytes).
    makespan = time("makespan")
    m.add(MaxEq(makespan, ((var(e[0]), None), (h2d, None), (var(d2h[n - 1]), None))))
    # Parameter gradients are held to the end of the step, that instant included
    # (so even a step of zero length holds them): their intervals end a tick later.
    after_end = time("after_end")
    m.add(Define(after_end, var(makespan) + 1, None))
    sizes = [
        v
        for layer in layers
        for v in (
            layer.out_bytes,
            layer.saved_bytes,
            layer.input_grad_bytes,
            layer.param_grad_bytes,
            layer.fwd_work_bytes,
            layer.bwd_work_bytes,
        )
        if v > 0
    ]
    g = math.gcd(*sizes) if sizes else 1
    m.capacity = max(-1, math.floor((budget - profile.static_bytes) / g))

    def interval(
        start: int,
        end: int,
        nbytes: int,
        present: Lit | None,
        min_len: int,
        in_forward: bool = False,
    ) -> None:
        if nbytes > 0:
            m.intervals.append(Interval(start, end, nbytes // g, present, in_forward, min_len == 0))

    def both(a: Lit, b: Lit, name: str) -> Lit:
        v = m.new_bool(name)
        m.add(AndEq(v, (a, b)))
        return pos(v)

    for i, layer in enumerate(layers):
        nxt = min(i + 1, n - 1)
        last = i == n - 1
        fwd_use = fe[nxt]  # the output's forward use: F_{i+1} (F_i for the last layer)
        f_pair = f[i] + (f[nxt] if nxt != i else 0)
        # Internals: to B_i when kept, to the later of copy out and F_i when swapped.
        if layer.saved_bytes > 0:
            int_free = time(f"int{i}.free")
            int_swapfree = time(f"int{i}.swapfree")
            m.add(MaxEq(int_swapfree, ((var(oe[i]), None), (var(fe[i]), None))))
            m.add(Define(int_free, var(e[i]), pos(keep[i])))
            m.add(Define(int_free, var(fe[i]), pos(rec[i])))
            m.add(Define(int_free, var(int_swapfree), pos(swap[i])))
            interval(fs[i], int_free, layer.saved_bytes, None, f[i], in_forward=True)
            interval(cbs[i], e[i], layer.saved_bytes, pos(swap[i]), d_back_int[i] + b[i])
            interval(rs[i], e[i], layer.saved_bytes, pos(rec[i]), f[i] + b[i])
        # The output: its last backward reader is B_i, else B_{i+1}, else the
        # block above (which reads it to the end of its first forward).
        o = layer.out_bytes
        if saves_out[i]:
            reader: int | None = e[i]
        elif saves_in[i + 1]:
            reader = e[i + 1]
        elif not last:
            reader = re_[i + 1]  # read only when layer i+1 is recompute
        else:
            reader = None
        out_free = time(f"out{i}.free")
        m.add(Define(out_free, var(fwd_use), pos(rec[i])))
        swap_free = time(f"out{i}.swapfree")
        m.add(MaxEq(swap_free, ((var(oe[i]), None), (var(fwd_use), None))))
        if read_always[i]:
            m.add(Define(out_free, var(reader), pos(keep[i])))
            m.add(Define(out_free, var(swap_free), pos(swap[i])))
            back_present: Lit | None = pos(swap[i])
        elif reader is not None:  # read only by the block above, if i+1 is recompute
            kept_read = both(pos(keep[i]), pos(rec[i + 1]), f"keepread{i}")
            kept_unread = both(pos(keep[i]), neg(rec[i + 1]), f"keepunread{i}")
            m.add(Define(out_free, var(reader), kept_read))
            m.add(Define(out_free, var(fwd_use), kept_unread))
            back_present = both(pos(swap[i]), pos(rec[i + 1]), f"swapread{i}")
            swap_unread = both(pos(swap[i]), neg(rec[i + 1]), f"swapunread{i}")
            m.add(Define(out_free, var(swap_free), back_present))
            m.add(Define(out_free, var(fwd_use), swap_unread))
        else:  # the last layer's output with no reader
            m.add(Define(out_free, var(fwd_use), pos(keep[i])))
            m.add(Define(out_free, var(fwd_use), pos(swap[i])))
            back_present = None
        interval(fs[i], out_free, o, None, f_pair, in_forward=True)
        if back_present is not None:
            interval(cbs[i], reader, o, back_present, 0)
        # Regenerated in a block: the output to its last reader (B_i, else
        # B_{i+1}), else to the end of its forward use in the block.
        regen_free = time(f"regen{i}.free")
        if saves_out[i]:
            m.add(Define(regen_free, var(e[i]), None))
        elif saves_in[i + 1]:
            m.add(Define(regen_free, var(e[i + 1]), None))
        elif last:
            m.add(Define(regen_free, var(re_[i]), None))
        else:
            m.add(Define(regen_free, var(re_[i + 1]), pos(rec[i + 1])))
            m.add(Define(regen_free, var(re_[i]), neg(rec[i + 1])))
        interval(rs[i], regen_free, o, pos(rec[i]), 0)
        interval(fs[i], fe[i], layer.fwd_work_bytes, None, f[i], in_forward=True)
        interval(rs[i], re_[i], layer.fwd_work_bytes, pos(rec[i]), f[i])
        interval(bs[i], e[i], layer.bwd_work_bytes, None, b[i])
        # Gradients: g_i from B_i to the end of B_{i-1}; parameter gradients to the end.
        if i > 0:
            interval(bs[i], e[i - 1], layer.input_grad_bytes, None, b[i] + b[i - 1])
        interval(bs[i], after_end, layer.param_grad_bytes, None, 1)

    # Redundant: the compute stream alone takes every forward, backward and
    # recomputation (helps the LP bound; implied by the definitions above).
    recompute = Expr(tuple((rec[j], f[j]) for j in range(n)))
    m.add(Linear(var(e[0]) - recompute, sum(f) + sum(b), None, in_ticks=True))
    if redundant:
        if not profile.is_v1:
            raise UnsupportedProfileError(
                "redundant cuts: the profile must be a version-1 reading, got version-2 fields"
            )
        _add_relaxation_cuts(m, profile, e[0], keep, swap, f, b, d_out, d_back, g)
    m.objective = makespan
    n_ops = 5 * n  # forward, recompute, backward, two copies per layer at most
    return Formulation(m, profile, budget, unit, keep, swap, rec, prefetch, wait, n_ops)


def _add_relaxation_cuts(
    m: Model, profile: Profile, end: int, keep, swap, f, b, d_out, d_back, g: int
) -> None:
    """Implied constraints of `solvers.relaxation`, in ticks and memory units.

    Copies back run one at a time, none before the forward pass ends, and all
    of layers >= t end before `B_t`; a swapped layer's copy out and back sit
    between `F_t` and `B_t`; kept tensors below a layer are alive during its
    forward and backward. The exact model implies each of them, but its LP
    relaxation does not see them.
    """
    n = len(f)
    cap = m.capacity
    forward = sum(f)
    for t in range(n):
        tail = sum(b[: t + 1])
        backs = Expr(tuple((swap[i], d_back[i]) for i in range(t, n)))
        m.add(Linear(var(end) - backs, forward + tail, None, in_ticks=True))
        m.add(
            Linear(
                var(end) - Expr(((swap[t], d_out[t] + d_back[t]),)),
                sum(f[: t + 1]) + tail,
                None,
                in_ticks=True,
            )
        )
    s = [layer.product_bytes // g for layer in profile.layers]
    for i, layer in enumerate(profile.layers):
        if layer.fwd > 0 and i >= 2:
            kept = Expr(tuple((keep[j], s[j]) for j in range(i - 1) if s[j]))
            room = cap - s[i - 1] - s[i] - layer.fwd_work_bytes // g
            if kept.terms:
                m.add(Linear(kept, None, room))
        if layer.bwd > 0 and i >= 1:
            kept = Expr(tuple((keep[j], s[j]) for j in range(i) if s[j]))
            if kept.terms:
                m.add(Linear(kept, None, cap - s[i] - layer.bwd_work_bytes // g))


def evaluate(form: Formulation, decisions: dict[int, int]) -> list[int]:
    """Every variable's value implied by the decision literals (model order).

    The model is functional: given the plan, each defined variable follows
    from earlier ones in creation order. Used to warm-start back-ends with a
    complete assignment and, in tests, to check the model against the
    simulator.
    """
    m = form.model
    value = [0] * len(m.vars)
    for v, val in decisions.items():
        value[v] = val

    def lit(x: Lit | None) -> bool:
        return x is None or bool(value[x[0]]) == x[1]

    def ev(ex: Expr) -> int:
        return ex.const + sum(c * value[v] for v, c in ex.terms)

    # Creation order is not topological (an issue time is the end of a later
    # backward), so sweep until nothing changes; acyclic, so this terminates.
    for _ in range(len(m.vars) + 1):
        changed = False
        for c in m.constraints:
            if isinstance(c, Define):
                if not lit(c.when):
                    continue
                new = ev(c.expr)
            elif isinstance(c, MaxEq):
                new = max([0, *(ev(ex) for ex, w in c.terms if lit(w))])
            elif isinstance(c, AndEq):
                new = int(all(lit(x) for x in c.lits))
            elif isinstance(c, GeqReify):
                new = int(ev(c.expr) >= 0)
            else:
                continue
            if value[c.target] != new:
                value[c.target] = new
                changed = True
        if not changed:
            return value
    raise RuntimeError("model evaluation did not converge: the model has a cycle")
