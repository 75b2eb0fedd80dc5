"""What a new user meets on a fresh machine, by class of failure: a broken model folder, a missing or hanging
browser, a signal, a second model of the same name, unreadable results, awkward prompt files. Each ends in one line
(or works as a user would expect), never in a traceback, a hang, a silent substitution or a lost result."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from gpt2_posheads.cli.args import Terminated, main_entry
from gpt2_posheads.cli.output import LOCK, Output
from gpt2_posheads.model.folder import folder_problem
from gpt2_posheads.model.loading import ModelLoadError, load_model
from gpt2_posheads.model.paths import ORGANISM_DIR, REPO_ROOT
from gpt2_posheads.model.validation import NonFiniteError, UsageError, require_finite

from conftest import EXPERIMENTS, Started, load_script

SCRIPT = ["--prompts", "wikitext", "--n-prompts", "2", "--seq-len", "32", "--no-png"]


@pytest.fixture(scope="module")
def broken(tmp_path_factory, tiny_dir):
    """One folder per class of broken model, each a copy of a small random GPT-2 with one thing wrong."""
    from safetensors.torch import load_file, save_file

    root = tmp_path_factory.mktemp("broken")

    def copy(name):
        d = root / name
        shutil.copytree(tiny_dir, d)
        return d

    d = copy("nan")
    sd = load_file(d / "model.safetensors")
    sd["transformer.h.1.attn.c_attn.weight"][3, 5] = float("nan")
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    d = copy("inf")
    sd = load_file(d / "model.safetensors")
    sd["transformer.wpe.weight"][0, 0] = float("inf")
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    d = copy("truncated")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])
    d = copy("header")
    (d / "model.safetensors").write_bytes(b"\x10\x00")
    d = copy("mismatched")
    cfg = json.loads((d / "config.json").read_text())
    cfg["n_positions"] *= 2
    (d / "config.json").write_text(json.dumps(cfg))
    d = copy("width")
    cfg = json.loads((d / "config.json").read_text())
    cfg["n_embd"] *= 2
    (d / "config.json").write_text(json.dumps(cfg))
    d = copy("no-tokenizer")
    for f in d.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "merges", "special")):
            f.unlink()
    return root


CASES = {
    "nan": "transformer.h.1.attn.c_attn.weight has 1 non-finite",
    "inf": "transformer.wpe.weight has 1 non-finite",
    "truncated": "is truncated",
    "header": "not a safetensors file",
    "mismatched": "config.json does not match the weights: transformer.wpe.weight",
    "width": "config.json does not match the weights",
    "no-tokenizer": "has no tokenizer files",
}


def script_process(folder, out) -> list[str]:
    return [sys.executable, str(EXPERIMENTS / "rank_prev_heads.py"), "--model-dir", str(folder), "--out", str(out)]


PNG_CHECK = "from gpt2_posheads.report.plotting import png_support; import json; print(json.dumps(png_support()))"
HANG_CHECK = textwrap.dedent(
    """
    import json
    from gpt2_posheads.report import plotting
    plotting.PNG_CHECK_TIMEOUT = 5
    print(json.dumps(plotting.png_support()))
    """
)


@pytest.fixture(scope="module")
def processes(broken, tiny_dir, tmp_path_factory):
    """``(runs, root)``: the real processes of this module's tests, started together (each spends its time in a fresh
    interpreter's imports, the hanging browser's in a wait, so they overlap); each test waits for its own and checks it
    as if it had run it alone. ``root / <name>`` is the folder of each."""
    root = tmp_path_factory.mktemp("processes")
    runs = Started()
    here = {"PYTHONPATH": str(REPO_ROOT)}
    for case in CASES:  # a broken folder: the script refuses it
        (root / case).mkdir()
        runs.start(case, script_process(broken / case, root / case / "out") + SCRIPT, env={**os.environ, **here})
    # no browser: a browser path that does not exist, checked alone and met by a script
    (root / "no-browser").mkdir()
    no_browser = {"BROWSER_PATH": str(root / "no-browser" / "no-such-chromium")}
    runs.start("no-browser check", [sys.executable, "-c", PNG_CHECK], env={**os.environ, **here, **no_browser})
    clean = {k: v for k, v in os.environ.items() if k != "GPT2_POSHEADS_PNG"}
    out = root / "no-browser" / "out"
    runs.start("no-browser script", script_process(tiny_dir, out) + SCRIPT[:-1], env={**clean, **here, **no_browser})
    # a browser that never answers
    (root / "hang").mkdir()
    fake = root / "hang" / "chromium"
    fake.write_text("#!/bin/sh\nsleep 600\n")
    fake.chmod(0o755)
    runs.start("hang", [sys.executable, "-c", HANG_CHECK], env={**clean, **here, "BROWSER_PATH": str(fake)})
    yield runs, root
    runs.stop()


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_model_folders_are_one_line_errors(case, broken, processes):
    """Found from the files, before any model is built: the library refuses to load it, a script says it in one
    line naming --model-dir and exits 2, and writes nothing."""
    folder = broken / case
    assert CASES[case] in folder_problem(folder)
    with pytest.raises(ModelLoadError, match=CASES[case].split(":")[0]):
        load_model(folder)
    runs, root = processes
    r, _ = runs.result(case)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and err[0].startswith("error: --model-dir: "), r.stderr
    assert CASES[case] in err[0] and "Traceback" not in r.stderr
    assert not (root / case / "out").exists()


def test_a_complete_folder_has_no_problem(tiny_dir):
    assert folder_problem(tiny_dir) is None
    assert folder_problem(ORGANISM_DIR) is None


def test_a_nan_the_model_computes_makes_every_claim_not_testable(tiny_dir, tmp_path, monkeypatch, capsys):
    """Finite weights can still compute a NaN (an overflow): whatever analysis meets it, the script ends with each
    of its claims not testable and the reason, and exits 0; the earlier results of the folder are replaced by that
    honest record, not by numbers."""
    assert require_finite(torch.ones(3), "x") is not None
    with pytest.raises(NonFiniteError, match="x is not finite .1 NaN"):
        require_finite(torch.tensor([1.0, float("nan")]), "x")
    mod = load_script("rank_prev_heads")

    def overflow(*a, **k):
        raise NonFiniteError("the attention patterns is not finite (3 NaN or infinite values of 10)")

    from gpt2_posheads.posts.gpt2_prev_heads import ranking

    monkeypatch.setattr(ranking, "diagonal_attention", overflow)  # where the claim measures the diagonals
    out = tmp_path / "out"
    assert main_entry(mod.main, ["--model-dir", str(tiny_dir), "--out", str(out), *SCRIPT]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert [c["key"] for c in summary["claims"]] == ["sharp_prev_head", "sharpest_stands_alone", "half_prev_heads"]
    assert {c["verdict"] for c in summary["claims"]} == {"not testable"}
    assert all("attention patterns is not finite" in c["why"] for c in summary["claims"])
    assert "not testable: " in capsys.readouterr().err
    assert not (out / LOCK).exists()


# --- figures without a browser ---------------------------------------------------------------------------------------


def test_no_browser_means_html_only_said_once(processes):
    """A browser path that does not exist: decided at once, before any work; the script writes every HTML figure
    and its results, says so in one line, and finishes."""
    runs, root = processes
    check, _ = runs.result("no-browser check", timeout=180)
    assert json.loads(check.stdout)[0] is False
    out = root / "no-browser" / "out"
    r, _ = runs.result("no-browser script", timeout=300)
    assert r.returncode == 0, r.stderr
    notes = [line for line in r.stderr.splitlines() if "HTML only" in line]
    assert len(notes) == 1 and "does not exist" in notes[0]
    assert (out / "summary.json").exists() and list(out.glob("*.html")) and not list(out.glob("*.png"))


def test_a_browser_that_hangs_is_given_up_within_the_bound(processes):
    """A browser that never answers: the test export is abandoned after the bound (here 5 s), not waited on."""
    runs, _ = processes
    r, _ = runs.result("hang", timeout=90)
    ok, why = json.loads(r.stdout)
    assert not ok and ("did not finish in 5 s" in why or "failed" in why)


# --- signals, and folders that must not be lost or mixed -------------------------------------------------------------


def test_sigterm_is_handled_as_ctrl_c(tmp_path):
    """SIGTERM (what `timeout` and schedulers send) mid-run: one message, exit 143, the staging folder and the lock
    gone, the folder's earlier results untouched."""
    target = tmp_path / "out"
    target.mkdir()
    (target / "summary.json").write_text('{"earlier": true}')
    (target / ".gpt2_posheads.json").write_text(json.dumps({"files": ["summary.json"], "script": "demo"}))
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        from gpt2_posheads.cli.args import main_entry
        from gpt2_posheads.cli.output import Output

        def main(argv):
            out = Output.open({str(target)!r}, "demo", png=False)
            (out.out_dir / "summary.json").write_text('{{"new": true}}')
            os.kill(os.getpid(), signal.SIGTERM)

        sys.exit(main_entry(main, []))
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    )
    assert r.returncode == 143 and "terminated (SIGTERM)" in r.stderr and "Traceback" not in r.stderr
    assert json.loads((target / "summary.json").read_text()) == {"earlier": True}
    assert not (target / LOCK).exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


