"""The GPU run's fidelity tables: memory and time (`fidelity_{memory,time}_gpu.md`).

Memory error = predicted / measured peak - 1 (negative: under-predicted, a
plan that "fits" could run out of memory); target: within 2%. Time error =
measured / predicted step - 1.
"""

from __future__ import annotations

import statistics

from experiments.gpu_fidelity import ModelInfo, PlanRow, finite

MEMORY_TARGET = 0.02
TIME_MEDIAN, TIME_MAX = 0.05, 0.15


def _mib(n: int | None) -> str:
    """MiB with 4 significant digits (tiny models' bytes stay visible)."""
    return "-" if n is None else f"{n / 2**20:.4g}"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.2f}%"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1e3:.2f}"


def _names(names: list[str]) -> str:
    return ", ".join(names[:4]) + (f" (+{len(names) - 4})" if len(names) > 4 else "")


def _cell(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")


def _models_table(infos: list[ModelInfo]) -> list[str]:
    lines = [
        "## Models",
        "",
        "| model | config | layers | profile | static MiB | keep-all peak MiB | min budget MiB "
        "| T_ideal ms | plain step ms | link | profiled s | run s | no plan | failed |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for i in infos:
        missing = "; ".join(f"{k}: {', '.join(v)}" for k, v in i.missing.items()) or "-"
        lines.append(
            f"| {i.model} | {_cell(i.config)} | {i.layers} | {_cell(i.menus)} | "
            f"{_mib(i.static_bytes)} | {_mib(i.keep_all_peak)} | {_mib(i.min_budget)} | "
            f"{_ms(i.t_ideal)} | {_ms(i.plain_seconds)} | {_cell(i.link)} | "
            f"{i.profile_seconds:.1f} | {i.seconds:.1f} | {_cell(missing)} | "
            f"{_cell(i.error) or '-'} |"
        )
    return lines


def memory_summary(rows: list[PlanRow]) -> dict:
    errs = finite(r.memory_error for r in rows)
    within = sum(abs(e) <= MEMORY_TARGET for e in errs)
    return dict(
        plans=len(errs),
        within=within,
        worst_under=min([e for e in errs if e < 0], default=None),
        worst_over=max([e for e in errs if e > 0], default=None),
    )


def render_memory(infos: list[ModelInfo], rows: list[PlanRow], head: list[str]) -> str:
    lines = ["# Memory fidelity on the GPU: predicted peak against the caching allocator", ""]
    lines += [*head, "", __doc__.split("\n\n", 1)[1].strip(), ""]
    lines += [
        "## Summary",
        "",
        "| model | plans measured | within 2% | worst under-prediction | worst over-prediction "
        "| keep-all predicted MiB | keep-all measured MiB | largest reserved MiB | "
        "not measured |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    models = [i.model for i in infos]
    for model in [*models, None]:
        mine = [r for r in rows if model is None or r.model == model]
        s = memory_summary(mine)
        keep = next((r for r in mine if "keep-all" in r.names), None) if model else None
        reserved = max((r.reserved_peak or 0 for r in mine), default=0)
        frac = f"{s['within']}/{s['plans']}" + (
            f" ({s['within'] / s['plans']:.0%})" if s["plans"] else ""
        )
        lines.append(
            f"| {model or '**all**'} | {s['plans']} | {frac} | {_pct(s['worst_under'])} | "
            f"{_pct(s['worst_over'])} | {_mib(keep.predicted_peak if keep else None)} | "
            f"{_mib(keep.measured_peak if keep else None)} | {_mib(reserved or None)} | "
            f"{sum(r.measured_peak is None for r in mine)} |"
        )
    lines += ["", *_models_table(infos), ""]
    lines += [
        "## Every plan",
        "",
        "Actions per layer: K keep, O keep with a menu option (v3), S swap, R recompute.",
        "",
        "| model | plan (who produced it) | actions | predicted MiB | measured MiB | error | "
        "reserved MiB | copies | note |",
        "|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        note = _cell("; ".join(x for x in (r.note, r.error) if x))
        lines.append(
            f"| {r.model} | {_names(r.names)} | `{r.actions}` | {_mib(r.predicted_peak)} | "
            f"{_mib(r.measured_peak)} | {_pct(r.memory_error)} | {_mib(r.reserved_peak)} | "
            f"{r.copied or '-'} | {note or '-'} |"
        )
    return "\n".join(lines) + "\n"


def time_summary(rows: list[PlanRow]) -> dict:
    errs = [abs(e) for e in finite(r.time_error for r in rows)]
    return dict(
        plans=len(errs),
        median=statistics.median(errs) if errs else None,
        worst=max(errs) if errs else None,
        within_median=sum(e <= TIME_MEDIAN for e in errs),
        within_max=sum(e <= TIME_MAX for e in errs),
    )


def render_time(infos: list[ModelInfo], rows: list[PlanRow], head: list[str]) -> str:
    lines = ["# Time fidelity on the GPU: predicted makespan against the measured step", ""]
    lines += [
        *head,
        "",
        "Measured: the median of the timed steps by CUDA events (forward, loss, backward and "
        "the end of every copy; swaps on the runtime's two copy streams). Predicted: the "
        "simulator's makespan on the profile measured on the same GPU (per-layer medians by "
        "CUDA events, the link measured with pinned copies). Error = measured / predicted - 1. "
        f"Target: median |error| within {TIME_MEDIAN:.0%}, none beyond {TIME_MAX:.0%}.",
        "",
        "## Summary",
        "",
        "| model | plans | median abs error | worst abs error | within 5% | within 15% | "
        "keep-all executor / plain step |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for model in [*(i.model for i in infos), None]:
        mine = [r for r in rows if model is None or r.model == model]
        s = time_summary(mine)
        info = next((i for i in infos if i.model == model), None)
        keep = next((r for r in mine if "keep-all" in r.names), None) if model else None
        overhead = "-"
        if info and keep and keep.measured_seconds and info.plain_seconds:
            overhead = f"{keep.measured_seconds / info.plain_seconds:.3f}"
        med = "-" if s["median"] is None else f"{s['median']:.1%}"
        worst = "-" if s["worst"] is None else f"{s['worst']:.1%}"
        lines.append(
            f"| {model or '**all**'} | {s['plans']} | {med} | {worst} | "
            f"{s['within_median']}/{s['plans']} | {s['within_max']}/{s['plans']} | {overhead} |"
        )
    lines += [
        "",
        "## Every plan",
        "",
        "| model | plan (who produced it) | actions | predicted ms | measured ms | error | "
        "steps (ms) | note |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        steps = ", ".join(f"{x * 1e3:.1f}" for x in r.samples) or "-"
        note = _cell("; ".join(x for x in (r.note, r.error) if x))
        lines.append(
            f"| {r.model} | {_names(r.names)} | `{r.actions}` | {_ms(r.predicted_seconds)} | "
            f"{_ms(r.measured_seconds)} | {_pct(r.time_error)} | {steps} | {note or '-'} |"
        )
    return "\n".join(lines) + "\n"
