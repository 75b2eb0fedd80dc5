"""Output folders never lose or mix results: only the toolkit's own files are replaced, a failed or interrupted run
changes nothing, and two runs cannot write one folder at once."""

import errno
import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from gpt2_posheads.cli import Output, main_entry
from gpt2_posheads.cli.output import LOCK, MANIFEST, acquire_lock
from gpt2_posheads.model.paths import REPO_ROOT, lock_record, process_start
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


def write_lock(folder, text: str, age_s: float = 60.0):
    """A lock file written ``age_s`` seconds ago (a lock being written this instant is waited for, not judged)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK).write_text(text)
    then = time.time() - age_s
    os.utime(folder / LOCK, (then, then))
    return folder / LOCK


def mine(**changes) -> str:
    """A lock of this process, as acquire_lock writes it, with ``changes``."""
    return json.dumps({**lock_record(script="s", started="2026-01-01T00:00:00+00:00"), **changes})


@pytest.mark.parametrize(
    "text, age_s, words",
    [
        ("", 60, "it is empty"),
        ("\x00garbage{", 60, "not a lock this toolkit writes"),
        ('{"pid": "twelve", "host": 3}', 60, "not a lock this toolkit writes"),
        (mine(host="another-machine"), 60, "a run on another machine (s, pid"),
        (mine(host="another-machine"), 3 * 24 * 3600, "72 h ago, probably left by a run that ended"),
    ],
    ids=["empty", "garbage", "no-pid", "other-host", "other-host-old"],
)
def test_a_lock_no_live_run_can_be_shown_to_hold_is_named_with_how_to_remove_it(tmp_path, text, age_s, words):
    """A lock that cannot be checked from here (empty, not the toolkit's, another machine's) is never taken over
    silently nor waited on for good: one line naming the lock file and the command that removes it; once removed,
    the folder is free."""
    lock = write_lock(tmp_path / "res", text, age_s)
    with pytest.raises(UsageError) as e:
        Output.open(tmp_path / "res", "s", png=False)
    assert e.value.param == "--out" and words in e.value.problem and f"rm '{lock}'" in e.value.hint, str(e.value)
    assert lock.read_text() == text  # left as it was
    lock.unlink()
    run(tmp_path / "res", {"a.csv": "ok"})


def test_a_lock_of_a_live_run_names_the_run_and_its_lock(tmp_path):
    lock = write_lock(tmp_path / "res", mine())
    with pytest.raises(UsageError) as e:
        Output.open(tmp_path / "res", "s", png=False)
    assert f"being written by another run (s, pid {os.getpid()}" in e.value.problem and str(lock) in e.value.hint


def test_a_lock_whose_pid_names_another_process_now_is_taken_over_and_said(tmp_path, capsys):
    """A pid is reused once its process ends: a lock naming a live pid whose process started at another time than the
    lock's writer (``/proc/<pid>/stat``) was left by a run that ended, and is taken over like a dead one."""
    start = process_start(os.getpid())
    if start is None:
        pytest.skip("no /proc here: a process's start time cannot be read")
    write_lock(tmp_path / "res", mine(pid_start=start - 1))
    run(tmp_path / "res", {"a.csv": "ok"})
    err = capsys.readouterr().err
    assert f"removed {tmp_path / 'res' / LOCK}, left by a run that ended without finishing (s, pid {os.getpid()}" in err
    assert f"pid {os.getpid()} is now another process" in err and (tmp_path / "res" / "a.csv").read_text() == "ok"


def test_process_start_is_when_the_process_started_whatever_its_name():
    """A process started now, named ``a) b (c`` (the name in ``/proc/<pid>/stat`` may hold ``) ``, so fields are
    counted after its last ``)``): its start, in clock ticks after boot (``btime`` in /proc/stat), is now."""
    if process_start(os.getpid()) is None:
        pytest.skip("no /proc here")
    name = "import ctypes, time; ctypes.CDLL(None).prctl(15, b'a) b (c', 0, 0, 0)"
    started = time.time()
    child = subprocess.Popen([sys.executable, "-c", f"{name}; print(1, flush=True); time.sleep(30)"], stdout=-1)
    try:
        assert child.stdout.readline().strip() == b"1"
        with open(f"/proc/{child.pid}/stat") as f:
            assert f.read().startswith(f"{child.pid} (a) b (c) ")
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        at = boot + process_start(child.pid) / os.sysconf("SC_CLK_TCK")
        assert started - 2 <= at <= time.time() + 1
    finally:
        child.kill()
        child.wait()


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
