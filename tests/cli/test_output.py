"""Output folders never lose or mix results: only the toolkit's own files are replaced, a failed or interrupted run
changes nothing, and two runs cannot write one folder at once."""

import json
import os
import subprocess
import sys

import pytest

from gpt2_posheads.cli import Output, main_entry
from gpt2_posheads.cli.output import LOCK, MANIFEST, acquire_lock
from gpt2_posheads.model.validation import UsageError


def run(target, files: dict[str, str], script="s", **kw) -> Output:
    out = Output.open(target, script, png=False, **kw)
    for name, text in files.items():
        out.path(name).write_text(text)
    out.commit(quiet=True)
    return out


def test_a_run_replaces_only_what_the_last_run_wrote(tmp_path):
    t = tmp_path / "res"
    run(t, {"a.csv": "1", "b.json": "1"})
    run(t, {"a.csv": "2"})
    assert (t / "a.csv").read_text() == "2" and not (t / "b.json").exists()
    assert json.loads((t / MANIFEST).read_text())["files"] == ["a.csv"]
    assert not (t / LOCK).exists() and not list(tmp_path.glob(".res.partial-*"))


def test_a_folder_with_the_users_files_is_refused_and_kept(tmp_path):
    t = tmp_path / "mine"
    t.mkdir()
    (t / "config.json").write_text("{}")
    (t / "notes.csv").write_text("mine")
    with pytest.raises(UsageError, match="holds files this toolkit did not write .config.json, notes.csv."):
        Output.open(t, "s")
    run(t, {"summary.json": "{}"}, force=True)  # told: written beside them, nothing of the user's touched
    assert (t / "notes.csv").read_text() == "mine" and (t / "config.json").read_text() == "{}"
    with pytest.raises(UsageError, match="notes.csv belongs to you"):
        run(t, {"notes.csv": "overwritten?"}, force=True)
    assert (t / "notes.csv").read_text() == "mine"


def test_another_scripts_results_are_refused(tmp_path):
    t = tmp_path / "model"
    run(t, {"model.safetensors": "weights"}, script="train_mini_gpt2")
    with pytest.raises(UsageError, match="holds the results of train_mini_gpt2"):
        Output.open(t, "rank_prev_heads")
    assert (t / "model.safetensors").read_text() == "weights"


def test_a_failed_run_leaves_the_earlier_results(tmp_path):
    t = tmp_path / "res"
    run(t, {"ranking.csv": "old", "summary.json": "old"})

    def failing(argv):
        out = Output.open(t, "s", png=False)
        out.path("ranking.csv").write_text("new")
        raise UsageError("--n-prompts", "too few documents")

    with pytest.raises(SystemExit):
        main_entry(failing, [])
    assert (t / "ranking.csv").read_text() == "old" and (t / "summary.json").read_text() == "old"
    assert not (t / LOCK).exists() and not list(tmp_path.glob(".res.partial-*"))

    def interrupted(argv):
        out = Output.open(t, "s", png=False)
        out.path("summary.json").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as e:
        main_entry(interrupted, [])
    assert e.value.code == 130 and (t / "summary.json").read_text() == "old"


def test_a_second_run_on_the_same_folder_is_refused(tmp_path):
    t = tmp_path / "res"
    first = Output.open(t, "rank_prev_heads", png=False)
    with pytest.raises(UsageError, match=f"being written by another run .rank_prev_heads, pid {os.getpid()}"):
        Output.open(t, "rank_prev_heads", png=False)
    first.abort()
    run(t, {"a.csv": "ok"})  # free again


def test_a_stale_lock_is_taken_over(tmp_path):
    t = tmp_path / "res"
    t.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    import socket

    (t / LOCK).write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname(), "script": "s"}))
    acquire_lock(t, "s").unlink()


def test_persistent_folder_survives_a_failed_run(tmp_path):
    t = tmp_path / "toy"
    out = Output.open(t, "toy", png=False)
    (out.persistent_dir("runs") / "run1.json").write_text("{}")
    out.abort()
    assert (t / "runs" / "run1.json").exists()
    run(t, {"summary.json": "{}"}, script="toy")  # runs/ is the toolkit's: no --force needed
    assert (t / "runs" / "run1.json").exists()
