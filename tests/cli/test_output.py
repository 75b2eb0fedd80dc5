"""Output folders never lose or mix results: only the toolkit's own files are replaced, a failed or interrupted run
changes nothing, and two runs cannot write one folder at once."""

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

from gpt2_posheads.cli import Output, main_entry
from gpt2_posheads.cli.output import LOCK, MANIFEST, acquire_lock
from gpt2_posheads.model.paths import REPO_ROOT
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


# --- runs that end without finishing ----------------------------------------------------------------------------


def test_a_killed_runs_staging_folder_and_lock_are_removed_by_the_next_run(tmp_path, capsys):
    """`kill -9` mid-run leaves its staging folder and lock; the next run in that folder removes both, says so, and
    writes; the earlier results were never touched."""
    t = tmp_path / "res"
    run(t, {"summary.json": "earlier"})
    code = textwrap.dedent(
        f"""
        import time
        from gpt2_posheads.cli.output import Output
        out = Output.open({str(t)!r}, "s", png=False)
        out.path("summary.json").write_text("half")
        print("ready", flush=True)
        time.sleep(120)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.kill()
        proc.communicate()
    staging = tmp_path / f".res.partial-{proc.pid}"
    assert staging.is_dir() and (t / LOCK).exists() and (t / "summary.json").read_text() == "earlier"
    run(t, {"summary.json": "next"})
    err = capsys.readouterr().err
    assert f"removed {t / LOCK}, left by a run that ended without finishing (s, pid {proc.pid}" in err
    assert f"removed {staging}, left by a run that ended without finishing (pid {proc.pid})" in err
    assert not staging.exists() and not (t / LOCK).exists() and (t / "summary.json").read_text() == "next"


def test_an_interrupted_first_run_leaves_no_empty_folder(tmp_path):
    """Ctrl-C before a first run's results are in place: the folders it made are gone (a folder that held something
    before, or that resumable work was written into, stays)."""
    target = tmp_path / "results" / "script" / "model"

    def interrupted(argv):
        out = Output.open(target, "s", png=False)
        out.path("summary.json").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as e:
        main_entry(interrupted, [])
    assert e.value.code == 130 and list(tmp_path.iterdir()) == []
    (tmp_path / "results").mkdir()
    with pytest.raises(SystemExit):
        main_entry(interrupted, [])
    assert [p.name for p in tmp_path.iterdir()] == ["results"] and list((tmp_path / "results").iterdir()) == []


@pytest.mark.parametrize(
    "code, words",
    [
        (errno.EFBIG, "a file would pass this process's file-size limit (ulimit -f)"),
        (errno.EROFS, "a read-only file system"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_a_folder_that_cannot_be_written_is_one_line_like_a_full_disk(code, words, tmp_path, capsys):
    t = tmp_path / "res"
    run(t, {"summary.json": "earlier"})

    def main(argv):
        out = Output.open(t, "s", png=False)
        raise OSError(code, os.strerror(code), str(out.path("summary.json")))

    with pytest.raises(SystemExit) as e:
        main_entry(main, [])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: --out: {t} cannot be written ({words})")
    assert "results written before are kept" in err[0] and (t / "summary.json").read_text() == "earlier"
    assert not (t / LOCK).exists() and not list(tmp_path.glob(".res.partial-*"))


def test_permission_denied_elsewhere_keeps_its_traceback(tmp_path):
    """Permission denied on a file the run reads (not one it writes) is not an output folder's fault."""

    def main(argv):
        Output.open(tmp_path / "res", "s", png=False)
        raise PermissionError(errno.EACCES, "Permission denied", "/etc/some-input")

    with pytest.raises(PermissionError):
        main_entry(main, [])
    assert not (tmp_path / "res").exists()


def test_a_file_size_limit_is_one_line_and_leaves_nothing(tmp_path):
    """A real `ulimit -f` (EFBIG): one line naming the folder, status 2, no empty results folder, no staging."""
    import resource

    target = tmp_path / "results" / "s" / "m"
    code = textwrap.dedent(
        f"""
        import sys
        from gpt2_posheads.cli.args import main_entry
        from gpt2_posheads.cli.output import Output

        def main(argv):
            out = Output.open({str(target)!r}, "s", png=False)
            out.path("big.csv").write_bytes(b"0" * (8 << 20))
            out.commit()

        sys.exit(main_entry(main, []))
        """
    )
    limit = 2 << 20
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: --out: {target} cannot be written (a file would pass")
    assert list(tmp_path.iterdir()) == []
