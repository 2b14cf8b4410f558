"""Figures: the timeline of one plan and the sweep figures.

The timeline is checked against the simulator's schedule (bars per lane,
the memory curve's peak, the budget line), and `planopt show --plot`
through the command line, including its errors and a missing matplotlib.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import planopt
from planopt import cli
from planopt.experiment import plots
from planopt.experiment.analysis import gap_rows
from planopt.experiment.jobs import make_jobs
from planopt.experiment.robustness import advantage_rows, robustness_rows
from planopt.experiment.sweep import SerialExecutor, run_sweep
from planopt.plot import BYTE_UNITS, TIME_UNITS, pick_unit, save_figure, timeline_figure
from planopt.profile import Device, Layer, Profile

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NET = "resnet50-blocks-b128-a100-pcie4-roofline"


@pytest.fixture(scope="module")
def greedy_plan():
    profile = planopt.bundled_profile(NET)
    budget = planopt.budget_from_fraction(profile, 0.5)
    solution = planopt.solve(profile, budget, "greedy")
    return profile, solution.plan, budget


def _bars(ax):
    """(y centre, [(start, width)]) of every broken_barh collection on `ax`."""
    out = []
    for coll in ax.collections:
        paths = coll.get_paths()
        spans = []
        for path in paths:
            xs = path.vertices[:, 0]
            ys = path.vertices[:, 1]
            spans.append((xs.min(), xs.max() - xs.min(), (ys.min() + ys.max()) / 2))
        out.append((coll.get_facecolor()[0].tolist(), spans))
    return out


def test_timeline_lanes_and_memory_match_the_schedule(greedy_plan):
    profile, plan, budget = greedy_plan
    schedule = planopt.simulate(profile, plan, budget)
    fig = timeline_figure(profile, plan, budget=budget)
    gantt, memory = fig.axes[:2]
    assert [t.get_text() for t in gantt.get_yticklabels()] == ["compute", "D2H copy", "H2D copy"]
    # Scale: this net runs in tens of ms, so the axis is in ms.
    assert memory.get_xlabel() == "time (ms)"
    assert memory.get_ylabel() == "device memory (GiB)"
    lane_of = {2.0: "compute", 1.0: "d2h", 0.0: "h2d"}
    busy = {"compute": 0.0, "d2h": 0.0, "h2d": 0.0}
    count = {"compute": 0, "d2h": 0, "h2d": 0}
    for color, spans in _bars(gantt):
        if color[:3] == pytest.approx([0xE8 / 255] * 3):  # the stall band
            continue
        for _, width, y in spans:
            busy[lane_of[round(y)]] += width / 1e3
            count[lane_of[round(y)]] += 1
    ops = schedule.operations()
    for lane, resource in (("compute", "compute"), ("d2h", "d2h"), ("h2d", "h2d")):
        mine = [op for op in ops if op.resource.value == resource]
        assert count[lane] == len(mine)
        assert busy[lane] == pytest.approx(sum(op.end - op.start for op in mine), rel=1e-9)
    assert busy["compute"] == pytest.approx(schedule.compute_seconds, rel=1e-9)
    curve = memory.lines[0].get_ydata()
    assert max(curve) == pytest.approx(schedule.peak_bytes / 2**30)
    budget_lines = [line for line in memory.lines if "budget" in str(line.get_label())]
    assert budget_lines[0].get_ydata()[0] == pytest.approx(budget / 2**30)
    title = fig._suptitle.get_text()
    assert f"+{100 * schedule.overhead:.1f}%" in title and "fits" in title


MIB = 2**20


@pytest.mark.parametrize(
    ("largest", "expected"),
    [
        (0, (1, "B")),
        (1023, (1, "B")),
        (1024, (2**10, "KiB")),
        (33 * MIB, (MIB, "MiB")),
        (1023.9 * MIB, (MIB, "MiB")),
        (1.5 * 2**30, (2**30, "GiB")),
        (3 * 2**40, (2**40, "TiB")),
        (5 * 2**50, (2**40, "TiB")),  # beyond the largest unit: stays in TiB
    ],
)
def test_byte_unit_is_the_largest_the_value_fills(largest, expected):
    assert pick_unit(largest, BYTE_UNITS) == expected


@pytest.mark.parametrize(
    ("largest", "expected"),
    [
        (25.0, (1.0, "s")),
        (3.0, (1.0, "s")),
        (1.0, (1.0, "s")),
        (0.5, (1e-3, "ms")),
        (0.003, (1e-3, "ms")),
        (0.001, (1e-3, "ms")),
        (2e-5, (1e-6, "us")),
        (5e-9, (1e-6, "us")),
        (0.0, (1e-6, "us")),
    ],
)
def test_time_unit_is_the_largest_the_value_fills(largest, expected):
    assert pick_unit(largest, TIME_UNITS) == expected


def _small_model(seconds_per_layer: float) -> Profile:
    """8 MiB of weights and five layers of 5 MiB each: about 33 MiB at its peak;
    15 x `seconds_per_layer` of compute."""
    device = Device("test-link", h2d_bandwidth=12e9, d2h_bandwidth=12e9)
    layers = tuple(
        Layer.v1(f"l{k}", fwd=seconds_per_layer, bwd=2 * seconds_per_layer, saved_bytes=5 * MIB)
        for k in range(5)
    )
    return Profile("small", device, static_bytes=8 * MIB, layers=layers)


def _texts(fig) -> list[str]:
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]


def test_a_33_mib_model_is_labelled_in_mib():
    profile = _small_model(1e-3)
    plan = planopt.Plan.keep_all(profile)
    schedule = planopt.simulate(profile, plan, None)
    assert 30 * MIB < schedule.peak_bytes < 40 * MIB
    budget = 36 * MIB
    fig = timeline_figure(profile, plan, budget=budget)
    _, memory = fig.axes[:2]
    assert memory.get_ylabel() == "device memory (MiB)"
    assert max(memory.lines[0].get_ydata()) == pytest.approx(schedule.peak_bytes / MIB)
    legend = [t.get_text() for t in memory.get_legend().get_texts()]
    assert "static 8 MiB" in legend and "budget 36 MiB" in legend
    assert f"peak {schedule.peak_bytes / MIB:.4g} MiB" in legend
    assert f"peak {schedule.peak_bytes / MIB:.4g} MiB fits" in fig._suptitle.get_text()
    assert not [t for t in _texts(fig) if "GiB" in t]


@pytest.mark.parametrize(
    ("seconds_per_layer", "unit", "makespan"),
    [(1e-3 / 5, "ms", 3), (2e-6, "us", 30), (0.2, "s", 3)],
)
def test_the_time_axis_is_in_the_unit_the_makespan_fills(seconds_per_layer, unit, makespan):
    profile = _small_model(seconds_per_layer)
    fig = timeline_figure(profile, planopt.Plan.keep_all(profile))
    memory = fig.axes[1]
    assert memory.get_xlabel() == f"time ({unit})"
    assert memory.get_xlim()[1] == pytest.approx(makespan * 1.005, rel=1e-6)
    assert f"makespan {makespan} {unit}" in fig._suptitle.get_text()


def test_saved_figures(tmp_path, greedy_plan):
    profile, plan, budget = greedy_plan
    fig = timeline_figure(profile, plan, budget=budget)
    png = save_figure(fig, tmp_path / "t.png")
    assert png.read_bytes()[:8] == PNG_MAGIC
    first = save_figure(fig, tmp_path / "a.svg").read_bytes()
    second = save_figure(fig, tmp_path / "b.svg").read_bytes()
    assert first == second  # no dates or random ids: re-drawing is reproducible
    with pytest.raises(planopt.PlanoptError, match=r"\.png"):
        save_figure(fig, tmp_path / "t.jpeg")


def test_show_plot_writes_the_timeline(tmp_path, capsys):
    profile = planopt.bundled_profile(NET)
    solution = planopt.solve(profile, "50%", "greedy")
    plan_path = tmp_path / "plan.json"
    planopt.save_plan(solution.plan, plan_path)
    out = tmp_path / "timeline.png"
    code = cli.main(["show", NET, str(plan_path), "--budget", "50%", "--plot", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert f"timeline written to {out}" in captured.out


def test_show_plot_errors_are_one_line(tmp_path, capsys):
    code = cli.main(["show", NET, "--plot", str(tmp_path / "x.gif")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--plot must end in" in err
    (tmp_path / "file").write_text("")
    code = cli.main(["show", NET, "--plot", str(tmp_path / "file" / "x.png")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--plot: the folder" in err
    assert "must be a folder, got a file" in err


def test_without_matplotlib_planning_works_and_plotting_says_what_to_install(tmp_path):
    code = f"""
