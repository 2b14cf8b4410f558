"""The block menu's front (`planopt.sacmenu`) against brute force over every SAC policy."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from planopt.sacmenu import MenuEntry, MenuError, MenuOp, pareto_menu, policy_cost, thin


def _valid(ops, cut, policy) -> bool:
    """A policy SAC can run: saveable operators only; saved random ones a suffix before `cut`."""
    if any(not ops[j].saveable for j in policy):
        return False
    randoms = [j for j in range(cut) if ops[j].random and ops[j].saveable]
    flags = [j in policy for j in randoms]
    return flags == sorted(flags)


def _brute(ops, sizes, cut, below=None):
    """Every subset of operators, its (h, r) by the definition, then the Pareto front."""
    points = []
    for n in range(len(ops) + 1):
        for policy in itertools.combinations(range(len(ops)), n):
            if _valid(ops, cut, policy):
                points.append(policy_cost(ops, sizes, cut, policy))
    front = []
    for h, r in sorted(points, key=lambda p: (p[0], p[1])):
        if below is not None and h >= below:
            continue
        if not front or r < front[-1][1] - 1e-12:
            front.append((h, r))
    return front


def _instance(rng: random.Random):
    n = rng.randint(1, 9)
    n_storages = rng.randint(1, 5)
    sizes = [rng.choice([0, 64, 128, 512, 1024]) for _ in range(n_storages)]
    ops = []
    for _ in range(n):
        k = rng.choice([0, 1, 1, 1, 2])
        ops.append(
            MenuOp(
                seconds=rng.choice([0.0, 1.0, 2.0, 3.5, 0.25]),
                storages=tuple(sorted(rng.sample(range(n_storages), min(k, n_storages)))),
                saveable=rng.random() < 0.85,
                random=rng.random() < 0.25,
            )
        )
    return ops, sizes, rng.randint(0, n)


@pytest.mark.parametrize("seed", range(300))
def test_the_front_is_brute_force_over_every_policy(seed):
    ops, sizes, cut = _instance(random.Random(seed))
    below = random.Random(seed + 1000).choice([None, 256, 1024])
    menu = pareto_menu(ops, sizes, cut, below=below)
    want = _brute(ops, sizes, cut, below)
    assert [e.saved_bytes for e in menu] == [h for h, _ in want]
    for e, (_, r) in zip(menu, want, strict=True):
        assert math.isclose(e.recompute, r, abs_tol=1e-9)
        # each entry's policy is one SAC can run and costs what the entry says
        assert _valid(ops, cut, e.policy)
        h, r_policy = policy_cost(ops, sizes, cut, e.policy)
        assert h == e.saved_bytes and math.isclose(r_policy, e.recompute, abs_tol=1e-9)


def test_a_random_operator_saved_makes_every_later_one_saved():
    # two dropouts, each with its own storage: saving only the first is not a policy
    ops = [
        MenuOp(1.0, (0,), random=True),
        MenuOp(1.0, (1,), random=True),
    ]
    menu = pareto_menu(ops, [10, 10], cut=2)
    assert [(e.saved_bytes, e.policy) for e in menu] == [(0, ()), (10, (1,)), (20, (0, 1))]


def test_operators_after_the_cut_are_never_saved_and_cost_nothing():
    ops = [MenuOp(1.0, (0,)), MenuOp(5.0, (1,))]
    menu = pareto_menu(ops, [8, 8], cut=1)
    assert [(e.saved_bytes, e.recompute, e.policy) for e in menu] == [(0, 1.0, ()), (8, 0.0, (0,))]


def test_views_of_a_saved_storage_are_saved_free():
    # op 1 is a view of op 0's output: saving op 0's storage saves both
    ops = [MenuOp(2.0, (0,)), MenuOp(0.5, (0,)), MenuOp(1.0, (), saveable=True)]
    menu = pareto_menu(ops, [100], cut=3, fixed=0.25)
    assert menu == (MenuEntry(0, 2.75, (2,)), MenuEntry(100, 0.25, (0, 1, 2)))


def test_thin_keeps_both_ends_and_the_size():
    menu = tuple(MenuEntry(h, 100.0 - h, (h,)) for h in range(0, 100, 3))
    small = thin(menu, 5)
    assert len(small) == 5 and small[0] == menu[0] and small[-1] == menu[-1]
    assert [e.saved_bytes for e in small] == sorted(e.saved_bytes for e in small)
    assert thin(menu[:3], 5) == menu[:3]


@pytest.mark.parametrize(
    ("ops", "sizes", "cut", "match"),
    [
        ([MenuOp(1.0)], [], 2, "cut must be in 0..1"),
        ([MenuOp(-1.0)], [], 1, "seconds must be >= 0"),
        ([MenuOp(1.0, (3,))], [1], 1, "storage 3 is not one of"),
        ([MenuOp(1.0)], [-1], 1, "bytes must be >= 0"),
    ],
)
def test_bad_records_are_refused_with_the_rule(ops, sizes, cut, match):
    with pytest.raises(MenuError, match=match):
        pareto_menu(ops, sizes, cut)


def test_one_operator_with_many_storages_is_saved_whole_or_not():
    # 20 storages, one operator: 2 choices, enumerated over the operator, not 2**20
    ops = [MenuOp(1.0, tuple(range(20))), MenuOp(0.5, (3,))]
    menu = pareto_menu(ops, [1] * 20, cut=2)
    assert [(e.saved_bytes, e.recompute, e.policy) for e in menu] == [
        (0, 1.5, ()),
        (1, 1.0, (1,)),
        (20, 0.0, (0, 1)),
    ]


def test_a_group_too_large_either_way_is_refused_with_the_rule():
    ops = [MenuOp(1.0, (k, k + 1)) for k in range(17)]
    with pytest.raises(MenuError, match="at most 16 operators or storages of a group"):
        pareto_menu(ops, [1] * 18, cut=17)


def test_memory_by_hand_a_chain_of_four_operators():
    """a = f(x), b = g(a), c = h(b), d = k(c), out = m(d); autograd saves a and d (10 bytes
    each, s = 20); the block's code releases a after g, b after h, c after k, d and out at
    the end; the replay stops before m (cut 4). Worked by hand (module NOTE on memory)."""
    from planopt.menumemory import BlockMemory, Lifetime, PolicyMemory, policy_memory

    ops = [MenuOp(1.0, (s,)) for s in range(4)] + [MenuOp(1.0)]
    lives = (
        Lifetime(10, 0, 2, 0),
        Lifetime(10, 1, 3, 1),
        Lifetime(10, 2, 4, 2),
        Lifetime(10, 3, 5, 3),
        Lifetime(10, 4, 5, None),
    )
    memory = BlockMemory(lives, frozenset({0, 3}), 20)
    # plain: a+b+c after h, a+c+d after k, a+d+out after m: 30
    assert policy_memory(ops, memory, 4, ()) == PolicyMemory(30, 20, 30)
    # caching b and c keeps them to the end: b+c+d+out after m
    assert policy_memory(ops, memory, 4, (1, 2)) == PolicyMemory(30, 40, 30)
    # caching d: the cache holds it from the replay's start: a+b+c+d after h
    assert policy_memory(ops, memory, 4, (0, 3)) == PolicyMemory(30, 30, 40)
    menu = pareto_menu(ops, [10] * 4, 4, memory=memory)
    # (0, 1) holds a+b+c+d after k (40 > 30): left out, (0, 3) saves as much; so do all
    # entries holding 30 bytes or more
    assert [(e.saved_bytes, e.recompute, e.policy, e.regen_work_bytes) for e in menu] == [
        (0, 4.0, (), 10),
        (10, 3.0, (0,), 10),
        (20, 2.0, (0, 3), 20),
    ]


def test_forward_fits_false_prices_the_whole_front():
    """The chain of four operators above: without the v3 filter every point of the exact
    front stays, each priced (its replay scratch). By default the points at 30 and 40
    bytes go (every policy holding them caches a storage autograd does not save past
    its release: 40 bytes in the forward against the plain 30), and at 20 bytes a
    fitting policy, (0, 3), replaces the front's first one, (0, 1)."""
    from planopt.menumemory import BlockMemory, Lifetime, policy_memory

    ops = [MenuOp(1.0, (s,)) for s in range(4)] + [MenuOp(1.0)]
    lives = (*(Lifetime(10, j, j + 2, j) for j in range(3)), Lifetime(10, 3, 5, 3))
    lives += (Lifetime(10, 4, 5, None),)
    memory = BlockMemory(lives, frozenset({0, 3}), 20)
    full = pareto_menu(ops, [10] * 4, 4, memory=memory, forward_fits=False)
    fitting = pareto_menu(ops, [10] * 4, 4, memory=memory)
    assert [(e.saved_bytes, e.recompute) for e in full] == [
        (h, 4 - h / 10) for h in range(0, 50, 10)
    ]
    assert [e.policy for e in full][:3] == [(), (0,), (0, 1)]
    assert [e.policy for e in fitting] == [(), (0,), (0, 3)]
    for e in full:
        peaks = policy_memory(ops, memory, 4, e.policy)
        assert (e.saved_bytes < 20) == (peaks.forward <= peaks.plain)
        assert e.regen_work_bytes == max(0, peaks.replay - 20)


