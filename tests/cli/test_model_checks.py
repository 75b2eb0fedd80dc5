"""Every command checks models and outputs as the claim scripts do, through the same checks: two models of one name
(results are filed by name) and an output that is a file are one line `error: <parameter>: ...`, exit status 2,
before any model is loaded."""

import json
import shutil

import pytest
import torch

from gpt2_posheads.cli.args import main_entry
from gpt2_posheads.model.folder import folder_fingerprint

from conftest import MINI_DIR, load_script


def refuse_loading(*a, **k):
    raise AssertionError("a model was loaded before the mistake was said")


def one_error_line(capsys, command: str, argv: list[str]) -> str:
    """Run ``command`` with ``argv``: it must exit 2 with one line on stderr, which is returned."""
    with pytest.raises(SystemExit) as e:
        main_entry(load_script(command).main, argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    return err[0]


@pytest.fixture
def other_mini(tmp_path):
    """A folder named `mini-gpt2` beside the shipped one, holding another model (another initializer range in its
    config: other weights fingerprint)."""
    d = tmp_path / "mine" / "mini-gpt2"
    shutil.copytree(MINI_DIR, d)
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "initializer_range": 0.03}))
    assert folder_fingerprint(d) != folder_fingerprint(MINI_DIR)
    return d


def test_head_atlas_refuses_two_models_of_one_name(other_mini, tmp_path, capsys, monkeypatch):
    """The atlas files each model's table by its name: a second `mini-gpt2` would replace the first one's table."""
    atlas = load_script("head_atlas")
    monkeypatch.setattr(atlas, "load_model", refuse_loading)
    argv = ["--models", "mini-gpt2", "--model-dirs", str(other_mini), "--out", str(tmp_path / "o"), "--no-png"]
    line = one_error_line(capsys, "head_atlas", argv)
    assert line.startswith(f"error: --models: mini-gpt2 is another model of the same name ({other_mini}, weights ")
    assert f"this one {MINI_DIR}, weights {folder_fingerprint(MINI_DIR)}" in line and "rename one" in line
    assert not (tmp_path / "o").exists()


def test_run_all_refuses_two_models_of_one_name(other_mini, tmp_path, capsys, monkeypatch):
    """As the atlas: the main job would file both models' results in one folder (the scripts would then refuse the
    second, one by one)."""
    run_all = load_script("run_all")
    monkeypatch.setattr(run_all, "run_here", refuse_loading)
    argv = ["--models", "mini-gpt2", "--model-dirs", str(other_mini), "--out", str(tmp_path / "r"), "--no-png"]
    line = one_error_line(capsys, "run_all", argv)
    assert line.startswith(f"error: --model-dirs: {other_mini} is another model of the same name ({MINI_DIR}, ")
    assert not (tmp_path / "r").exists()


def test_one_model_given_twice_is_one_model_of_its_name(tmp_path):
    """The same folder given by name and by path: one name, one fingerprint, no refusal."""
    from gpt2_posheads.cli.experiment import check_model_names

    names = check_model_names([("--model", "mini-gpt2"), ("--model-dir", str(MINI_DIR))])
    assert names == {"mini-gpt2": ("mini-gpt2", folder_fingerprint(MINI_DIR)), str(MINI_DIR): names["mini-gpt2"]}


@pytest.mark.parametrize("below", ["", "/models"])
def test_build_compiled_models_out_dir_that_is_a_file_is_one_line(tmp_path, capsys, below):
    (tmp_path / "a_file").write_text("x")
    line = one_error_line(
        capsys, "build_compiled_models", ["--only", "route-gpt2", "--out-dir", f"{tmp_path}/a_file{below}"]
    )
    made = f", so {tmp_path}/a_file{below} cannot be made" if below else ""
    allowed = "a folder (new, empty, or one the toolkit wrote); choose another --out-dir"
    assert line == f"error: --out-dir: {tmp_path}/a_file is a file{made}; {allowed}"
    assert (tmp_path / "a_file").read_text() == "x"


def test_train_mini_gpt2_out_that_is_a_file_is_one_line_before_the_text_is_read(tmp_path, capsys, monkeypatch):
    train = load_script("train_mini_gpt2")
    monkeypatch.setattr(train, "training_documents", refuse_loading)
    (tmp_path / "a_file").write_text("x")
    line = one_error_line(capsys, "train_mini_gpt2", ["--out", f"{tmp_path}/a_file", "--no-png"])
    assert line.startswith(f"error: --out: {tmp_path}/a_file is a file;")


def test_cache_activations_checks_its_output_before_loading(tmp_path, capsys, monkeypatch):
    """A cache file under a file is one line; an earlier cache of another model at --out is refused as a results
    folder of another model is (--force replaces it), before the model loads."""
    from safetensors.torch import save_file

    cache = load_script("cache_activations")
    monkeypatch.setattr(cache, "model_from_args", refuse_loading)
    (tmp_path / "a_file").write_text("x")
    argv = ["--model-dir", str(MINI_DIR), "--no-png"]
    line = one_error_line(capsys, "cache_activations", [*argv, "--out", f"{tmp_path}/a_file/c.safetensors"])
    assert line.startswith(f"error: --out: {tmp_path}/a_file is a file;")
    earlier = tmp_path / "c.safetensors"
    provenance = {"model": "/elsewhere/mini-gpt2", "fingerprint": "sha256:0123456789abcdef"}
    save_file({"diagonals": torch.zeros(1)}, str(earlier), metadata={"provenance": json.dumps(provenance)})
    line = one_error_line(capsys, "cache_activations", [*argv, "--out", str(earlier)])
    assert line.startswith(f"error: --out: {earlier} holds the cache of another model of the same name (/elsewhere")
    assert "--force" in line.split(";")[-1]
