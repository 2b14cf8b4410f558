"""planopt's solver methods. The table below is the registry's data.

Keep user-facing imports on `planopt`; this package is an implementation
detail shipped in the same distribution (a test checks `solvers` is ours).
A method is a function `fn(problem: planopt.problem.Problem, *, option=...)
-> planopt.result.SolverOutput`; its keyword-only parameters are its options.
"""

from planopt.registry import MethodSpec

PLANOPT_SOLVERS = True  # marker the ownership test looks for

METHODS: tuple[MethodSpec, ...] = (
    MethodSpec(
        "keep-all", "solvers.baselines:keep_all", "keep every saved tensor (fastest, most memory)"
    ),
    MethodSpec(
        "all-swap",
        "solvers.baselines:all_swap",
        "vDNN-style: swap every layer but the last, prefetch one step ahead",
    ),
    MethodSpec(
        "sqrt-n",
        "solvers.baselines:sqrt_n",
        "Chen et al. 2016 segment recomputation with budget-aware segments",
    ),
    MethodSpec(
        "superneurons",
        "solvers.baselines:superneurons",
        "SuperNeurons: checkpoint conv/linear/join outputs (swapped), recompute the rest",
    ),
    MethodSpec(
        "pooch",
        "solvers.pooch:pooch",
        "the published greedy (Ito et al. 2018): keep->swap, swap->recompute, prefetch",
        aliases=("greedy",),
    ),
    MethodSpec(
        "exact",
        "solvers.exact:exact",
        "proven-optimal keep/swap/recompute plan (CP-SAT; CBC or HiGHS with --backend)",
        requires=("ortools",),
        exact=True,
    ),
    MethodSpec(
        "recompute-only",
        "solvers.exact:recompute_only",
        "optimal keep/recompute plan (the space Checkmate and Rotor decide)",
        requires=("ortools",),
        exact=True,
    ),
    MethodSpec(
        "swap-only",
        "solvers.exact:swap_only",
        "optimal keep/swap plan (the space vDNN and SwapAdvisor decide)",
        requires=("ortools",),
        exact=True,
    ),
    MethodSpec(
        "brute-force",
        "solvers.brute_force:brute_force",
        "enumerate every plan (test oracle; tiny nets only)",
        exact=True,
    ),
    MethodSpec(
        "blocks",
        "solvers.blocks:blocks",
        "repeated blocks decided once per class of copies, then exact windows (deep nets)",
        requires=("ortools",),
    ),
    MethodSpec(
        "lns",
        "solvers.lns:lns",
        "the greedy improved by layer moves, kicks and exact windows (large nets)",
        requires=("ortools",),
    ),
    MethodSpec(
        "auto",
        "solvers.auto:auto",
        "exact for small nets, blocks for repeated ones, lns otherwise; says which",
        requires=("ortools",),
    ),
)
