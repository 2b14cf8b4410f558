"""The bundled profiles traced from real models are what the tracer writes today."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import planopt  # noqa: E402
from planopt.runtime.hf import hf_available  # noqa: E402
from planopt.zoo.build import PROFILES_DIR, ZOO  # noqa: E402

if not hf_available():
    pytest.skip("needs transformers (the models extra)", allow_module_level=True)

from planopt.runtime.bundle import TRACED, rendered  # noqa: E402


def _no_version(text: str) -> str:
    return re.sub(r"torch \S+,", "torch VERSION,", text)


def test_committed_files_equal_the_tracer_output():
    for filename, text in rendered().items():
        committed = (PROFILES_DIR / filename).read_text()
        assert _no_version(committed) == _no_version(text), (
            f"{filename} is stale: run `python -m planopt.runtime.bundle`"
        )


def test_traced_files_are_bundled_and_say_how_they_were_made():
    names = planopt.bundled_profile_names()
    assert not {e.name for e in TRACED} & {e.name for e in ZOO}
    for entry in TRACED:
        assert entry.name in names
        prof = planopt.bundled_profile(entry.name)
        assert prof.source.startswith("TRACED by planopt.runtime.trace_profile")
        assert "ESTIMATES" in prof.source and "float16" in prof.source
        assert prof.device.name == entry.gpu
