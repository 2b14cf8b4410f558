"""Where a solve's lower bound comes from: the certificate's provenance.

A gap is only as good as its bound. A plan far above a bound may be a weak
plan or a weak certificate (a relaxation cut short, or no relaxation at
all, so the bound is `T_ideal`); this record says which, so a user can
tell them apart without reading the message.
"""

from __future__ import annotations

from dataclasses import dataclass

# `Certificate.source` values.
# The relaxation (`solvers.model.relaxation`): cost model v2's rows, and over menus
# (v3) one more action per option, so it bounds plans that take options too.
LP = "lp"  # the relaxation solved as an LP, to optimality
MIP = "mip"  # the relaxation as a MIP: its proven dual bound (complete or cut short)
T_IDEAL = "t-ideal"  # no relaxation solved in the share: the bound is T_ideal
OPTIMUM = "optimum"  # the method proved its plan optimal: the bound is the plan itself
METHOD = "method"  # the method's own bound (e.g. brute force, an exact back-end)


@dataclass(frozen=True)
class Certificate:
    """The provenance of a lower bound.

    `source`: one of `LP`, `MIP`, `T_IDEAL`, `OPTIMUM`, `METHOD`.
    `complete`: the bound is that source's own optimum (an LP or MIP solved
    to the end, a proven optimum), not a point where a limit stopped it, so
    more time would not raise it. `seconds` and `work` are what proving it
    cost (`planopt.work` units). `detail` says more in words.
    """

    source: str
    complete: bool
    seconds: float = 0.0
    work: float = 0.0
    detail: str = ""

    def summary(self) -> str:
        """One line for `planopt solve`'s output."""
        state = "complete" if self.complete else "cut short"
        text = f"{self.source} ({state}; {self.seconds:.2f} s, {self.work:.3g} work units)"
        return f"{text}: {self.detail}" if self.detail else text

    def to_dict(self) -> dict:
        """The `--json` shape (`bound_provenance`)."""
        return {
            "source": self.source,
            "complete": self.complete,
            "seconds": self.seconds,
            "work": self.work,
            "detail": self.detail,
        }
