"""planopt's solver methods. `METHODS` below is the registry's data.

Keep user-facing imports on `planopt`; this package is an implementation
detail shipped in the same distribution (a test checks `solvers` is ours).
A method is a function `fn(problem: planopt.problem.Problem, *, option=...)
-> planopt.result.SolverOutput`; its keyword-only parameters are its options.

The table is plain data (strings only), so this package never imports
`planopt.registry`: the registry reads it. Each row names the method's
`space` (the plans it chooses among: joint, recompute-only, swap-only,
fixed) and `role` (baseline, heuristic, exact, oracle, bound); everything
that needs "the exact methods" or "the oracles" asks the registry.
"""

PLANOPT_SOLVERS = True  # marker the ownership test looks for

_ORTOOLS = ("ortools",)

METHODS: tuple[dict, ...] = (
    {
        "name": "keep-all",
        "target": "solvers.baselines:keep_all",
        "summary": "keep every saved tensor (fastest, most memory)",
        "space": "fixed",
        "role": "baseline",
        "starter": True,
        "menus": "whole",
        "signed_scratch": True,
    },
    {
        "name": "all-swap",
        "target": "solvers.baselines:all_swap",
        "summary": "vDNN-style: swap every layer but the last, prefetch one step ahead",
        "space": "fixed",
        "role": "baseline",
        "starter": True,
        "menus": "whole",
        "signed_scratch": True,
    },
    {
        "name": "sqrt-n",
        "target": "solvers.baselines:sqrt_n",
        "summary": "Chen et al. 2016 segment recomputation with budget-aware segments",
        "space": "recompute-only",
        "role": "baseline",
        "starter": True,
        "menus": "whole",
        "signed_scratch": True,
    },
    {
        "name": "superneurons",
        "target": "solvers.baselines:superneurons",
        "summary": "SuperNeurons: swap conv/linear/join outputs, recompute the rest",
        "space": "fixed",
        "role": "baseline",
        "starter": True,
        "menus": "whole",
        "signed_scratch": True,
    },
    {
        "name": "pooch",
        "target": "solvers.pooch:pooch",
        "summary": "the published greedy (Ito et al. 2018): keep->swap, swap->recompute, prefetch",
        "space": "joint",
        "role": "heuristic",
        "aliases": ("greedy",),
        "starter": True,
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "exact",
        "target": "solvers.exact:exact",
        "summary": "proven-optimal keep/swap/recompute plan (CP-SAT; CBC or HiGHS with --backend)",
        "space": "joint",
        "role": "exact",
        "requires": _ORTOOLS,
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "recompute-only",
        "target": "solvers.exact:recompute_only",
        "summary": "optimal keep/recompute plan (the space Checkmate and Rotor decide)",
        "space": "recompute-only",
        "role": "exact",
        "requires": _ORTOOLS,
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "remat-dp",
        "target": "solvers.remat_dp:remat_dp",
        "summary": "optimal keep/recompute plan by dynamic programming (exact bytes, any profile)",
        "space": "recompute-only",
        "role": "exact",
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "swap-only",
        "target": "solvers.exact:swap_only",
        "summary": "optimal keep/swap plan (the space vDNN and SwapAdvisor decide)",
        "space": "swap-only",
        "role": "exact",
        "requires": _ORTOOLS,
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "brute-force",
        "target": "solvers.brute_force:brute_force",
        "summary": "enumerate every plan (test oracle; tiny nets only)",
        "space": "joint",
        "role": "oracle",
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "blocks",
        "target": "solvers.blocks:blocks",
        "summary": "repeated blocks decided once per class of copies, then exact windows",
        "space": "joint",
        "role": "heuristic",
        "requires": _ORTOOLS,
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "lns",
        "target": "solvers.lns:lns",
        "summary": "the greedy improved by layer moves, kicks and exact windows (large nets)",
        "space": "joint",
        "role": "heuristic",
        "requires": _ORTOOLS,
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "auto",
        "target": "solvers.auto:auto",
        "summary": "exact for small nets, blocks for repeated ones, lns otherwise; says which",
        "space": "joint",
        "role": "heuristic",
        "requires": _ORTOOLS,
        "menus": "plans",
        "signed_scratch": True,
    },
    {
        "name": "lower-bound",
        "target": "solvers.bound:lower_bound",
        "summary": "a proven lower bound on the joint optimum (a relaxation; no plan)",
        "space": "joint",
        "role": "bound",
        "requires": ("pulp",),
        # v3: one more action per option of a menu (relaxed), and the backward
        # rows take the signed scratch as the cost model's level inside B_i.
        "menus": "plans",
        "signed_scratch": True,
    },
)
