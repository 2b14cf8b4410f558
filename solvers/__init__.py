"""planopt's solver methods. The table below is the registry's data.

Keep user-facing imports on `planopt`; this package is an implementation
detail shipped in the same distribution (a test checks `solvers` is ours).
"""

from planopt.registry import MethodSpec

PLANOPT_SOLVERS = True  # marker the ownership test looks for

METHODS: tuple[MethodSpec, ...] = (
    MethodSpec(
        "keep-all", "solvers.baselines:keep_all", "keep every saved tensor (fastest, most memory)"
    ),
)
