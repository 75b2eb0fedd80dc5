"""The compiled models' folder as a user meets it: built once under a lock whoever asks first, a cut-short copy rebuilt
and said, one that cannot be rebuilt or a machine with nowhere to build told in one line naming the option given,
and `--model-dir` hints that never name another model."""

import os
import subprocess
import sys

import pytest

from gpt2_posheads.cli.args import main_entry
from gpt2_posheads.model import paths
from gpt2_posheads.model.paths import CACHE_ENV, MODELS_ENV, REPO_ROOT, folder_lock, shipped_model_dir, write_whole
from gpt2_posheads.model.validation import UsageError
from gpt2_posheads.organism import compiled

from conftest import load_script

NAME = "lookalike-none"  # the compiled model that builds fastest (under a second without its card's numbers)
ARGS = ["--n-prompts", "2", "--seq-len", "32", "--no-png", "--prompts", "wikitext"]


@pytest.fixture(scope="module")
def compiled_model():
    """The compiled model, compiled once for these tests (its weights are what every build here writes)."""
    return compiled.compile_model(NAME)


@pytest.fixture
def models(tmp_path, monkeypatch, compiled_model):
    """An empty models folder (``$GPT2_POSHEADS_MODELS``); builds write the model compiled once above, and leave the
    measured numbers out of the card (the bytes of the model are the same)."""
    folder = tmp_path / "models"
    monkeypatch.setenv(MODELS_ENV, str(folder))
    monkeypatch.setattr(compiled, "compile_model", lambda name, n_vocab=None: compiled_model)
    monkeypatch.setattr(compiled, "measure", lambda out: {})
    return folder


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("note: ")]
    assert len(err) == 1, err
    return err[0]


def test_first_use_builds_through_a_staging_folder_and_a_cut_short_copy_is_rebuilt(models, monkeypatch, capsys):
    """The first use writes into ``.<name>.partial-<pid>`` and renames it into place (a reader never sees half a
    model); a copy whose weights were cut short is rebuilt, said in one line, to the same bytes."""
    written_into = []
    real_write = compiled.write_folder
    monkeypatch.setattr(
        compiled, "write_folder", lambda m, out, card: written_into.append(out) or real_write(m, out, card)
    )
    folder = shipped_model_dir(NAME)
    assert written_into == [models / f".{NAME}.partial-{os.getpid()}"]
    assert f"building {NAME} into {folder}" in capsys.readouterr().out
    assert compiled.check_folder(folder) is None and sorted(p.name for p in models.iterdir()) == [NAME]
    digest = compiled.weights_digest(folder)

    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a copy cut short
    assert shipped_model_dir(NAME) == folder
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"note: {NAME} in {folder} fails its check (model.safetensors is")
    assert "rebuilding it" in err[0]
    assert compiled.weights_digest(folder) == digest and sorted(p.name for p in models.iterdir()) == [NAME]
    assert shipped_model_dir(NAME) == folder and capsys.readouterr().err == ""  # whole again: nothing to say


def test_a_second_caller_waits_for_the_build_and_uses_the_finished_folder(models, capsys):
    """A caller asking for the model while the build is under way waits on the lock (said once), then uses the
    finished folder without building it again; no lock or staging folder is left. (The lock is ``flock`` on an open
    file, which excludes another open file of the same process as it does another process: the test below does
    this with a real second process.)"""
    import threading

    folder = models / NAME
    models.mkdir()
    got = []
    with folder_lock(folder, f"the build of {NAME}"):  # the first caller: it builds
        second = threading.Thread(target=lambda: got.append(shipped_model_dir(NAME)))
        second.start()
        for _ in range(200):
            if "waiting for" in capsys.readouterr().err:
                break
            second.join(0.05)
        else:
            raise AssertionError("the second caller did not wait")
        assert second.is_alive() and not folder.exists()
        write_whole(folder, lambda staging: compiled.build(NAME, staging, measured=False))
    second.join(60)
    assert got == [folder] and "building" not in capsys.readouterr().out
    assert sorted(p.name for p in models.iterdir()) == [NAME] and compiled.check_folder(folder) is None


