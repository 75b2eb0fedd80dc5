"""Faults outside the measurement never cost a result: the results are in place before the claims table is printed,
a reader that stops early (``| head -2``) ends the run quietly with its results kept, a console that cannot show a
character gets a replacement character, and a full disk is one line naming the folder with earlier results intact."""

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid

import pytest

from gpt2_posheads.cli.args import ConsoleStream, main_entry
from gpt2_posheads.cli.output import LOCK, MANIFEST, Output
from gpt2_posheads.model.paths import REPO_ROOT

from conftest import EXPERIMENTS, Started

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}

# A script as every experiment is one: results staged, a claims table with characters outside ASCII (an ellipsis,
# an arrow), then the commit. It prints its first line, then waits until the reader has gone before printing on.
SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    from gpt2_posheads.claims.verdicts import at_most, judge
    from gpt2_posheads.cli.args import main_entry
    from gpt2_posheads.cli.output import Output

    def main(argv):
        target, gone = argv
        out = Output.open(target, "s", png=False)
        print("first line", flush=True)
        while gone != "-" and not os.path.exists(gone):
            time.sleep(0.02)
        for i in range(2000):  # far more than a pipe holds: the closed pipe is met here, mid-run
            print(f"line {i} \u2192 a long head ratio \u2026", flush=i % 100 == 0)
        out.path("ranking.csv").write_text("name,ratio\\nL4H11,0.01\\n")
        claim = judge("a head attends almost only to the previous token \u2026", "L4H11: 0.01",
                      at_most(0.1, "ratio \u2192 sharpest"), {"ratio": 0.01}, 0.01)
        out.summary({"script": "s"}, [claim])
        out.commit()

    if __name__ == "__main__":
        if os.environ.get("NO_GUARD"):
            main(sys.argv[1:])
        else:
            main_entry(main, sys.argv[1:])
    """
)


@pytest.fixture(scope="module")
def processes(tiny_dir, tmp_path_factory):
    """``(runs, root)``: the real processes of this module's tests, started together (each spends most of its time in
    a fresh interpreter's imports, so they overlap); each test reads from its own and checks it as if it had run it
    alone. ``root / <name>`` is the folder of each."""
    root = tmp_path_factory.mktemp("processes")
    script = root / "script.py"
    script.write_text(SCRIPT, encoding="utf-8")
    runs = Started()
    # a reader that closes early: the script with main_entry's guard and without it, each waiting for its reader
    for name, env in (("guarded", ENV), ("plain", {**ENV, "NO_GUARD": "1"})):
        (root / name).mkdir()
        runs.start(name, [sys.executable, str(script), str(root / name / "out"), str(root / name / "gone")], env=env)
    # a console that cannot show a character: ASCII, Latin-1
    for encoding in ("ascii", "latin-1"):
        (root / encoding).mkdir()
        args = [sys.executable, str(script), str(root / encoding / "out"), "-"]
        runs.start(encoding, args, env={**ENV, "PYTHONIOENCODING": encoding}, text=False)
    # a real script piped into head
    (root / "head").mkdir()
    cmd = (
        f"{sys.executable} {EXPERIMENTS / 'rank_prev_heads.py'} --model-dir {tiny_dir} --prompts wikitext "
        f"--n-prompts 2 --seq-len 32 --no-png --out {root / 'head' / 'ranked'} | head -2; "
        "echo status=${PIPESTATUS[0]}"
    )
    runs.start("head", ["bash", "-c", cmd], env=ENV)
    yield runs, root
    runs.stop()


def read_then_close(proc, gone) -> subprocess.CompletedProcess:
    """Read the script's first line, close the pipe (as ``head -1`` does), then let it print on."""
    assert proc.stdout.readline() == "first line\n"
    proc.stdout.close()
    gone.write_text("the reader has gone")
    err = proc.stderr.read()
    proc.wait(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, "", err)


def test_a_reader_that_closes_early_keeps_the_results_and_ends_quietly(processes):
    runs, root = processes
    target = root / "guarded" / "out"
    r = read_then_close(runs.process("guarded"), root / "guarded" / "gone")
    assert r.returncode == 0 and r.stderr == "", r.stderr  # quiet: no traceback, no "Exception ignored"
    assert (target / "ranking.csv").read_text().startswith("name,ratio")
    summary = json.loads((target / "summary.json").read_text())
    assert [c["verdict"] for c in summary["claims"]] == ["held"]
    assert not (target / LOCK).exists() and not list((root / "guarded").glob(".out.partial-*"))
    # the same script without main_entry's guard: the closed pipe ends it and the results are lost (what is fixed)
    plain = read_then_close(runs.process("plain"), root / "plain" / "gone")
    assert plain.returncode != 0 and "BrokenPipeError" in plain.stderr
    assert not (root / "plain" / "out" / "summary.json").exists()


def test_a_real_script_piped_into_head(processes):
    """``rank_prev_heads.py ... | head -2`` in a shell pipeline: two lines, exit status 0, every result written."""
    runs, root = processes
    out = root / "head" / "ranked"
    r, _ = runs.result("head", timeout=600)
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and lines[-1] == "status=0", r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr, r.stderr
    assert {"ranking.csv", "summary.json", "ratio_grid.html"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "summary.json").read_text())["claims"]


