"""The ablation's switches keep the signatures of what they replace.

`no hint` replaced `solvers.exact.evaluate` with a two-argument lambda; once
`evaluate` took a `stop` keyword, the variant crashed its solve (TypeError)
instead of running it without a hint.
"""

from __future__ import annotations

import inspect

from experiments.bench_ablation import VARIANTS
from solvers import exact


def test_no_hint_takes_every_argument_exact_passes_to_evaluate():
    params = inspect.signature(exact.evaluate).parameters
    # exact passes the optional ones (`stop`) by keyword
    keywords = {name: None for name, p in params.items() if p.default is not p.empty}
    assert keywords  # what the old two-argument lambda could not take
    with VARIANTS["no hint"]():
        assert exact.evaluate(None, None, **keywords) is None
