"""The ablation's `no hint` switch runs the back-end without the warm start.

It replaced `solvers.exact.evaluate` with a two-argument lambda returning
None; once `evaluate` took a `stop` keyword the variant crashed its solve
(TypeError), and a None from `evaluate` now means the deadline passed, so
the solve stopped before the back-end ran ("not proven" in 0.1 s). The
switch now hands the back-end calls `hint=None` instead.
"""

from __future__ import annotations

import planopt
from experiments import bench_ablation
from solvers import exact_search


def test_no_hint_reaches_the_back_end_with_no_hint(monkeypatch):
    calls = []
    real = exact_search.search

    def spy(problem, form, record, used, hint):
        calls.append(hint)
        return real(problem, form, record, used, hint)

    monkeypatch.setattr(exact_search, "search", spy)
    profile = planopt.random_chain(12, seed=1, family="mixed", version=2)
    low, high = planopt.min_budget(profile), planopt.keep_all_peak(profile)
    budget = int(low + 0.3 * (high - low))  # the ablation's budget (bytes)
    with bench_ablation.VARIANTS["no hint"]():
        sol = planopt.solve(profile, budget, "exact", work_limit=1.0)
    assert calls == [None], sol.message
    assert "before" not in sol.message and sol.work_used > 0.5