def _lifetimes(rng: random.Random, ops, sizes):
    from planopt.menumemory import BlockMemory, Lifetime

    n = len(ops)
    lives = []
    for s, size in enumerate(sizes):
        users = [j for j, op in enumerate(ops) if s in op.storages]
        if users:
            lives.append(Lifetime(size, users[0], rng.randint(users[-1] + 1, n), s))
    lives.append(Lifetime(rng.choice([0, 64, 256]), n - 1, n, None))
    saved = frozenset(s for s in range(len(sizes)) if rng.random() < 0.5)
    return BlockMemory(tuple(lives), saved, sum(sizes[s] for s in saved), rng.random() < 0.3)


@pytest.mark.parametrize("seed", range(150))
def test_with_memory_every_entry_fits_and_none_caching_saved_storages_is_missed(seed):
    """Brute force: each entry's checkpointed forward holds at most the plain one's peak,
    its regen_work_bytes is its replay's peak beyond s (and the output when saved), and
    every policy caching only storages autograd saves is matched or beaten by an entry."""
    from planopt.menumemory import policy_memory

    rng = random.Random(seed)
    ops, sizes, cut = _instance(rng)
    memory = _lifetimes(rng, ops, sizes)
    menu = pareto_menu(ops, sizes, cut, memory=memory)
    out = sum(m.nbytes for m in memory.lifetimes if m.storage is None) * memory.output_saved
    for e in menu:
        peaks = policy_memory(ops, memory, cut, e.policy)
        assert _valid(ops, cut, e.policy) and peaks.forward <= peaks.plain
        assert e.regen_work_bytes == max(0, peaks.replay - memory.saved_bytes - out)
    for a, b in itertools.pairwise(menu):
        assert a.saved_bytes < b.saved_bytes and a.recompute > b.recompute - 1e-12
    for k in range(len(ops) + 1):
        for policy in itertools.combinations(range(len(ops)), k):
            cached = {s for j in policy for s in ops[j].storages}
            if not _valid(ops, cut, policy) or not cached <= memory.saved:
                continue
            h, r = policy_cost(ops, sizes, cut, policy)
            fixed = policy_memory(ops, memory, cut, policy)
            assert fixed.forward <= fixed.plain  # caching only what autograd saves
            assert any(e.saved_bytes <= h and e.recompute <= r + 1e-9 for e in menu), policy
