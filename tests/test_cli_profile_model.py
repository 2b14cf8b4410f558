"""`planopt profile-model`: a real model's /3 profile (/2 without menus), no GPU; bad input exits 2.

Output sizes are checked against tensor shapes worked out by hand from the
published architectures (ResNet-50's stem output is 64 x 56 x 56 per image,
GPT-2's residual stream d_model = 768 per token, fp32 under autocast).
"""

from __future__ import annotations

import pytest
from cli_output import run

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from planopt.cli.profile_model import MODEL_NAMES  # noqa: E402
from planopt.io import load_profile  # noqa: E402
from planopt.runtime.catalogue import MODELS  # noqa: E402
from planopt.runtime.hf import hf_available  # noqa: E402


def test_the_help_lists_every_catalogue_model():
    assert tuple(MODELS) == MODEL_NAMES


def test_resnet50_profile_has_the_architectures_sizes(capsys, tmp_path):
    out_file = tmp_path / "r50.json"
    code, out, err = run(
        capsys,
        "profile-model",
        "torchvision:resnet50",
        "--batch",
        "2",
        "--gpu",
        "h100-pcie",
        "--dtype",
        "bf16",
        "-o",
        str(out_file),
    )
    assert code == 0, err
    prof = load_profile(out_file)
    names = [layer.name for layer in prof.layers]
    assert names[0] == "stem" and names[-1] == "head" and len(names) == 18
    assert prof.name == "resnet50-b2-h100-pcie5-bf16-traced"
    by_name = {layer.name: layer for layer in prof.layers}
    # bf16 activations: the stem's output is 2 x 64 x 56 x 56, layer4's 2 x 2048 x 7 x 7.
    assert by_name["stem"].out_bytes == 2 * 64 * 56 * 56 * 2
    assert by_name["layer4.2"].out_bytes == 2 * 2048 * 7 * 7 * 2
    assert prof.device.name == "h100-pcie5"
    assert "ESTIMATES" in prof.source and "bfloat16" in prof.source
    assert all(layer.fwd > 0 and layer.bwd > 0 for layer in prof.layers)
    assert str(out_file) in out


@pytest.mark.skipif(not hf_available(), reason="needs transformers (the models extra)")
def test_gpt2_profile_at_a_chosen_sequence_length(capsys, tmp_path):
    out_file = tmp_path / "gpt2.json"
    code, _, err = run(
        capsys, "profile-model", "hf:gpt2", "--batch", "1", "--seq", "32", "-o", str(out_file)
    )
    assert code == 0, err
    prof = load_profile(out_file)
    assert len(prof.layers) == 1 + 12 + 1
    # The residual stream stays fp32 under autocast: 1 x 32 x 768 x 4 bytes per block.
    assert {layer.out_bytes for layer in prof.layers[1:-1]} == {32 * 768 * 4}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["hf:gpt5"], "model must be one of torchvision:resnet50"),
        (["torchvision:resnet50", "--seq", "128"], "--seq applies to hf: models only"),
        (["torchvision:resnet50", "--gpu", "v100"], "gpu must be one of"),
        (["torchvision:resnet50", "--batch", "0"], "must be an integer >= 1"),
        (["torchvision:resnet50", "--dtype", "int8"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv, message):
    code, _, err = run(capsys, "profile-model", *argv, "-o", str(tmp_path / "p.json"))
    assert code == 2
    assert err.startswith("planopt: error:") and message in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()


def test_missing_output_folder_is_refused(capsys, tmp_path):
    target = tmp_path / "no" / "p.json"
    code, _, err = run(capsys, "profile-model", "torchvision:resnet50", "-o", str(target))
    assert code == 2 and "--output: the folder" in err and "must exist" in err


@pytest.mark.skipif(not hf_available(), reason="needs transformers (the models extra)")
def test_gpt2_profile_has_a_menu_per_block_and_no_menus_on_request(capsys, tmp_path):
    with_menus, without = tmp_path / "menus.json", tmp_path / "plain.json"
    base = ["profile-model", "hf:gpt2", "--batch", "1", "--seq", "32"]
    code, _, err = run(capsys, *base, "--menu-size", "5", "-o", str(with_menus))
    assert code == 0, err
    code, _, err = run(capsys, *base, "--no-menus", "--clamped-scratch", "-o", str(without))
    assert code == 0, err
    assert '"format": "planopt.profile/3"' in with_menus.read_text()
    assert '"format": "planopt.profile/2"' in without.read_text()
    signed = tmp_path / "signed.json"  # the default signs the scratch: /3 without menus too
    code, _, err = run(capsys, *base, "--no-menus", "-o", str(signed))
    assert code == 0, err
    assert '"format": "planopt.profile/3"' in signed.read_text()
    clamped = [max(0, layer.bwd_work_bytes) for layer in load_profile(signed).layers]
    assert any(layer.bwd_work_bytes < 0 for layer in load_profile(signed).layers)
    assert clamped == [layer.bwd_work_bytes for layer in load_profile(without).layers]
    prof, plain = load_profile(with_menus), load_profile(without)
    assert not any(layer.options for layer in plain.layers)
    blocks = prof.layers[1:-1]
    # identical blocks get one menu: the exact front, thinned to 5, at 0 bytes first
    assert len({layer.options for layer in blocks}) == 1
    options = blocks[0].options
    assert 2 <= len(options) <= 5 and options[0].saved_bytes == 0
    assert all(0 <= o.saved_bytes < blocks[0].saved_bytes and o.recompute > 0 for o in options)
    assert [o.saved_bytes for o in options] == sorted(o.saved_bytes for o in options)
    # the layers themselves are the /2 profile's
    for a, b in zip(prof.layers, plain.layers, strict=True):
        assert (a.saved_bytes, a.out_bytes, a.fwd) == (b.saved_bytes, b.out_bytes, b.fwd)
    assert "Menus (cost model v3)" in prof.source


@pytest.mark.skipif(not hf_available(), reason="needs transformers (the models extra)")
@pytest.mark.parametrize(
    ("model", "seq", "positions"),
    [("hf:gpt2", 100000, 1024), ("hf:gpt2-medium", 1025, 1024), ("hf:bert-base", 513, 512)],
)
def test_a_sequence_beyond_the_configurations_positions_is_refused(
    capsys, tmp_path, model, seq, positions
):
    # Issue 25: `--seq 100000` built a 100,000-position GPT-2 without a word.
    target = tmp_path / "p.json"
    code, _, err = run(capsys, "profile-model", model, "--seq", str(seq), "-o", str(target))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"seq must be at most {positions} for {model}" in err and str(seq) in err
    assert not target.exists()


@pytest.mark.skipif(not hf_available(), reason="needs transformers (the models extra)")
def test_the_catalogue_refuses_a_sequence_beyond_its_positions_in_the_api_too():
    from planopt.errors import PlanoptError
    from planopt.runtime.catalogue import SequenceLengthError, build_fake

    with pytest.raises(SequenceLengthError, match="at most 131072 for hf:llama-1b") as info:
        build_fake("hf:llama-1b", 1, 131073)
    assert isinstance(info.value, PlanoptError)
    assert {name: m.positions for name, m in MODELS.items() if m.seq is not None} == {
        "hf:gpt2": 1024,
        "hf:gpt2-medium": 1024,
        "hf:llama-1b": 131072,
        "hf:bert-base": 512,
    }
