"""Peer planners for benchmarks only: Rotor's DP, through Rockmate 2.0's C solver.

Never imported by the package. Used only where Rockmate is installed (`pip
install --no-deps rockmate` builds the C solver; it is all we load, without
Rockmate's package and its torch front-end). Checkmate is not on PyPI (the
`checkmate` there is an unrelated code checker), so it is not run here.

Rotor models memory its own way (whole units, the input and output always
resident), so only its time to proof is compared with ours, never its
makespan (see `experiments/remat_dp.py`).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import math
import sys
import time
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planopt.profile import Profile

ROTOR_MODULE = "rockmate.solvers.rk_rotor.csolver"
MIB = 2**20


@dataclass(frozen=True)
class PeerRun:
    """A peer's answer: proven optimal (or not), its own objective, and the seconds it took."""

    proven: bool
    objective: float | None
    seconds: float
    note: str = ""


# -- Rotor (Beaumont et al. 2019/2021), through Rockmate 2.0's C solver ------------


def _rotor_module():
    """Rockmate's C solver, loaded without importing Rockmate's package (None if absent)."""
    if ROTOR_MODULE in sys.modules:
        return sys.modules[ROTOR_MODULE]
    try:
        spec = importlib.util.find_spec("rockmate")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    folder = root / "solvers" / "rk_rotor"
    binaries = sorted(folder.glob("csolver*.so")) + sorted(folder.glob("csolver*.pyd"))
    if not binaries:
        return None
    # Empty parent packages: the solver imports only `...rk_rotor.csequence` at start-up.
    for name, path in (
        ("rockmate", root),
        ("rockmate.solvers", root / "solvers"),
        ("rockmate.solvers.rk_rotor", folder),
    ):
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(path)]
            sys.modules[name] = package
    loader = importlib.machinery.ExtensionFileLoader(ROTOR_MODULE, str(binaries[0]))
    module_spec = importlib.util.spec_from_loader(ROTOR_MODULE, loader)
    module = importlib.util.module_from_spec(module_spec)
    loader.exec_module(module)
    sys.modules[ROTOR_MODULE] = module
    return module


def rotor_available() -> bool:
    return _rotor_module() is not None


class RotorChain:
    """A planopt profile in Rotor's terms, memory in `unit` bytes (rounded up, as Rockmate does).

    Stage `i` reads `x_i` (`cw[i]`) and keeps `x̄_i` for its backward
    (`cbw[i+1]`): its output when its backward reads it, its input too when
    that is read, plus its internals. The loss is one more stage of zeros.
    """

    def __init__(self, profile: Profile, unit: int = MIB) -> None:
        layers = profile.layers
        n = self.ln = len(layers)

        def units(b: int) -> int:
            return math.ceil(b / unit)

        self.nb_sol = [1] * (n + 1)
        self.fw = [[x.fwd] for x in layers] + [[0.0]]
        self.bw = [[x.bwd] for x in layers] + [[0.0]]
        self.ff_fw = [x.fwd for x in layers] + [0.0]
        self.cw = [0] + [units(x.out_bytes) for x in layers] + [0]
        cbw = [[0]]
        for i, x in enumerate(layers):
            saved = x.saved_bytes + (x.out_bytes if x.saves_output else 0)
            saved += layers[i - 1].out_bytes if (i > 0 and x.saves_input) else 0
            cbw.append([units(saved)])
        cbw[n] = [max(0, cbw[n][0] - self.cw[n])]  # Rockmate: the final output is not budgeted
        cbw.append([0])
        self.cbw = cbw
        self.fwd_tmp = [[units(x.fwd_work_bytes)] for x in layers] + [[0]]
        self.bwd_tmp = [[units(x.bwd_work_bytes)] for x in layers] + [[0]]
        self.ff_fwd_tmp = [units(x.fwd_work_bytes) for x in layers] + [0]
        self.unit = unit

    def slots(self, activation_budget: float) -> int:
        """Rockmate's `discretize_budget`: whole units, less the input and final output."""
        return int(activation_budget // self.unit) - self.cw[0] - self.cw[self.ln]


def rotor(
    profile: Profile,
    activation_budget: float,
    unit: int = MIB,
    clock: Callable[[], float] = time.perf_counter,
) -> PeerRun:
    """Rotor's optimum for `activation_budget` bytes above the static ones, timed by `clock`
    (`time.process_time` on a shared machine: CPU seconds, blind to other processes)."""
    module = _rotor_module()
    if module is None:
        return PeerRun(False, None, math.nan, "rockmate not installed")
    chain = RotorChain(profile, unit)
    slots = chain.slots(activation_budget)
    cells = (slots + 1) * (chain.ln + 1) ** 2
    if cells >= 2**31:  # the solver indexes its table with a C int
        return PeerRun(False, None, math.nan, f"table of {cells:.2g} cells overflows Rotor's index")
    start = clock()
    table = module.RkTable(chain, slots)
    value = table.get_opt(slots)
    seconds = clock() - start
    del table
    proven = math.isfinite(value)
    return PeerRun(proven, value if proven else None, seconds, "" if proven else "infeasible")
