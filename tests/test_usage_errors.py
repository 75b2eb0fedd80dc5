"""Every class of user mistake is one line `error: <parameter>: ...`, exit status 2, no traceback, and
(where the check needs no model) before any model is loaded."""
import pytest

import gpt2_posheads.cli.common as cli
from conftest import EXPERIMENTS, MINI_DIR, load_script


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the mistake was reported")
    monkeypatch.setattr(cli, "load_model", refuse)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "short.txt").write_text("one two three\n\nfour five\n")
    (tmp_path / "notext.jsonl").write_text('{"body": "hello"}\n')
    (tmp_path / "w.np").write_text("x")
    return tmp_path


M = ["--model-dir", str(MINI_DIR), "--no-png"]

# (script, argv, parameter named in the message, a word of the message); all checked before any model load
PRELOAD = [
    ("pos_embed_helix", M + ["--layer", "9"], "--layer", "0..4"),
    ("ext_pos_vs_wpe", M + ["--layer", "9"], "--layer", "0..4"),
    ("pos_embed_averaging", M + ["--heads", "auto:99"], "--heads", "auto:16"),
    ("pos_embed_averaging", M + ["--heads", "auto:0"], "--heads", "no heads"),
    ("raw_scores_taxonomy", M + ["--heads", "L9H0"], "--heads", "unknown head"),
    ("raw_scores_taxonomy", M + ["--heads", "L4X11"], "--heads", "not a head name"),
    ("mask_prev_attention", M + ["--layers", "0,7"], "--layers", "0..3"),
    ("mask_prev_attention", M + ["--layers", "a,b"], "--layers", "integers"),
    ("rank_prev_heads", M + ["--prompts", "{d}/empty.txt"], "--prompts", "empty"),
    ("rank_prev_heads", M + ["--prompts", "wikitxt"], "--prompts", "wikitext"),
    ("rank_prev_heads", M + ["--prompts", "{d}/notext.jsonl"], "--prompts", "'text'"),
    ("rank_prev_heads", M + ["--n-prompts", "0"], "--n-prompts", "out of range"),
    ("rank_prev_heads", M + ["--device", "cuda:7" if cli.torch.cuda.is_available() else "cuda"], "--device", "cuda"),
    ("rank_prev_heads", M + ["--device", "gpu"], "--device", "allowed cpu"),
    ("rank_prev_heads", ["--model-dir", "data/mini-gpt", "--no-png"], "--model-dir", "did you mean"),
    ("pos_embed_helix", ["--w-pos", "{d}/w.np", "--no-png"], "w_pos", ".npy"),
    ("l4h11_edit", M + ["--target", " ninja turtle"], "--target", "three words"),
    ("l4h11_edit", M + ["--factors", "1,x"], "--factors", "numbers"),
    ("toy_similar_content", ["--quick", "--seeds", "0", "--no-png"], "--seeds", "out of range"),
    ("toy_prev_token", ["--quick", "--steps", "0", "--no-png"], "--steps", "out of range"),
    ("toy_sticky_plateau", ["--quick", "--lr", "-1", "--no-png"], "--lr", "> 0"),
    ("rank_prev_heads", M + ["--n-prompts", "abc"], "--n-prompts", "invalid int"),
]


@pytest.mark.parametrize("script, argv, param, word", PRELOAD, ids=[f"{s}:{' '.join(a[3:] if a[:1] == ['--model-dir'] else a)}"
                                                                     for s, a, _, _ in PRELOAD])
def test_mistake_is_one_line_before_loading(script, argv, param, word, files, tmp_path, capsys, no_model_load):
    argv = [a.replace("{d}", str(files)) for a in argv] + ["--out", str(tmp_path / "out")]
    mod = load_script(script)
    with pytest.raises(SystemExit) as e:
        cli.main_entry(mod.main, argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {param}:") and word in err[0], err[0]
    assert "Traceback" not in err[0]


def test_prompts_too_short_for_seq_len(files, tmp_path, capsys):
    mod = load_script("rank_prev_heads")
    with pytest.raises(SystemExit) as e:
        cli.main_entry(mod.main, M + ["--prompts", str(files / "short.txt"), "--out", str(tmp_path)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: n_prompts:") and "--seq-len" in err and "\n" not in err


def test_make_prompts_checks_the_model_context(small_tokenizer):
    from types import SimpleNamespace

    from gpt2_posheads import UsageError, make_prompts

    fake = SimpleNamespace(cfg=SimpleNamespace(n_ctx=256))
    with pytest.raises(UsageError, match="seq_len: 1000 exceeds the model's context; allowed 2..256"):
        make_prompts(small_tokenizer, 4, 1000, docs=["x"], model=fake)


def test_internal_errors_keep_their_traceback():
    def broken(argv):
        raise KeyError("a bug")
    with pytest.raises(KeyError):
        cli.main_entry(broken, [])


def test_help_keeps_examples_and_shows_defaults_once(capsys):
    mod = load_script("pos_embed_averaging")
    with pytest.raises(SystemExit):
        mod.main(["--help"])
    raw = capsys.readouterr().out
    assert "\n    python experiments/pos_embed_averaging.py --model-dir data/mini-gpt2\n" in raw  # example block as written
    out = " ".join(raw.split())
    assert out.count("(default: 1,5,10,20,50,100)") == 1


def test_every_option_has_help():
    import argparse

    from gpt2_posheads.cli.runner import list_experiments

    for name in list_experiments():
        mod = load_script(name)
        captured = {}
        orig = argparse.ArgumentParser.parse_args

        def grab(self, *a, **k):
            captured["p"] = self
            raise SystemExit(0)
        argparse.ArgumentParser.parse_args = grab
        try:
            with pytest.raises(SystemExit):
                mod.main([])
        finally:
            argparse.ArgumentParser.parse_args = orig
        missing = [a.dest for a in captured["p"]._actions if not a.help]
        assert not missing, (name, missing)
