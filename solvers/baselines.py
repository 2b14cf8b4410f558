"""Baseline policies: fixed rules from the literature, scored by our simulator.

Each is a registered method `fn(problem, *, ...) -> SolverOutput`. A baseline
never bends its rule to meet the budget (apart from sqrt-n, whose published
form is itself budget-driven): when its plan does not fit it answers
`Status.INFEASIBLE` with a message giving the plan's peak and the budget, so a
table can show where each rule stops working (proven: a fixed rule's space is
its one plan). sqrt-n searches segmentations: when none fits it proves
nothing and answers `Status.NO_PLAN`.

On a profile whose layers change their input in place, a rule's plan that
breaks the in-place rule is mended by keeping layers (`solvers.rule`): the
rule's own plan would not run; the message says how many were kept.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from planopt.errors import SolverOptionError
from planopt.plan import KEEP, RECOMPUTE, SWAP, Action, Plan
from planopt.problem import Problem
from planopt.profile import Layer
from planopt.result import SolverOutput, Status
from solvers.rule import kept_note, repaired, repaired_actions


def _fit(problem: Problem, plan: Plan, method: str, detail: str = "") -> SolverOutput:
    """FEASIBLE with `plan` (mended to keep the in-place rule) when its simulated peak
    fits, else INFEASIBLE saying by how much."""
    mended = repaired(problem.profile, plan)
    suffix = (f" ({detail})" if detail else "") + kept_note(plan, mended)
    plan = mended
    _, peak = problem.scorer.score_plan(plan)
    if problem.fits(peak):
        return SolverOutput(plan, Status.FEASIBLE, message=f"{method}{suffix}")
    return SolverOutput(
        None,
        Status.INFEASIBLE,
        message=(
            f"{method}{suffix}: plan peak must be at most the budget {problem.budget:.0f} bytes, "
            f"got {peak} bytes"
        ),
    )


# -- keep-all, all-swap -------------------------------------------------------


def keep_all(problem: Problem) -> SolverOutput:
    """Keep every saved tensor: the fastest plan (T_ideal) and the hungriest."""
    return _fit(problem, Plan.keep_all(problem.profile), "keep-all")


def all_swap_actions(n: int) -> list[Action]:
    """Every layer swapped but the last, which is kept: its backward runs right
    after its forward, so a swap would free nothing and only add the copies."""
    return [SWAP] * (n - 1) + [KEEP]


def all_swap(problem: Problem) -> SolverOutput:
    """vDNN (Rhu et al. 2016): offload every layer's tensor, prefetch one step ahead.

    `prefetch_at = min(need(i) + 1, L - 1)` (Plan.build's default), no swap_wait:
    the forward never stalls on copies, so memory can exceed the minimum when a
    copy out is slower than the next forward.
    """
    plan = Plan.build(all_swap_actions(problem.n), profile=problem.profile)
    return _fit(problem, plan, "all-swap")


# -- sqrt-n (Chen et al. 2016) -------------------------------------------------


def _segment_actions(n: int, checkpoints: Sequence[int]) -> list[Action]:
    actions = [RECOMPUTE] * n
    for c in checkpoints:
        actions[c] = KEEP
    return actions


def uniform_checkpoints(n: int, segments: int) -> list[int]:
    """Ends of `segments` near-equal segments of `0..n-1` (the last end is `n-1`)."""
    return [((s + 1) * n + segments - 1) // segments - 1 for s in range(segments)]


def chen_greedy_checkpoints(sizes: Sequence[int], b: float) -> list[int]:
    """Chen et al.'s budgeted greedy planner, on a chain: add each layer's
    saved bytes to a running sum and, once it exceeds `b`, make that layer a
    checkpoint and restart the sum."""
    out, acc = [], 0
    for i, s in enumerate(sizes):
        acc += s
        if acc > b:
            out.append(i)
            acc = 0
    return out


def _sqrt_candidates(sizes: Sequence[int]) -> list[tuple[str, list[int]]]:
    """Checkpoint sets to try: uniform segment counts and Chen's scan over a grid of b."""
    n = len(sizes)
    counts = set(range(1, min(n, 48) + 1))
    counts.update(round(n ** (k / 48)) for k in range(49))
    counts.add(max(1, round(math.sqrt(n))))
    cands = [(f"{k} segments", uniform_checkpoints(n, k)) for k in sorted(counts) if 1 <= k <= n]
    total, smallest = sum(sizes), max(1, min(sizes))
    for k in range(48):
        b = smallest * (max(total, smallest) / smallest) ** (k / 47)
        cands.append((f"Chen scan b={b:.0f} bytes", chen_greedy_checkpoints(sizes, b)))
    return cands


def sqrt_n(problem: Problem, *, segments: int | None = None) -> SolverOutput:
    """Segment recomputation, Chen et al. 2016 (arXiv:1604.06174).

    From the paper: the chain is cut into segments; the segment boundaries
    (checkpoints) are kept, the layers inside a segment are dropped in forward
    and recomputed from the checkpoint below when their backward comes; with
    about sqrt(L) equal segments memory is O(sqrt(L)) for one extra forward.
    Also from the paper: the budgeted variant scans the chain with a byte
    budget `b` per segment (a layer becomes a checkpoint once the bytes since
    the last checkpoint exceed `b`) and grid-searches `b`.

    Our reading: a checkpoint is the *last* layer of its segment (the spec's
    recompute run `k+1..t` restarts from `s_k`), kept, not swapped. With
    `segments=k`, exactly `k` near-equal segments (the paper's default is
    k ~ sqrt(L)). Without it (the default) we search: uniform segment counts
    (1..48, a geometric grid up to L, and round(sqrt(L))) and Chen's scan over
    48 geometric values of `b`, each scored by our simulator; the fastest plan
    that fits wins (ties: lower peak, then the order above). The paper picks
    `b` for memory alone; we pick for time within the budget, because that is
    the question every other method here answers.
    """
    n = problem.n
    sizes = [layer.product_bytes for layer in problem.profile.layers]
    if segments is not None:
        if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= n:
            raise SolverOptionError(
                f"method 'sqrt-n': segments must be an integer in [1, {n}], got {segments!r}"
            )
        plan = Plan.build(
            _segment_actions(n, uniform_checkpoints(n, segments)), profile=problem.profile
        )
        return _fit(problem, plan, "sqrt-n", f"{segments} segments")

    scorer = problem.scorer
    best: tuple[float, int, int] | None = None
    best_plan: tuple[str, list[Action]] | None = None
    lowest_peak: tuple[int, str] | None = None
    seen: set[tuple[int, ...]] = set()
    for order, (label, checkpoints) in enumerate(_sqrt_candidates(sizes)):
        key = tuple(checkpoints)
        if key in seen:
            continue
        seen.add(key)
        actions = repaired_actions(problem.profile, _segment_actions(n, checkpoints))
        none = [None] * n
        makespan, peak = scorer.score(actions, none, none)
        if lowest_peak is None or peak < lowest_peak[0]:
            lowest_peak = (peak, label)
        if problem.fits(peak) and (best is None or (makespan, peak, order) < best):
            best = (makespan, peak, order)
            best_plan = (label, actions)
        if problem.expired():
            stopped = True
            break
    else:
        stopped = False
    if best_plan is None:
        peak, label = lowest_peak if lowest_peak else (0, "none")
        below = problem.budget < problem.min_budget  # proven: no plan at all fits
        return SolverOutput(
            None,
            Status.INFEASIBLE if below else Status.TIMEOUT if stopped else Status.NO_PLAN,
            message=(
                f"sqrt-n: plan peak must be at most the budget {problem.budget:.0f} bytes; "
                f"the lowest of {len(seen)} segmentations tried ({label}) is {peak} bytes"
                + (" (stopped by the limit)" if stopped else "")
            ),
            stopped=stopped,
        )
    label, actions = best_plan
    plan = Plan.build(actions, profile=problem.profile)
    return SolverOutput(plan, Status.FEASIBLE, message=f"sqrt-n ({label})")


# -- SuperNeurons (Wang et al. 2018) ------------------------------------------

# NOTE: SuperNeurons' rule, as read from a layer's name and signature.
# Matching is case-insensitive. Long keywords match anywhere in the text
# ("maxpool2d" holds "pool"); short ones, which hide inside other words
# ("add" in "padding", "fc" in "nfc"), must be a whole token once trailing
# digits are stripped ("fc6" -> "fc", "bn1" -> "bn").
CHECKPOINT_SUBSTRINGS = (
    "conv",
    "linear",
    "matmul",
    "gemm",
    "dense",
    "attention",
    "embedding",
    "concat",
    "residual",
    "shortcut",
)
CHECKPOINT_TOKENS = ("fc", "mm", "bmm", "attn", "proj", "qkv", "add", "cat", "sum", "join")
CHEAP_SUBSTRINGS = (
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "swish",
    "mish",
    "pool",
    "norm",
    "dropout",
    "softmax",
    "lrn",
)
CHEAP_TOKENS = ("act", "elu", "bn", "ln", "gn", "drop", "flatten", "view", "reshape")

_TOKEN_SPLIT = re.compile(r"[^a-z0-9]+")


def _matches(text: str, substrings: Sequence[str], tokens: Sequence[str]) -> bool:
    if any(k in text for k in substrings):
        return True
    words = {w.rstrip("0123456789") for w in _TOKEN_SPLIT.split(text) if w}
    return any(k in words for k in tokens)


def superneurons_role(layer: Layer) -> Action:
    """SWAP for a checkpoint (conv, linear, join, or unrecognised), RECOMPUTE for a cheap layer.

    A checkpoint keyword wins over a cheap one: a fused "conv2d+relu" layer
    holds a convolution, whose recomputation SuperNeurons avoids. A layer
    matching nothing is treated as a checkpoint: recomputing an operator of
    unknown cost is the risk the rule exists to avoid, and swapping it is
    what SuperNeurons does with every non-cheap tensor.
    """
    text = f"{layer.name} {layer.signature or ''}".lower()
    if _matches(text, CHECKPOINT_SUBSTRINGS, CHECKPOINT_TOKENS):
        return SWAP
    if _matches(text, CHEAP_SUBSTRINGS, CHEAP_TOKENS):
        return RECOMPUTE
    return SWAP


def superneurons_actions(layers: Sequence[Layer]) -> list[Action]:
    """The rule per layer; a last-layer checkpoint is kept, as in all-swap."""
    actions = [superneurons_role(layer) for layer in layers]
    if actions[-1] is SWAP:
        actions[-1] = KEEP
    return actions


def superneurons(problem: Problem) -> SolverOutput:
    """SuperNeurons (Wang et al., PPoPP 2018): swap checkpoints, recompute cheap layers.

    From the paper: outputs of convolution layers (we add linear and join
    layers, per our brief) are offloaded to host and prefetched ahead of
    their backward (the Unified Tensor Pool); the cheap layers between them
    (activation, pooling, normalisation, dropout, softmax) are recomputed
    (cost-aware recomputation). Our reading: the keyword tables above decide
    the class, a swapped checkpoint prefetches one step ahead of need
    (Plan.build's default), and no swap_wait is used. The rule does not look
    at the budget; when its plan does not fit, we say so.
    """
    actions = superneurons_actions(problem.profile.layers)
    plan = Plan.build(actions, profile=problem.profile)
    detail = f"swap {plan.count(SWAP)}, recompute {plan.count(RECOMPUTE)}"
    return _fit(problem, plan, "superneurons", detail)
