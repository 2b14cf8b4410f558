"""`planopt profile-model module:factory`: the user's own model, profiled, planned and checked.

The factory protocol is `run-check --model`'s (`tests/factories.py`). The
written profile is checked against what PyTorch holds: `planopt run-check`
on the same factory runs the solved plan and its tracker-measured peak must
be the prediction within the fidelity benchmark's tolerance. Bad input is
one `planopt: error:` line, exit 2, and no file written.
"""

from __future__ import annotations

import json

import pytest
from cli_output import one_error_line, run

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import planopt  # noqa: E402
from planopt.io import load_profile  # noqa: E402

FAST = ("--iterations", "1", "--warmup", "0")


def test_factory_model_is_measured_and_run_check_holds_on_it(capsys, tmp_path):
    prof_path, plan_path = tmp_path / "cnn.json", tmp_path / "plan.json"
    code, out, err = run(
        capsys, "profile-model", "factories:tutorial_cnn", "-o", str(prof_path), *FAST
    )
    assert code == 0, err
    assert str(prof_path) in out and "measured step" in out
    prof = load_profile(prof_path)
    assert prof.name == "tutorial_cnn-cpu-fp32-measured"
    # the tutorial's in-place ReLUs and Flatten are fused with the layer before them
    assert [layer.name for layer in prof.layers][:3] == [
        "conv2d0",
        "batchnorm2d1+relu2",
        "conv2d3+relu4",
    ]
    assert prof.source.startswith("MEASURED") and prof.device.name.startswith("instant")
    solution = planopt.solve(prof, "70%")
    assert solution.plan is not None
    planopt.save_plan(solution.plan, plan_path)
    model = ("--model", "factories:tutorial_cnn")
    code, out, err = run(
        capsys, "run-check", str(prof_path), str(plan_path), *model, "--iterations", "1", "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["predicted_peak"] == solution.schedule.peak_bytes
    assert -0.005 <= report["peak_error"] <= 0.02
    assert report["measured_peak"] <= solution.budget * 1.005


def test_object_protocol_with_model_args(capsys, tmp_path):
    target = tmp_path / "mlp.json"
    args = ("--model-args", json.dumps({"width": 8}), "--name", "mine", "--device", "cpu")
    code, _, err = run(capsys, "profile-model", "factories:mlp_object", *args, "-o", str(target))
    assert code == 0, err
    prof = load_profile(target)
    assert prof.name == "mine" and len(prof.layers) == 3
    assert prof.layers[0].out_bytes == 4 * 8 * 4  # 4 samples x width 8, fp32


def test_gpu_traces_the_factory_model_for_that_gpu(capsys, tmp_path):
    target = tmp_path / "g.json"
    code, out, err = run(
        capsys, "profile-model", "factories:tutorial_cnn", "--gpu", "h100-pcie", "-o", str(target)
    )
    assert code == 0, err
    prof = load_profile(target)
    assert prof.source.startswith("TRACED") and "ESTIMATES" in prof.source
    assert prof.device.name == "h100-pcie5" and "estimated step" in out


def test_link_names_a_gpus_host_link(capsys, tmp_path):
    target = tmp_path / "l.json"
    args = ("--link", "h100-pcie", *FAST)
    code, _, err = run(capsys, "profile-model", "factories:mlp_object", *args, "-o", str(target))
    assert code == 0, err
    assert (
        load_profile(target).device.h2d_bandwidth
        == planopt.hardware.gpu("h100-pcie").link_bandwidth
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nomodule:make"], "model must be one of torchvision:resnet50"),
        (["nomodule:make"], "or name a factory as module:attr, got 'nomodule:make'"),
        (["factories:nothing"], "module 'factories' has no attribute 'nothing'"),
        (["factories:NOT_CALLABLE"], "must name a callable factory"),
        (["factories:raises"], "the factory raised RuntimeError: no data folder ./images"),
        (["factories:two_things"], "the factory must return (chain, (inputs, targets), loss_fn)"),
        (["factories:not_a_chain"], "chain must be a planopt.runtime.Chain or an nn.Sequential"),
        (["factories:bad_batch"], "batch must be (inputs, targets), two tensors, got Tensor"),
        (
            ["factories:tutorial_cnn", "--model-args", '{"bogus": 1}'],
            "the factory raised TypeError",
        ),
        (["factories:tutorial_cnn", "--model-args", "[1]"], "--model-args must be a JSON object"),
        (["factories:tutorial_cnn", "--batch", "2"], "--batch applies to named models only"),
        (
            ["factories:tutorial_cnn", "--gpu", "h100-pcie", "--device", "cpu"],
            "--device applies to a measured profile",
        ),
        (["factories:tutorial_cnn", "--link", "nvlink"], "--link must be 'instant' or a GPU"),
        (["factories:tutorial_cnn", "--device", "cuda:7"], "--device must be a device"),
        (["torchvision:resnet50", "--device", "cpu"], "--device applies to a factory's model"),
    ],
)
def test_bad_factory_input_is_one_line_and_exit_2(capsys, tmp_path, argv, message):
    target = tmp_path / "p.json"
    code, _, err = run(capsys, "profile-model", *argv, "-o", str(target))
    assert code == 2
    assert message in one_error_line(err)
    assert not target.exists()


def test_run_check_takes_the_same_factories_and_says_the_same(capsys, tmp_path):
    """run-check builds the model with the same loader: the same one-line errors."""
    prof = planopt.bundled.resolve_profile("vgg16-b64-a100-pcie4-roofline")
    plan_path = tmp_path / "plan.json"
    planopt.save_plan(planopt.Plan.keep_all(prof), plan_path)
    code, _, err = run(
        capsys,
        "run-check",
        "vgg16-b64-a100-pcie4-roofline",
        str(plan_path),
        "--model",
        "factories:raises",
    )
    assert code == 2
    assert "--model factories:raises with --model-args {}: the factory raised" in one_error_line(
        err
    )


def test_run_check_runs_a_plan_with_layer_options(capsys, tmp_path):
    """A /3 profile (menus, the default) and a plan keeping layers on options:
    run-check executes it with the chain executor and the model holds."""
    prof_path, plan_path = tmp_path / "cnn.json", tmp_path / "plan.json"
    code, _, err = run(
        capsys, "profile-model", "factories:tutorial_cnn", "-o", str(prof_path), *FAST
    )
    assert code == 0, err
    prof = load_profile(prof_path)
    options = [min(x.options, key=lambda o: o.saved_bytes).name if x.options else None
               for x in prof.layers]  # fmt: skip
    assert any(options)
    plan = planopt.Plan.build(["keep"] * len(prof), options=options, profile=prof)
    planopt.save_plan(plan, plan_path)
    model = ("--model", "factories:tutorial_cnn")
    code, out, err = run(
        capsys, "run-check", str(prof_path), str(plan_path), *model, "--iterations", "1", "--json"
    )
    assert code == 0, err
    report = json.loads(out)
    assert report["predicted_peak"] == planopt.simulate(prof, plan).peak_bytes
    assert -0.005 <= report["peak_error"] <= 0.02