@pytest.mark.slow
def test_a_second_process_waits_for_the_build_and_uses_the_finished_folder(models):
    """A process asking for the model while another builds it waits (said once), then loads the finished folder
    without building it again; no lock or staging folder is left.

    Slow (a fresh interpreter that imports the package and checks the folder: 9 s of CPU); the default suite tests
    the same lock with a second caller in this process (above)."""
    folder = models / NAME
    models.mkdir()
    env = {**os.environ, MODELS_ENV: str(models), "PYTHONPATH": str(REPO_ROOT)}
    code = f"from gpt2_posheads.model.paths import shipped_model_dir; print(shipped_model_dir({NAME!r}))"
    with folder_lock(folder, f"the build of {NAME}"):  # this process is the first: it builds
        proc = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            waiting = proc.stderr.readline()
            assert waiting.startswith(f"waiting for the build of {NAME} (pid {os.getpid()})"), waiting
            write_whole(folder, lambda staging: compiled.build(NAME, staging, measured=False))  # the first's build
        except BaseException:
            proc.kill()
            raise
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert out.strip() == str(folder) and "building" not in out + err  # the finished folder, used as it is
    assert sorted(p.name for p in models.iterdir()) == [NAME] and compiled.check_folder(folder) is None


def test_a_cut_short_copy_that_cannot_be_rebuilt_is_one_line_naming_model(models, tmp_path, capsys):
    """A failing copy that holds a file a build does not write is left to its owner: one line about `--model` (as
    given), naming the folder and the command that rebuilds it; nothing of the folder is touched."""
    folder = shipped_model_dir(NAME)
    capsys.readouterr()
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    (folder / "notes.txt").write_text("mine")
    mod = load_script("rank_prev_heads")
    with pytest.raises(SystemExit) as e:
        main_entry(mod.main, ["--model", NAME, "--out", str(tmp_path / "out"), *ARGS])
    line = one_error_line(capsys)
    assert e.value.code == 2 and line.startswith(f"error: --model: {folder} fails the check"), line
    assert f"build_compiled_models --only {NAME}" in line and "--model-dir" not in line
    assert "save_pretrained" not in line
    assert (folder / "notes.txt").read_text() == "mine" and weights.stat().st_size == 1000
    assert not (tmp_path / "out").exists()


def test_no_writable_models_folder_is_one_line_naming_where_and_the_variable(tmp_path, monkeypatch, capsys):
    """No `$GPT2_POSHEADS_MODELS`, outside a checkout, and a home where nothing can be made (a file stands where
    the folder should be, which stops root too): one line naming the folder tried and the variable, from the library
    and from a command."""
    home = tmp_path / "home"
    home.write_text("")
    for var in (MODELS_ENV, CACHE_ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(paths, "source_checkout", lambda: None)
    tried = home / ".cache" / "gpt2_posheads" / "models"
    with pytest.raises(UsageError, match=f"model: {NAME} is built on first use, and no models folder can be made: "):
        shipped_model_dir(NAME)
    mod = load_script("rank_prev_heads")
    with pytest.raises(SystemExit) as e:
        main_entry(mod.main, ["--model", NAME, "--out", str(tmp_path / "out"), *ARGS])
    line = one_error_line(capsys)
    assert e.value.code == 2 and line.startswith(f"error: --model: {NAME} is built on first use"), line
    assert f"tried {tried} (" in line and line.endswith(f"set ${MODELS_ENV} to a writable folder")
    assert home.is_file() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "given, hint",
    [
        ("{d}/mini-gpt2", "--model mini-gpt2 loads the shipped one by name"),  # the organism is not in data/
        ("{d}/mini-gpt", "did you mean --model mini-gpt2"),  # a typo of a shipped name, beside route-gpt2
        ("{d}/my-modle", "did you mean {d}/my-model?"),  # a typo of a folder beside it
        ("{d}/other", "shipped models load by name"),  # nothing near: no guess
    ],
)
def test_model_dir_hints_never_name_another_model(given, hint, tmp_path, capsys):
    d = tmp_path / "data"
    for name in ("route-gpt2", "my-model"):
        (d / name).mkdir(parents=True)
        (d / name / "config.json").write_text("{}")
    mod = load_script("rank_prev_heads")
    with pytest.raises(SystemExit) as e:
        main_entry(mod.main, ["--model-dir", given.format(d=d), *ARGS])
    line = one_error_line(capsys)
    assert e.value.code == 2 and line.startswith("error: --model-dir: ") and hint.format(d=d) in line, line
    assert f"{d / 'route-gpt2'}" not in line  # the folder of another model is never offered