def test_terminated_is_an_interrupt():
    assert issubclass(Terminated, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, signal.default_int_handler, None) or callable(
        signal.getsignal(signal.SIGTERM)
    )


def test_two_models_of_the_same_name_never_share_a_folder(tiny_dir, tmp_path, capsys):
    """Two different folders both named `model`: the second run refuses to write over the first one's results and
    says how to choose another name; --force replaces them."""
    a, b = tmp_path / "a" / "model", tmp_path / "b" / "model"
    shutil.copytree(tiny_dir, a)
    from safetensors.torch import load_file, save_file

    shutil.copytree(tiny_dir, b)
    sd = load_file(b / "model.safetensors")
    sd["transformer.h.0.attn.c_attn.weight"] *= 2
    save_file(sd, b / "model.safetensors", metadata={"format": "pt"})
    mod = load_script("pos_embed_helix")
    out = tmp_path / "results"
    args = ["--layer", "1", "--n-prompts", "2", "--seq-len", "16", "--no-png", "--out", str(out)]
    assert main_entry(mod.main, ["--model-dir", str(a), *args]) is None
    first = (out / "summary.json").read_text()
    assert main_entry(mod.main, ["--model-dir", str(a), *args]) is None  # the same model: its own folder
    with pytest.raises(SystemExit) as e:
        main_entry(mod.main, ["--model-dir", str(b), *args])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and err.startswith("error: --out:") and "another model of the same name" in err
    assert "--out" in err.split(";")[-1] and json.loads(first)["model"] == str(a)
    assert json.loads((out / "summary.json").read_text())["model"] == str(a)  # untouched
    main_entry(mod.main, ["--model-dir", str(b), *args, "--force"])
    assert json.loads((out / "summary.json").read_text())["model"] == str(b)


