"""The benchmark-only peers: Rotor's recursion in Python against Rockmate's C solver, and
the non-nested variant's two implementations against each other."""

from __future__ import annotations

import math
import random

import pytest

import planopt
from experiments.peers import RotorChain, rotor_available
from experiments.remat_dp import synthetic_chain
from experiments.rotor_model import keep_all_slots, rotor_flat, rotor_recursive
from planopt.profile import Device, Layer, Profile


def _random_chain(seed: int) -> Profile:
    rng = random.Random(seed)
    n = rng.randint(2, 9)
    layers = []
    for i in range(n):
        layers.append(
            Layer(
                f"l{i}",
                rng.randint(1, 6) / 4,
                rng.randint(1, 6) / 4,
                out_bytes=rng.randint(1, 9),
                saved_bytes=rng.choice([0, rng.randint(1, 5)]),
                saves_input=rng.random() < 0.4,
                saves_output=rng.random() < 0.7,
                fwd_work_bytes=rng.choice([0, 0, rng.randint(1, 4)]),
                bwd_work_bytes=rng.choice([0, 0, rng.randint(1, 4)]),
            )
        )
    return Profile(f"r{seed}", Device("d", 1.0, 1.0, 0.0), 0, tuple(layers))


@pytest.mark.parametrize("seed", range(15))
def test_the_non_nested_recursion_and_its_vectorised_form_agree(seed):
    chain = RotorChain(_random_chain(seed), unit=1)
    full = keep_all_slots(chain)
    for slots in range(0, full + 3):
        once = rotor_recursive(chain, slots, nested=False)
        assert rotor_flat(chain, slots) == pytest.approx(once, rel=1e-12) or (
            math.isinf(once) and math.isinf(rotor_flat(chain, slots))
        )
        assert rotor_recursive(chain, slots) <= once  # nesting can only help
    assert math.isfinite(rotor_recursive(chain, full, nested=False))


@pytest.mark.skipif(not rotor_available(), reason="Rockmate's C solver is not installed")
@pytest.mark.parametrize("seed", range(15))
def test_the_python_recursion_is_rockmates_c_solver(seed):
    from experiments.peers import _rotor_module

    chain = RotorChain(_random_chain(seed), unit=1)
    module = _rotor_module()
    for slots in range(0, keep_all_slots(chain) + 3):
        ours = rotor_recursive(chain, slots)
        theirs = module.RkTable(chain, slots).get_opt(slots)
        assert ours == pytest.approx(theirs, rel=1e-12) or (math.isinf(ours) and math.isinf(theirs))


def test_the_comparison_chain_is_the_published_one():
    chain = synthetic_chain(8)
    mib = 2**20
    assert [x.fwd for x in chain.layers] == pytest.approx([(1 + i % 3) * 1e-3 for i in range(8)])
    assert [x.bwd for x in chain.layers] == pytest.approx([2 * x.fwd for x in chain.layers])
    assert [x.out_bytes for x in chain.layers] == [(64 + 16 * (i % 4)) * mib for i in range(8)]
    assert chain.is_v1 and planopt.keep_all_peak(chain) > 0


def test_the_benchmark_summary_says_where_the_dp_overtakes_rotor():
    from experiments.remat_dp import Timed, _summary

    def row(n, ours, theirs):
        rotor = None if theirs is None else Timed("optimal", theirs)
        return (0.5, n, Timed("optimal", ours), None, rotor)

    rows = [
        row(16, 0.003, 0.0002),
        row(64, 0.009, 0.013),
        row(100, 0.02, 0.07),
        row(1000, 0.3, None),
    ]
    text = _summary(rows)
    assert "1,000-layer chain in 300 ms" in text
    assert "from 64 layers on at every budget" in text
    assert "Rotor's C is faster at 16 layers at 50% (15.0x)" in text
    assert "faster nowhere" in _summary([row(16, 0.0001, 0.0002)])
    warmed = (0.5, 16, Timed("optimal", 0.0003), None, Timed("optimal", 0.0005, warm=0.0001))
    text = _summary([warmed])
    assert "Rotor's C is faster nowhere" in text
    assert "later calls (in brackets) are faster than the method at 16 layers at 50% (3.0x)" in text
    rows.insert(2, row(80, 0.05, 0.01))  # slower again at 80: only from 100 on
    assert "from 100 layers on at every budget" in _summary(rows)
    rows.append((0.3, 200, Timed("optimal", 0.1), None, Timed("optimal", 1.0)))
    assert "from 200 layers on at 30%, 100 layers on at 50%" in _summary(rows)


def test_the_nesting_study_concludes_from_its_rows():
    from experiments.remat_nested import _conclusion

    rows = {0.5: (0.10, 0.12, None, "optimal"), 0.3: (0.2, None, None, "infeasible")}
    results = [
        {"name": "a", "n": 9, "rows": rows, "nested_min": 0.04, "once_min": 0.14},
        {"name": "b", "n": 9, "skipped": "too long"},
    ]
    text = _conclusion([0.5, 0.3], results)
    assert "at most 1.8% (a at 50%)" in text  # (0.12 - 0.10) / 1.12
    assert "a 14% → 4%" in text
    rows[0.5] = (0.12, 0.12, None, "optimal")
    assert "lowers no makespan" in _conclusion([0.5, 0.3], results)