import sys
sys.modules["matplotlib"] = None
import planopt, planopt.cli, planopt.experiment
from planopt.experiment import make_jobs, run_sweep, SerialExecutor, write_outputs
p = planopt.random_chain(5, seed=0, family="uniform")
jobs = make_jobs([p], (0.9,), ["sqrt-n"])
results = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
write_outputs(results, {{p.name: p}}, {str(tmp_path)!r}, None, draws=2)
code = planopt.cli.main(["show", "{NET}", "--plot", {str(tmp_path / "x.png")!r}])
print("exit", code)
"""
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "exit 2" in proc.stdout
    assert "pip install 'planopt[plots]'" in proc.stderr
    assert (tmp_path / "gap.md").is_file()


# -- sweep figures --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_sweep():
    profiles = [planopt.random_chain(6, seed=s, family="uniform") for s in range(2)]
    jobs = make_jobs(
        profiles, (1.0, 0.9, 0.7, 0.6), ["greedy", "sqrt-n", "all-swap"], time_limit=10
    )
    results = run_sweep(jobs, executor=SerialExecutor(), cache=None, progress=False)
    return {p.name: p for p in profiles}, results


def _labels(fig) -> list[str]:
    return [ax.get_xlabel() for ax in fig.axes] + [ax.get_ylabel() for ax in fig.axes]


def test_sweep_figures_have_labelled_axes_and_legends(small_sweep, tmp_path):
    profiles, results = small_sweep
    fig = plots.overhead_vs_budget(results)
    assert "budget (% of keep-all activation memory)" in _labels(fig)
    assert fig.legends and "pooch (greedy)" in [t.get_text() for t in fig.legends[0].texts]

    fig = plots.gap_distribution(gap_rows(results))
    assert "gap T / T_ref - 1 (%)" in _labels(fig)

    fig = plots.solve_time_vs_layers(results)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert ax.get_ylabel() == "solve time (s, log scale)"
    assert ax.get_legend() is not None

    rows = robustness_rows(results, profiles, draws=2)
    fig = plots.robustness_figure(rows, advantage_rows(rows))
    assert "re-scorings over budget (%)" in _labels(fig)
    written = plots.save_both(fig, tmp_path, "robustness")
    assert [p.suffix for p in written] == [".png", ".svg"]
    assert all(p.stat().st_size > 1000 for p in written)


def test_method_styles_are_stable():
    cbc, highs = plots.method_style("exact[cbc]"), plots.method_style("exact[highs]")
    assert cbc["color"] != highs["color"] and cbc["linestyle"] != highs["linestyle"]
    assert plots.method_style("exact")["marker"] == cbc["marker"]
    new = plots.method_style("some-new-method")
    assert plots.method_style("some-new-method") == new
    assert json.dumps(new)  # plain data
