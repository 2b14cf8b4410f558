"""Who reads each layer's output in backward, and how long each copy takes (spec v2).

The output of layer `i` is read by `B_i` (it saves its output), by `B_{i+1}`
(it saves its input), or only by the recompute block of the run that starts
at `i + 1`, which depends on the plan. A swap copies the internals always
and the output only when some backward reader needs it, so a swap's copy
durations depend on whether layer `i + 1` is recomputed exactly when no
backward always reads the output. Every section of the model reads these
facts from here.
"""

from __future__ import annotations

from dataclasses import dataclass

from planopt.profile import Profile
from solvers.model.units import TimeScale


@dataclass(frozen=True)
class Reads:
    """Per layer: its readers, and its copy durations in ticks (with and without its output)."""

    saves_input: tuple[bool, ...]  # length n + 1 (a virtual layer above the chain reads nothing)
    saves_output: tuple[bool, ...]
    out_full: tuple[int, ...]  # D2H of internals and output
    out_internal: tuple[int, ...]  # D2H of the internals alone
    back_full: tuple[int, ...]
    back_internal: tuple[int, ...]
    # Cost model v3: per layer, per option of its menu (in menu order), the copy
    # durations of its kept subset with and without the output.
    opt_out_full: tuple[tuple[int, ...], ...] = ()
    opt_out_internal: tuple[tuple[int, ...], ...] = ()
    opt_back_full: tuple[tuple[int, ...], ...] = ()
    opt_back_internal: tuple[tuple[int, ...], ...] = ()

    @property
    def n(self) -> int:
        return len(self.saves_output)

    def read_always(self, i: int) -> bool:
        """Whether a backward reads the output of `i` whatever the plan (`B_i` or `B_{i+1}`)."""
        return self.saves_output[i] or self.saves_input[i + 1]

    def out_depends_on_block(self, i: int) -> bool:
        """Whether the copy out of `i` takes longer when layer `i + 1` is recomputed
        (its output is copied only for the block of that run)."""
        return self._depends(i, self.out_full, self.out_internal)

    def back_depends_on_block(self, i: int) -> bool:
        return self._depends(i, self.back_full, self.back_internal)

    def _depends(self, i: int, full: tuple[int, ...], internal: tuple[int, ...]) -> bool:
        return not (self.read_always(i) or i == self.n - 1 or full[i] == internal[i])

    def out_least(self, i: int) -> int:
        """The copy out's duration every plan that swaps `i` pays at least."""
        return self.out_full[i] if self.read_always(i) else self.out_internal[i]

    def back_least(self, i: int) -> int:
        return self.back_full[i] if self.read_always(i) else self.back_internal[i]


def reads_of(profile: Profile, times: TimeScale) -> Reads:
    layers = profile.layers
    dev = profile.device

    def per_option(seconds, with_out: bool) -> tuple[tuple[int, ...], ...]:
        return tuple(
            tuple(
                times.ticks(seconds(o.saved_bytes + (x.out_bytes if with_out else 0)))
                for o in x.options
            )
            for x in layers
        )

    return Reads(
        saves_input=(*(x.saves_input for x in layers), False),
        saves_output=tuple(x.saves_output for x in layers),
        out_full=tuple(times.ticks(dev.d2h_seconds(x.product_bytes)) for x in layers),
        out_internal=tuple(times.ticks(dev.d2h_seconds(x.saved_bytes)) for x in layers),
        back_full=tuple(times.ticks(dev.h2d_seconds(x.product_bytes)) for x in layers),
        back_internal=tuple(times.ticks(dev.h2d_seconds(x.saved_bytes)) for x in layers),
        opt_out_full=per_option(dev.d2h_seconds, True),
        opt_out_internal=per_option(dev.d2h_seconds, False),
        opt_back_full=per_option(dev.h2d_seconds, True),
        opt_back_internal=per_option(dev.h2d_seconds, False),
    )
