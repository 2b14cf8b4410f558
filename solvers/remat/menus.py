"""remat-dp over menus (cost model v3): keep whole, keep an option, or recompute, per layer.

NOTE (the theorem, extended). `chain`'s note cuts a keep/recompute plan into
segments `(k, t)`: kept layer `k`, the run `k+1 .. t`, the next kept layer
`t+1`; the layers below `k` hold one number `H_k` while the segment's ops run,
and the segment adds a cost that depends on `(k, t)` alone. With menus a
kept layer `k` also names an option `a` (or none): it then keeps `h(k, a)`
of its internals (`s_k` without an option) from the end of `F_k`, reads its
input (cost model v3, 12.2), and runs `R_k` (`r(k, a)` seconds, allocating
`s_k - h(k, a)` plus `w(k, a)` of scratch) just before `B_k`. Every step of
`chain`'s proof goes through with these substitutions, so the segment's cost
depends on `(k, a, t, b)`, `b` the option of layer `t+1`:

- `reads(j)` (step `j` reads `x_j`) is `saves_input_j`, or true when layer
  `j` is kept with an option; so the block runs at `u = t+1` when `reads(t+1)`;
- what kept layer `k` holds while the segment's forwards run is `base =
  h(k, a) + o_k`; after the block (or for an empty run, above it) `r_k =
  h(k, a) + [saves_output_k or reads(k+1)] o_k`; a regenerated `j` of the run
  holds `r_j = s_j + [saves_output_j or reads(j+1)] o_j` (`reads(t+1)` for `j = t`);
- the forwards, the block and the run's backwards cost what `chain` says,
  with this `base` and these `r`; `U_u` (what step `u = t+1` holds above the
  block) is `g_{t+2} + sum_{i>t+1} pg_i + h(t+1, b) + [saves_output_{t+1}] o_{t+1}`;
- step `t+1` costs `hold + bl_{t+1}` for `B_{t+1}` and, for an option `b`,
  `hold + s_{t+1} + [saves_output_{t+1}] o_{t+1} + w(t+1, b) + g_{t+2} +
  sum_{i>t+1} pg_i` for `R_{t+1}`, where `hold` is `sum_{j=k..t} r_j` after the
  block (`u = t+1`, or an empty run) and `base` before it (`u = t`);
- kept layer `k` then adds `held = base` to `H` when its run is non-empty,
  `r_k` when it is empty (its output's readers all lie at steps `<= k+1`).

The objective is additive (`T_ideal` plus the recomputed forwards and every
`r(k, a)` taken), the constraint is `H_k + cost <= room` on every segment
and `sum(pg) <= room`: a resource-constrained path over nodes `(k, a)`,
solved exactly by labels `(H, seconds)` kept Pareto-minimal per node. A
negative backward scratch needs nothing more: `bl_j` holds it signed, the
memory inside `B_j` (cost model v3, 12.6). The tests check the optimum
against enumeration of every keep/option/recompute plan and each plan's
peak against `planopt.simulate`.
"""

from __future__ import annotations

from dataclasses import dataclass

from planopt.profile import Profile
from planopt.runnable import reads_below
from solvers.remat.rule import FORBID

NEG = -(1 << 62)  # "no op of positive duration here"
DEAD = 1 << 62  # "no completion from here fits"


@dataclass(frozen=True)
class MenuPlan:
    """A keep/option/recompute plan: each layer's action and option, its makespan and peak."""

    actions: tuple[str, ...]
    options: tuple[str | None, ...]
    makespan: float
    peak: int


