"""Values at the edge of their range and of the wrong kind are one line each, before any model loads: an empty or blank
path, an option given twice, an integer beyond what torch takes, a path that is neither a plain file nor a folder
(a symbolic link loop, /dev/null, a FIFO) — said as what it is, not "does not exist" with unrelated suggestions."""

import os

import pytest

import gpt2_posheads.cli.experiment as cliexp
from gpt2_posheads.cli import main_entry
from gpt2_posheads.cli.declared import parse
from gpt2_posheads.commands.explore import COMMAND as EXPLORE

from conftest import MINI_DIR, load_script


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the mistake was reported")

    monkeypatch.setattr(cliexp, "load_model", refuse)


@pytest.fixture
def odd_paths(tmp_path):
    """A symbolic link loop, a broken link, a FIFO, and /dev/null (a character device)."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    (tmp_path / "broken").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "fifo")
    return {"loop": str(loop), "broken": str(tmp_path / "broken"), "fifo": str(tmp_path / "fifo"), "null": os.devnull}


def one_line(script, argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main_entry(load_script(script).main, argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    return err[0]


M = ["--model-dir", str(MINI_DIR), "--no-png"]

CASES = [
    ("rank_prev_heads", M + ["--seq-len", "64", "--seq-len", "128"], "error: --seq-len: given twice (64, then 128)"),
    ("rank_prev_heads", M + ["--seq", "64", "--seq-len=128"], "error: --seq-len: given twice (64, then 128)"),
    ("rank_prev_heads", M + ["--prompts", "wikitext", "--prompts", "auto"], "error: --prompts: given twice"),
    ("rank_prev_heads", M + ["--model-dir", str(MINI_DIR)], "error: --model-dir: given twice"),
    (
        "toy_prev_token",
        ["--quick", "--steps", "5", "--steps", "6", "--no-png"],
        "error: --steps: given twice (5, then 6)",
    ),
    ("rank_prev_heads", M + ["--out", ""], "error: --out: the value is empty (''); a non-empty value"),
    ("rank_prev_heads", M + ["--out", "   "], "error: --out: the value is empty ('   ')"),
    ("rank_prev_heads", ["--model-dir", "", "--no-png"], "error: --model-dir: the value is empty"),
    ("rank_prev_heads", M + ["--prompts", " "], "error: --prompts: the value is empty"),
    ("rank_prev_heads", M + ["--seed", str(2**64)], f"error: --seed: {2**64} is out of range; allowed 0..4294967295"),
    ("rank_prev_heads", M + ["--seed", "-1"], "error: --seed: -1 is out of range; allowed 0..4294967295"),
    ("toy_prev_token", ["--quick", "--seed", str(2**64), "--no-png"], "error: --seed: 18446744073709551616 is out"),
    ("head_atlas", ["--model-dirs", str(MINI_DIR), "--seed", str(2**40)], "error: --seed: 1099511627776 is out"),
    (
        "rank_prev_heads",
        M + ["--seq-len", str(2**64)],
        "error: --seq-len: 18446744073709551616 is out of range; allowed",
    ),
    ("rank_prev_heads", M + ["--n-prompts", "-3"], "error: --n-prompts: -3 is out of range; allowed an integer >= 1"),
    ("rank_prev_heads", M + ["--top", "-1"], "error: --top: -1 is out of range"),
    ("mask_prev_attention", M + ["--every", "-5"], "error: --every: -5 is out of range"),
]


@pytest.mark.parametrize("script, argv, start", CASES, ids=[f"{s}:{' '.join(a[3:])}" for s, a, _ in CASES])
def test_values_and_repeats_are_one_line(script, argv, start, tmp_path, capsys, no_model_load):
    if "--out" not in argv and script != "head_atlas":
        argv = argv + ["--out", str(tmp_path / "out")]
    line = one_line(script, argv, capsys)
    assert line.startswith(start), line
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_options_meant_to_repeat_still_repeat():
    args = parse(EXPLORE, ["--prompt", "one two three", "--prompt", "four five six"])
    assert args.prompt == ["one two three", "four five six"]
    assert not hasattr(args, "_options_given")  # the record of what was given does not leak into the options


@pytest.mark.parametrize(
    "kind, says",
    [
        ("loop", "is a symbolic link loop, not a folder"),
        ("fifo", "is a FIFO (named pipe), not a folder"),
        ("null", "is a character device, not a folder"),
    ],
)
def test_a_model_dir_that_is_not_a_folder_says_what_it_is(kind, says, odd_paths, tmp_path, capsys, no_model_load):
    line = one_line("rank_prev_heads", ["--model-dir", odd_paths[kind], "--out", str(tmp_path / "o")], capsys)
    assert line == f"error: --model-dir: {odd_paths[kind]} {says}; a folder with config.json and weights", line
    assert "does not exist" not in line and "did you mean" not in line


def test_a_broken_link_as_model_dir_says_so(odd_paths, tmp_path, capsys, no_model_load):
    line = one_line("rank_prev_heads", ["--model-dir", odd_paths["broken"], "--out", str(tmp_path / "o")], capsys)
    assert "is a broken symbolic link (to " in line and "nowhere" in line, line


@pytest.mark.parametrize(
    "kind, says", [("loop", "a symbolic link loop"), ("fifo", "a FIFO (named pipe)"), ("null", "a character device")]
)
def test_an_out_folder_that_is_not_a_folder_says_what_it_is(kind, says, odd_paths, capsys, no_model_load):
    line = one_line("rank_prev_heads", M + ["--out", odd_paths[kind]], capsys)
    assert line.startswith(f"error: --out: {odd_paths[kind]} is {says}; a folder"), line


@pytest.mark.parametrize("kind, says", [("fifo", "a FIFO (named pipe)"), ("null", "a character device")])
def test_a_prompts_path_that_is_not_a_file_is_refused_before_it_is_read(kind, says, odd_paths, tmp_path, capsys):
    """A FIFO would block the read forever: it is refused from what the path is, before any read."""
    line = one_line("rank_prev_heads", M + ["--prompts", odd_paths[kind], "--out", str(tmp_path / "o")], capsys)
    assert line.startswith(f"error: --prompts: {odd_paths[kind]} is {says}, not a file or folder"), line


def _integer_options() -> dict[str, list[str]]:
    """``{command: [its integer options]}``, read off the parser each command builds (caught before it parses)."""
    import argparse

    from gpt2_posheads.commands import commands

    found, captured = {}, {}

    def grab(self, *a, **k):
        captured["p"] = self
        raise SystemExit(0)

    real = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = grab
    try:
        for name in commands():
            with pytest.raises(SystemExit):
                load_script(name).main([])
            actions = captured.pop("p")._actions
            found[name] = [a.option_strings[-1] for a in actions if getattr(a.type, "__name__", "") == "int"]
    finally:
        argparse.ArgumentParser.parse_args = real
    return {name: opts for name, opts in found.items() if opts}


def test_an_integer_past_int64_names_the_options_own_range(tmp_path, capsys, no_model_load):
    """Every integer option of every command given 2**64 (past what torch takes, ``--every 100000000000000000000``):
    one line naming that option and the range it takes, never int64's (-9223372036854775808..., which holds values
    the option refuses), before any model loads."""
    huge, wrong = str(2**64), {}
    for name, options in _integer_options().items():
        if name.startswith("toy_"):
            base = ["--quick", "--no-png", "--out", str(tmp_path / "out")]
        elif name == "train_mini_gpt2":
            base = ["--out", str(tmp_path / "new"), "--no-png"]
        elif name == "head_atlas":
            base = ["--model-dirs", str(MINI_DIR)]
        elif name == "explore":  # its --max-tokens range is the loaded model's context, checked once it loads
            base, options = ["--model-dir", str(MINI_DIR)], [o for o in options if o != "--max-tokens"]
        else:
            base = M + ["--out", str(tmp_path / "out")]
        for option in options:
            with pytest.raises(SystemExit) as e:
                main_entry(load_script(name).main, base + [option, huge])
            err = capsys.readouterr().err.strip().splitlines()
            ok = e.value.code == 2 and len(err) == 1 and err[0].startswith(f"error: {option}: {huge} is out of range")
            if not ok or str(-(2**63)) in err[0]:
                wrong[f"{name} {option}"] = err
    assert not wrong, wrong
    line = one_line("mask_prev_attention", M + ["--every", str(10**20), "--out", str(tmp_path / "o")], capsys)
    assert line == f"error: --every: {10**20} is out of range; allowed 2..{2**63 - 1} (what torch takes)", line
    line = one_line("mask_prev_attention", M + ["--layers", f"0,{10**20}", "--out", str(tmp_path / "o")], capsys)
    assert line == f"error: --layers: {10**20} is out of range; allowed 0..3", line