def test_an_out_folder_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    """CheckedArgs before the lock is taken: no stale lock is left behind."""
    target = tmp_path / "ro" / "out"
    target.mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p) == str(target.parent) else real(p, mode))
    with pytest.raises(UsageError, match="is not writable"):
        Output.open(target, "demo", png=False)
    assert not (target / LOCK).exists()


# --- results that cannot be read ---------------------------------------------------------------------------------


def summary(folder, verdict="held"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "script": "rank_prev_heads",
                "claims": [
                    {
                        "key": "k",
                        "claim": "c",
                        "verdict": verdict,
                        "post": "p",
                        "rule": "r",
                        "why": "w",
                        "measured": 1.0,
                    }
                ],
            }
        )  # fmt: skip
    )


def test_compare_and_the_page_read_every_summary_and_refuse_a_corrupt_one(tmp_path, capsys):
    compare = load_script("compare_results")
    before, after = tmp_path / "runs" / "before", tmp_path / "runs" / "after"  # a path with "runs" in it is read
    summary(before / "rank_prev_heads" / "m")
    summary(after / "rank_prev_heads" / "m", "not held")
    assert main_entry(compare.main, [str(before), str(after)]) == 1  # the verdict moved, and it is seen
    assert "not held" in capsys.readouterr().out
    (after / "rank_prev_heads" / "m" / "summary.json").write_text('{"claims": [')
    with pytest.raises(SystemExit) as e:
        main_entry(compare.main, [str(before), str(after)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith("error: results: ") and "summary.json cannot be read" in err
    from gpt2_posheads.report.index import write_index

    with pytest.raises(UsageError, match="cannot be read"):
        write_index(after)


# --- prompts ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, n, expect",
    [
        (b"caf\xe9 " * 2000, 2, "error: --prompts: "),  # Latin-1: refused in one line naming the file
        ('\ufeff{"text": "' + "word " * 400 + '"}\n', 2, None),  # JSONL with a byte-order mark: read
        ("word " * 30000, 16, None),  # one long document: several windows of it
        ("word " * 20, 2, "error: --seq-len: none of the source's 1 documents"),  # too short: the option to change
        ("word " * 140, 8, "error: --n-prompts: the source gives only 2 prompts"),  # long enough for two windows
    ],
    ids=["latin-1", "jsonl-bom", "one-long-document", "too-short", "too-few-windows"],
)
def test_prompt_files(content, n, expect, tiny_dir, tmp_path, capsys):
    f = tmp_path / ("p.jsonl" if isinstance(content, str) and content.startswith("\ufeff") else "p.txt")
    if isinstance(content, bytes):
        f.write_bytes(content)
    else:
        f.write_text(content, encoding="utf-8")
    mod = load_script("rank_prev_heads")
    argv = ["--model-dir", str(tiny_dir), "--prompts", str(f), "--n-prompts", str(n), "--seq-len", "64", "--no-png"]
    argv += ["--out", str(tmp_path / "o")]
    if expect is None:
        main_entry(mod.main, argv)
        assert json.loads((tmp_path / "o" / "summary.json").read_text())["n_prompts"] == n
        return
    with pytest.raises(SystemExit) as e:
        main_entry(mod.main, argv)
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and err.startswith(expect) and "\n" not in err and "Traceback" not in err
    assert "---" not in err and " n_prompts" not in err and " seq_len" not in err  # options as the user types them


@pytest.mark.parametrize("only", ["", ",", " , "])
def test_run_all_only_names_a_script(only, capsys):
    with pytest.raises(SystemExit) as e:
        main_entry(load_script("run_all").main, ["--only", only, "--model-dirs", ""])
    err = capsys.readouterr().err.strip()
    says = "the value is empty" if only == "" else "names no script"  # "" is refused by the parser itself
    assert e.value.code == 2 and err.startswith("error: --only: ") and says in err and "\n" not in err
