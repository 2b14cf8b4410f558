"""Synthetic chains: deterministic per seed, valid for every family and length."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planopt.budget import keep_all_peak, min_budget
from planopt.errors import InvalidProfileError
from planopt.io import profile_from_dict, profile_to_dict
from planopt.profile import Device, Layer
from planopt.random_chain import DEFAULT_DEVICE, FAMILIES, random_chain, repeated_chain


def _numbers(layer: Layer) -> tuple:
    return (layer.fwd, layer.bwd, layer.product_bytes, layer.fwd_work_bytes, layer.bwd_work_bytes)


@pytest.mark.parametrize("family", FAMILIES)
def test_valid_for_every_length(family):
    for n in range(1, 201):
        p = random_chain(n, seed=n, family=family)
        assert len(p) == n
        assert p.names == tuple(f"l{i}" for i in range(n))
        assert all(x.fwd > 0 and x.bwd > 0 for x in p.layers)
        assert sum(x.product_bytes for x in p.layers) > 0
        # static is the stated fraction (0.25) of the summed saved bytes
        assert p.static_bytes == round(0.25 * sum(x.product_bytes for x in p.layers))
        assert profile_from_dict(profile_to_dict(p)) == p  # survives the JSON format


@pytest.mark.parametrize("family", FAMILIES)
def test_deterministic_per_seed_and_different_across_seeds(family):
    for n in (1, 7, 60):
        assert random_chain(n, seed=3, family=family) == random_chain(n, seed=3, family=family)
    chains = {
        tuple(map(_numbers, random_chain(40, seed=s, family=family).layers)) for s in range(8)
    }
    assert len(chains) == 8


def test_default_call_is_mixed_seed_zero():
    assert random_chain(25) == random_chain(25, seed=0, family="mixed")
    assert random_chain(25).device == DEFAULT_DEVICE
    assert random_chain(25).name == "random-mixed-n25-seed0"
    assert "seed=0" in random_chain(25).source


def test_equal_signatures_mean_equal_numbers_without_noise():
    for family in FAMILIES:
        for seed in range(10):
            seen: dict[str, tuple] = {}
            for layer in random_chain(120, seed=seed, family=family).layers:
                if layer.signature is not None:
                    assert seen.setdefault(layer.signature, _numbers(layer)) == _numbers(layer)


def test_transformer_family_repeats_a_block():
    for seed in range(10):
        p = random_chain(100, seed=seed, family="transformer")
        sigs = [x.signature for x in p.layers]
        block = [s for s in sigs if s.startswith("blk.")]
        period = len(set(block))
        assert 4 <= period <= 12
        assert len(block) % period == 0 and len(block) >= period
        assert block == block[:period] * (len(block) // period)  # exact repetition
        assert sigs[0] == "embed" and sigs[-1].startswith("head")


def test_transformer_noise_perturbs_times_but_keeps_signatures():
    clean = random_chain(60, seed=4, family="transformer")
    noisy = random_chain(60, seed=4, family="transformer", noise=0.05)
    assert [x.signature for x in clean.layers] == [x.signature for x in noisy.layers]
    assert [x.product_bytes for x in clean.layers] == [x.product_bytes for x in noisy.layers]
    assert [x.fwd for x in clean.layers] != [x.fwd for x in noisy.layers]
    body = [x for x in noisy.layers if x.signature == "blk.op0"]
    assert len({x.fwd for x in body}) > 1


def test_cnn_family_shrinks_by_stage():
    for seed in range(10):
        p = random_chain(80, seed=seed, family="cnn")
        stage_of = [int(x.signature.split(".")[0][1:]) for x in p.layers]
        assert stage_of == sorted(stage_of) and stage_of[0] == 0
        conv = {}
        for s, layer in zip(stage_of, p.layers, strict=True):
            if layer.signature.endswith(".conv"):
                conv.setdefault(s, layer)
        sizes = [conv[s].product_bytes for s in sorted(conv)]
        assert all(a > b for a, b in itertools.pairwise(sizes))
        # each stage starts with its convolution, followed by cheaper ops
        for i, layer in enumerate(p.layers):
            if i == 0 or stage_of[i] != stage_of[i - 1]:
                assert layer.signature.endswith(".conv")
            elif not layer.signature.endswith(".conv"):
                assert layer.fwd < conv[stage_of[i]].fwd


def test_uniform_family_has_no_signatures_and_varies():
    p = random_chain(200, seed=1, family="uniform")
    assert all(x.signature is None for x in p.layers)
    assert len({x.product_bytes for x in p.layers}) == 200


def test_mixed_family_joins_families_with_distinct_signatures():
    kinds = set()
    for seed in range(20):
        p = random_chain(90, seed=seed, family="mixed")
        for x in p.layers:
            if x.signature is not None:
                assert x.signature.startswith("seg")
                kinds.add(x.signature.split(".")[1])
    assert kinds == {"cnn", "transformer"}  # uniform segments carry no signature


def test_options_are_honoured():
    dev = Device("slow", h2d_bandwidth=1e9, d2h_bandwidth=2e9, transfer_latency=0.0)
    p = random_chain(30, seed=2, family="uniform", device=dev, static_fraction=0.0)
    assert p.device == dev
    assert p.static_bytes == 0
    q = random_chain(30, seed=2, family="uniform", static_fraction=1.0)
    assert q.static_bytes == sum(x.product_bytes for x in q.layers)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_layers": 0}, "n_layers must be an integer >= 1, got 0"),
        ({"n_layers": 2.0}, "n_layers must be an integer >= 1, got 2.0"),
        (
            {"n_layers": 3, "family": "rnn"},
            "family must be one of uniform, cnn, transformer, mixed, got 'rnn'",
        ),
        ({"n_layers": 3, "static_fraction": -0.1}, "static_fraction must be finite and >= 0"),
        ({"n_layers": 3, "noise": float("nan")}, "noise must be finite and >= 0"),
    ],
)
def test_bad_arguments_state_the_rule(kwargs, message):
    n = kwargs.pop("n_layers")
    with pytest.raises(InvalidProfileError, match=message.replace("(", r"\(").replace(".", r"\.")):
        random_chain(n, **kwargs)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=60),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    family=st.sampled_from(FAMILIES),
)
def test_budgets_are_ordered(n, seed, family):
    p = random_chain(n, seed=seed, family=family)
    assert p.static_bytes < min_budget(p) <= keep_all_peak(p)


# -- repeated_chain ----------------------------------------------------------------


def test_repeated_chain_layout():
    a = Layer.v1("a", 1.0, 2.0, 10, signature="sa")
    b = Layer.v1("b", 0.5, 1.0, 20)
    pre, post = Layer.v1("pre", 1.0, 1.0, 5), Layer.v1("post", 1.0, 1.0, 5)
    chain = repeated_chain([a, b], 3, prefix=[pre], suffix=[post])
    assert [x.name for x in chain] == [
        "pre",
        "b0.a",
        "b0.b",
        "b1.a",
        "b1.b",
        "b2.a",
        "b2.b",
        "post",
    ]
    assert [x.signature for x in chain[1:-1]] == ["sa", "b"] * 3  # missing ones: the name
    assert [x.product_bytes for x in chain[1:-1]] == [10, 20] * 3
    assert chain[0] is pre and chain[-1] is post
    assert repeated_chain([a], 0, prefix=[pre]) == (pre,)


def test_repeated_chain_rejects_bad_input():
    with pytest.raises(InvalidProfileError, match="repeats must be an integer >= 0, got -1"):
        repeated_chain([Layer.v1("a", 1.0, 1.0, 1)], -1)
    with pytest.raises(InvalidProfileError, match="block must hold at least one layer"):
        repeated_chain([], 2)


def test_version_2_chains_keep_the_version_1_draws_and_add_real_flags():
    v1 = random_chain(80, seed=4, family="transformer")
    v2 = random_chain(80, seed=4, family="transformer", version=2)
    assert v1.is_v1 and not v2.is_v1 and v2.name.endswith("-v2")
    assert [x.out_bytes for x in v1.layers] == [x.out_bytes for x in v2.layers]
    assert [x.fwd for x in v1.layers] == [x.fwd for x in v2.layers]
    assert v2.layers[0].input_grad_bytes == 0
    for below, layer in zip(v2.layers, v2.layers[1:], strict=False):
        assert layer.input_grad_bytes == below.out_bytes
    kinds = {(x.saves_input, x.saves_output, x.saved_bytes > 0) for x in v2.layers}
    assert len(kinds) >= 3  # a mix of real layers' rules
    # copies of a repeated block (equal signatures) get equal flags
    by_sig: dict = {}
    for x in v2.layers:
        if x.signature is not None:
            flags = (x.saves_input, x.saves_output)
            assert by_sig.setdefault(x.signature, flags) == flags
    assert random_chain(80, seed=4, family="transformer", version=2) == v2
    with pytest.raises(InvalidProfileError, match="version"):
        random_chain(5, version=3)


def test_a_chain_past_the_static_limit_is_refused_at_the_layer_that_passes_it():
    # Issue 25: random_chain(10**7) drew every layer (144 s) before the profile
    # refused its static bytes. Sizes only grow, so the first layer past
    # planopt.limits.MAX_BYTES proves it: the refusal comes after ~10^5 layers.
    with pytest.raises(InvalidProfileError) as info:
        random_chain(10**7)
    message = str(info.value)
    assert "static_bytes must be at most 2^40" in message and "MAX_BYTES" in message
    assert "static_fraction=0.25" in message and "n_layers=10000000" in message
    first = int(message.split("the first ")[1].split(" ")[0])
    assert first < 200_000
    # Without static bytes nothing passes a limit early: the check refuses only
    # what the profile would.
    assert len(random_chain(1000, static_fraction=0.0)) == 1000


@pytest.mark.parametrize(
    ("family", "n", "seed", "noise", "version", "fingerprint", "static"),
    [
        ("uniform", 7, 1, 0.0, 1, "sha256:6497171318f67c7247cdca4c98682e0d", 74685593),
        ("cnn", 301, 0, 0.0, 2, "sha256:02a494bdce8fa768ac67d8d1616ae8bf", 2684114827),
        ("transformer", 50, 5, 0.1, 1, "sha256:31cf4aead033482e5545b0dafaf77944", 684061387),
        ("mixed", 301, 1, 0.1, 2, "sha256:415801ec696f022e236baa1086b7ab72", 5575833546),
    ],
)
def test_chains_drawn_a_layer_at_a_time_are_the_chains_drawn_before(
    family, n, seed, noise, version, fingerprint, static
):
    # Pinned from the code that drew every layer into a list first.
    p = random_chain(n, seed=seed, family=family, noise=noise, version=version)
    assert (p.fingerprint, p.static_bytes) == (fingerprint, static)


def test_a_chain_past_the_total_limit_is_refused_at_the_layer_that_passes_it(monkeypatch):
    import importlib

    module = importlib.import_module("planopt.random_chain")
    monkeypatch.setattr(module, "MAX_TOTAL_BYTES", 10**10)  # a few hundred layers' sizes
    with pytest.raises(InvalidProfileError, match="MAX_TOTAL_BYTES") as info:
        random_chain(10**7, static_fraction=0.0)
    assert "static_bytes plus every layer's sizes must be at most 2^53" in str(info.value)
