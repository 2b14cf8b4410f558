"""Random bytes and random JSON into every loader: only a `PlanoptError` may come out.

Documents are valid profiles and plans with a few random changes (a value of
a random type anywhere: huge and negative integers, NaN, infinities,
strings, lists, objects; a field dropped or added), so the draws reach deep
into the checks instead of stopping at the first field, and many still load.
Whatever loads is then used (minimum budget, keep-all peak, a simulation):
a profile that loads must also be one every figure can be computed for.

`FUZZ_EXAMPLES` sets the number of examples (a moderate default for CI; the
search ran with 60,000 per test). Before the fixes it found: a path of the
wrong type (`TypeError`), a non-UTF-8 file (`UnicodeDecodeError`), nesting
too deep (`RecursionError`), sizes beyond int64 and times or bandwidths
beyond a float (`OverflowError` in `min_budget`, the simulator, `float()`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import random
from importlib import resources

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import planopt
from planopt import Plan, PlanoptError
from planopt.io import (
    load_plan,
    load_profile,
    plan_from_dict,
    plan_to_dict,
    profile_from_dict,
    profile_to_dict,
)
from tests.strategies import random_plan

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

NAME = "alexnet-b128-caffe-titanx"
BASE = planopt.bundled_profile(NAME)

NUMBERS = st.one_of(
    st.integers(min_value=-5, max_value=100),
    st.integers(),
    st.sampled_from([0, 1, 2**40, 2**53, 2**63, 2**64, -(2**63), 10**400, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1e-13, 1e-12, 0.5, 1.5, 1e6, 1e308, math.inf, -math.inf, math.nan]),
)
SCALARS = st.one_of(
    NUMBERS,
    st.booleans(),
    st.none(),
    st.text(max_size=8),
    st.sampled_from(["keep", "swap", "recompute", "conv", "", "planopt.profile/2"]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
VALUES = st.one_of(SCALARS, SCALARS, JSON)


def _profile_bases() -> list[dict]:
    """Valid documents to mutate: a version-1 file as shipped, version-2 documents."""
    files = resources.files("planopt") / "data" / "profiles"
    v1 = json.loads((files / f"{NAME}.json").read_text(encoding="utf-8"))
    v1["layers"] = v1["layers"][:4]
    v2 = profile_to_dict(planopt.random_chain(4, seed=3, version=2))
    bert = profile_to_dict(planopt.bundled_profile("bert-base-b32-s512-h100-pcie5-roofline"))
    bert["layers"] = bert["layers"][:5]
    return [v1, v2, bert]


def _plan_bases() -> list[dict]:
    rng = random.Random(7)
    plans = [planopt.min_memory_plan(BASE), Plan.keep_all(BASE)]
    plans += [random_plan(rng, BASE) for _ in range(4)]
    return [plan_to_dict(plan) for plan in plans]


def _slots(node: object) -> list[tuple[object, object]]:
    """Every `(container, key)` of a JSON document, containers included."""
    out: list[tuple[object, object]] = []
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in list(items):
        out.append((node, key))
        if isinstance(value, dict | list):
            out += _slots(value)
    return out


@st.composite
def mutated(draw, bases: list[dict]) -> object:
    """A valid document with up to four random changes: a value of a random type put
    anywhere (a field, a layer, a whole list), a field dropped or one added."""
    if draw(st.integers(0, 19)) == 0:
        return draw(JSON)
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    if draw(st.booleans()):
        doc["layers"] = doc["layers"][: draw(st.integers(0, len(doc["layers"])))]
    for _ in range(draw(st.integers(0, 4))):
        slots = _slots(doc)
        if not slots:
            break
        container, key = draw(st.sampled_from(slots[::-1]))  # layers' fields first
        how = draw(st.integers(0, 9))
        if how == 0:
            del container[key]  # type: ignore[index]
        elif how == 1 and isinstance(container, dict):
            container[draw(st.text(max_size=6))] = draw(VALUES)
        else:
            container[key] = draw(VALUES)  # type: ignore[index]
    return doc


PROFILE_BASES = _profile_bases()
PLAN_BASES = _plan_bases()


def profile_docs() -> st.SearchStrategy[object]:
    return mutated(PROFILE_BASES)


def plan_docs() -> st.SearchStrategy[object]:
    return mutated(PLAN_BASES)


def _use_profile(profile) -> None:
    """Every figure of a profile that loaded (they must not fail either)."""
    planopt.min_budget(profile)
    planopt.keep_all_peak(profile)
    planopt.parse_budget("50%", profile)
    planopt.simulate(profile, Plan.keep_all(profile), "100%")
    planopt.simulate(profile, planopt.min_memory_plan(profile))


def _only_planopt_errors(call) -> None:
    """Run `call`; a `PlanoptError` is a fine answer, anything else fails the test."""
    with contextlib.suppress(PlanoptError):
        call()


@FUZZ
@given(profile_docs())
def test_random_profile_documents_give_only_planopt_errors(doc):
    def run():
        profile = profile_from_dict(doc)  # type: ignore[arg-type]
        _use_profile(profile)

    _only_planopt_errors(run)
    _only_planopt_errors(lambda: load_profile(doc))  # type: ignore[arg-type]


@FUZZ
@given(plan_docs())
def test_random_plan_documents_give_only_planopt_errors(doc):
    def run():
        plan = plan_from_dict(doc)  # type: ignore[arg-type]
        plan.check(BASE)
        planopt.simulate(BASE, plan, "50%")

    _only_planopt_errors(run)


@FUZZ
@given(st.one_of(profile_docs(), plan_docs()))
def test_random_documents_through_files_give_only_planopt_errors(tmp_path_factory, doc):
    path = tmp_path_factory.mktemp("fuzz") / "doc.json"
    try:
        text = json.dumps(doc)
    except ValueError:  # a float JSON cannot hold: write Python's repr instead
        text = repr(doc)
    path.write_text(text)
    _only_planopt_errors(lambda: _use_profile(load_profile(path)))
    _only_planopt_errors(lambda: load_plan(path).check(BASE))


@FUZZ
@given(st.binary(max_size=64))
def test_random_bytes_give_only_planopt_errors(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "bytes.json"
    path.write_bytes(data)
    _only_planopt_errors(lambda: load_profile(path))
    _only_planopt_errors(lambda: load_plan(path))


def test_pathological_json_gives_only_planopt_errors(tmp_path):
    cases = {
        "deep.json": "[" * 200_000 + "]" * 200_000,
        "long-number.json": '{"format": "planopt.profile/2", "static_bytes": ' + "9" * 5000 + "}",
        "bom.json": "\ufeff{}",
        "nan.json": '{"format": "planopt.plan/1", "layers": NaN}',
        "empty.json": "",
        "nul.json": "\0",
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text)
        _only_planopt_errors(lambda p=path: load_profile(p))
        _only_planopt_errors(lambda p=path: load_plan(p))
    for source in ["a\0b.json", "", ".", b"x.json", 3, None, [], {}]:
        _only_planopt_errors(lambda s=source: load_profile(s))
        _only_planopt_errors(lambda s=source: load_plan(s))