def test_a_console_that_cannot_show_a_character_gets_a_replacement(processes):
    runs, root = processes
    r, _ = runs.result("ascii", timeout=120)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode()
    out = r.stdout.decode("ascii")  # every byte the console got is ASCII
    assert "line 0 ? a long head ratio ?" in out and "ratio ? sharpest" in out and "held" in out
    summary = json.loads((root / "ascii" / "out" / "summary.json").read_text(encoding="utf-8"))
    assert summary["claims"][0]["claim"].endswith("\u2026")
    # Latin-1 (a Windows or old Unix terminal): the same, with that encoding's replacement
    r, _ = runs.result("latin-1", timeout=120)
    assert r.returncode == 0 and "ratio ? sharpest" in r.stdout.decode("latin-1")


def test_the_console_stream_replaces_and_silences(tmp_path):
    import io

    raw = io.BytesIO()
    s = ConsoleStream(io.TextIOWrapper(raw, encoding="ascii", errors="strict"))
    assert s.write("a \u2192 b\n") == len("a ? b\n")
    s.flush()
    assert raw.getvalue() == b"a ? b\n"

    class Closed(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    c = ConsoleStream(Closed())
    assert c.write("lost\n") == 5 and c.gone and c.write("and this\n") == 9  # silenced, never raising


def test_the_table_is_printed_after_the_results_are_in_place(tmp_path, capsys):
    """When the claims table appears, the summary it shows is already in the target folder."""
    from gpt2_posheads.claims.verdicts import at_most, judge

    target = tmp_path / "out"
    seen = {}

    class Watch:
        def write(self, text):
            if "verdict" in text and "summary" not in seen:
                seen["summary"] = (target / "summary.json").exists()
            return len(text)

        def flush(self):
            pass

    def main(argv):
        out = Output.open(target, "s", png=False)
        out.summary({}, [judge("c", "p", at_most(1, "x"), {"x": 0.5}, 0.5)])
        sys.stdout = Watch()
        out.commit()

    saved = sys.stdout
    try:
        main_entry(main, [])
    finally:
        sys.stdout = saved
    assert seen == {"summary": True}


# --- a full disk ---------------------------------------------------------------------------------------------------


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def earlier_results(target):
    out = Output.open(target, "s", png=False)
    out.path("ranking.csv").write_text("old")
    out.summary({"run": "earlier"})
    out.commit(quiet=True)
    return {p.name: p.read_bytes() for p in target.iterdir()}


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_while_plotly_writes_is_one_line_and_keeps_earlier_results(code, tmp_path, capsys, monkeypatch):
    import plotly.graph_objects as go

    target = tmp_path / "out"
    before = earlier_results(target)

    def full(*a, **k):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(go.Figure, "write_html", full)

    def main(argv):
        out = Output.open(target, "s", png=False)
        out.path("ranking.csv").write_text("new")
        out.figure(go.Figure(), "fig")

    with pytest.raises(SystemExit) as e:
        main_entry(main, [])
    assert e.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: --out: no space left on {target} (") and "kept" in line, line
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before  # nothing of the earlier run moved
    assert not list(tmp_path.glob(".out.partial-*"))


@pytest.fixture
def tiny_disk(tmp_path):
    """A 6 MiB tmpfs (a real full disk); skipped where this user cannot mount one."""
    mount = tmp_path / f"disk-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()})")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_a_real_full_disk(tiny_disk, capsys):
    """On a 6 MiB disk: a run that fits (plotly's 3.6 MB script and a figure), then one that does not (its staging
    copy would need as much again): one line naming the folder, exit status 2, the first run's files untouched, no
    staging folder or lock left; then a disk with no room even for the lock."""
    import pandas as pd
    import plotly.graph_objects as go

    target = tiny_disk / "out"

    def main(argv):
        out = Output.open(target, "s", png=False)
        out.csv(pd.DataFrame({"run": [argv[0]]}), "ranking")
        if argv[1:] != ["numbers only"]:
            out.figure(go.Figure(go.Scatter(x=[0, 1], y=[0, 1])), "fig")
        out.summary({"run": argv[0]})
        out.commit(quiet=True)

    main_entry(main, ["first"])
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    assert "plotly.min.js" in before and json.loads(before["summary.json"])["run"] == "first"
    with pytest.raises(SystemExit) as e:
        main_entry(main, ["second"])
    assert e.value.code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: --out: no space left on {target} (the disk is full)"), line
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    assert sorted(p.name for p in tiny_disk.iterdir()) == ["out"]
    # fill the disk to the last byte: even the lock cannot be written, and none is left behind
    with open(tiny_disk / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
        while True:
            f.write(b"\0" * 65536)
    with pytest.raises(SystemExit) as e:
        main_entry(main, ["third"])
    assert e.value.code == 2 and "no space left on" in one_error_line(capsys)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before and not (target / LOCK).exists()
    (tiny_disk / "filler").unlink()
    main_entry(main, ["fourth", "numbers only"])  # space again: the folder takes the next run (no lock left)
    assert json.loads((target / "summary.json").read_text())["run"] == "fourth" and (target / MANIFEST).exists()