class MenuChain:
    """A profile's numbers for the DP: per layer its choices when kept, and its segment terms."""

    def __init__(self, profile: Profile) -> None:
        layers = profile.layers
        n = self.n = len(layers)
        self.profile = profile
        self.static = profile.static_bytes
        self.fwd = [x.fwd for x in layers]
        self.o = [x.out_bytes for x in layers]
        self.s = [x.saved_bytes for x in layers]
        self.so = [x.saves_output for x in layers]
        self.si = [x.saves_input for x in layers] + [False]
        self.g = [x.input_grad_bytes for x in layers] + [0, 0]
        pg_from = [0] * (n + 2)
        for i in range(n - 1, -1, -1):
            pg_from[i] = pg_from[i + 1] + layers[i].param_grad_bytes
        self.pg_from = pg_from
        self.p = [x.saved_bytes + x.out_bytes + x.fwd_work_bytes for x in layers]
        self.bl = [
            self.s[i]
            + (self.o[i] if self.so[i] else 0)
            + self.g[i]
            + self.g[i + 1]
            + pg_from[i]
            + layers[i].bwd_work_bytes
            for i in range(n)
        ]
        self.tf = [x.fwd > 0 for x in layers]
        self.tb = [x.bwd > 0 for x in layers]
        # Choices of a kept layer: (option name or None, h, r seconds, w).
        self.choices = [
            [(None, x.saved_bytes, 0.0, 0)]
            + [(o.name, o.saved_bytes, o.recompute, o.regen_work_bytes) for o in x.options]
            for x in layers
        ]

        # The in-place rule (`planopt.runnable`): per layer, whether it changes its
        # input in place, and whether that input has a backward reader below.
        self.rule = profile.modifies_inputs
        self.modifies = [x.modifies_input for x in layers]
        self.read_below = [reads_below(profile, j) for j in range(n)] if self.rule else []

    def forbidden(self, k: int, t: int, b: int) -> bool:
        """Whether segment `(k, t)` with layer `t+1` kept with choice `b` breaks the
        in-place rule: a run starting at a layer that changes its input (its replay
        would start from the changed value), a kept layer that changes its input
        taking an option (a replay) right above a kept one, or kept whole right
        above a run's top whose output is read below it."""
        if not self.rule:
            return False
        j = t + 1
        if t > k:
            if self.modifies[k + 1]:
                return True
            return j < self.n and self.modifies[j] and b == 0 and self.read_below[j]
        return j < self.n and self.modifies[j] and b > 0

    def reads(self, j: int, b: int) -> bool:
        """Step `j` reads its input when layer `j` (kept with choice `b`) saves it or is partial."""
        return j < self.n and (self.si[j] or b > 0)

    def segment(self, k: int, a: int, t: int, b: int) -> tuple[int, int, int]:
        """`(cost, held, growing)` of segment `(k, t)`, layer `k` kept with choice `a`
        (k = -1: the batch), layer `t+1` kept with choice `b` (ignored when `t = L-1`).

        `growing` is the largest of its forwards' and its run's backwards' terms,
        which every longer run from the same `(k, a)` holds too (NEG if none).
        """
        n, o, s, so, p = self.n, self.o, self.s, self.so, self.p
        top = t + 1 < n
        nb = self.choices[t + 1][b] if top else None
        reads_next = top and self.reads(t + 1, b)
        if k >= 0:
            h = self.choices[k][a][1]
            base = h + o[k]
            r_k = h + (o[k] if so[k] or (self.si[k + 1] if t > k else reads_next) else 0)
        else:
            base = r_k = 0
        cost = NEG
        # forwards F_{k+1} .. F_{t+1}
        for i in range(k + 1, min(t + 1, n - 1) + 1):
            if self.tf[i]:
                cost = max(cost, base + p[i] + (o[i - 1] if i >= k + 2 else 0))
        growing = cost
        hold = r_k  # r_k + r_{k+1} + ... (the regenerated layers' holdings so far)
        if t > k:
            u_next = reads_next  # the block runs at t+1
            if u_next:
                above = self.g[t + 2] + self.pg_from[t + 2] + nb[1] + (o[t + 1] if so[t + 1] else 0)
            else:
                above = self.g[t + 1] + self.pg_from[t + 1]
            if self.tf[k + 1]:
                cost = max(cost, base + p[k + 1] + above)
            for j in range(k + 1, t + 1):
                if j >= k + 2 and self.tf[j]:  # F'_j in the block, reading x_j
                    cost = max(cost, hold + s[j - 1] + o[j - 1] + p[j] + above)
                if j >= k + 2:
                    reads = self.si[j]
                    hold += s[j - 1] + (o[j - 1] if so[j - 1] or reads else 0)
                if self.tb[j]:  # B_j in the run (after the block)
                    growing = max(growing, hold + self.bl[j])
                    cost = max(cost, hold + self.bl[j])
            # the run's top t: its output is read at t+1 when reads_next
            hold += s[t] + (o[t] if so[t] or reads_next else 0)
            if top:
                step = hold if u_next else base
                cost = max(cost, self._top_step(t + 1, nb, step))
            held = base if k >= 0 else 0
        else:
            if top:
                cost = max(cost, self._top_step(t + 1, nb, r_k))
            held = r_k
        return cost, held, growing

    def row(self, k: int, a: int):
        """`(t, b, cost, held, growing)` for every top `t >= k` and choice `b` of layer
        `t+1`: `segment`'s numbers, each in O(1) from running maxima along `t`."""
        n, o, s, so, p, si, tf, tb = (
            self.n,
            self.o,
            self.s,
            self.so,
            self.p,
            self.si,
            self.tf,
            self.tb,
        )
        for b in range(len(self.choices[k + 1])) if k + 1 < n else (0,):
            cost, held, growing = self.segment(k, a, k, b)
            yield k, b, FORBID if self.forbidden(k, k, b) else cost, held, growing
        if k + 1 >= n:
            return
        h = self.choices[k][a][1] if k >= 0 else 0
        base = h + o[k] if k >= 0 else 0
        r_k = h + (o[k] if so[k] or si[k + 1] else 0) if k >= 0 else 0
        first = base + p[k + 1] if tf[k + 1] else NEG  # F_{k+1}, and F'_{k+1} without U
        fmax, qmax, bmax, hold = first, NEG, NEG, r_k
        for t in range(k + 1, n):
            # F_{t} joined the forwards at t-1; F'_t and B_t join the block and the run now.
            if t >= k + 2:
                if tf[t]:
                    qmax = max(qmax, hold + s[t - 1] + o[t - 1] + p[t])
                hold += s[t - 1] + (o[t - 1] if so[t - 1] or si[t] else 0)
            if tb[t]:
                bmax = max(bmax, hold + self.bl[t])
            top = t + 1 < n
            if top and tf[t + 1]:
                fmax = max(fmax, base + o[t] + p[t + 1])
            growing = max(fmax, bmax)
            for b in range(len(self.choices[t + 1])) if top else (0,):
                nb = self.choices[t + 1][b] if top else None
                reads_next = top and self.reads(t + 1, b)
                if reads_next:
                    above = (
                        self.g[t + 2] + self.pg_from[t + 2] + nb[1] + (o[t + 1] if so[t + 1] else 0)
                    )
                else:
                    above = self.g[t + 1] + self.pg_from[t + 1]
                cost = growing
                if first > NEG:
                    cost = max(cost, first + above)
                if qmax > NEG:
                    cost = max(cost, qmax + above)
                if top:
                    if reads_next:
                        step = hold + s[t] + (o[t] if so[t] or reads_next else 0)
                    else:
                        step = base
                    cost = max(cost, self._top_step(t + 1, nb, step))
                if self.forbidden(k, t, b):
                    cost = FORBID
                yield t, b, cost, base, growing

    def _top_step(self, j: int, choice: tuple, hold: int) -> int:
        """The cost of step `j` (its `R_j` for an option, then `B_j`) above `hold` bytes."""
        cost = hold + self.bl[j] if self.tb[j] else NEG
        name, _h, r, w = choice
        if name is not None and r > 0:
            regen = (
                self.s[j]
                + (self.o[j] if self.so[j] else 0)
                + w
                + self.g[j + 1]
                + self.pg_from[j + 1]
            )
            cost = max(cost, hold + regen)
        return cost

    # -- one plan's peak (the certificate a test checks against the simulator) -----

    def peak(self, actions: tuple[str, ...], options: tuple[str | None, ...]) -> int:
        """The peak of a keep/option/recompute plan by the segment decomposition."""
        kept = [i for i, act in enumerate(actions) if act != "recompute"]
        nodes = [(-1, 0)] + [(k, self._index(k, options[k])) for k in kept]
        worst, held_below = self.pg_from[0], 0
        for x, (k, a) in enumerate(nodes):
            nxt = nodes[x + 1] if x + 1 < len(nodes) else (self.n, 0)
            cost, held, _ = self.segment(k, a, nxt[0] - 1, nxt[1])
            if cost > NEG:
                worst = max(worst, held_below + cost)
            held_below += held
        return self.static + worst

    def _index(self, k: int, name: str | None) -> int:
        for b, choice in enumerate(self.choices[k]):
            if choice[0] == name:
                return b
        raise KeyError(name)
