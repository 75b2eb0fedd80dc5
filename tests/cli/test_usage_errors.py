"""Every class of user mistake is one line `error: <parameter>: ...`, exit status 2, no traceback, and (where the
check needs no model) before any model is loaded; a legitimate input that must be adjusted is adjusted and said."""

import json

import pytest
import torch

import gpt2_posheads.cli.experiment as cliexp
from gpt2_posheads.cli import main_entry

from conftest import MINI_DIR, load_script


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the model was loaded before the mistake was reported")

    monkeypatch.setattr(cliexp, "load_model", refuse)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "short.txt").write_text("one two three\n\nfour five\n")
    (tmp_path / "notext.jsonl").write_text('{"body": "hello"}\n')
    (tmp_path / "w.np").write_text("x")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (tmp_path / "a_file").write_text("x")
    bad = tmp_path / "badcfg"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    (bad / "model.safetensors").write_bytes(b"")
    noweights = tmp_path / "noweights"
    noweights.mkdir()
    (noweights / "config.json").write_text(json.dumps({"n_layer": 2, "n_head": 2, "n_positions": 16, "n_embd": 8}))
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
    ("prev_head_sources", M + ["--heads", "L0H0"], "--heads", "layer 0: nothing upstream"),
    ("mask_prev_attention", M + ["--layers", "0,7"], "--layers", "0..3"),
    ("mask_prev_attention", M + ["--layers", "a,b"], "--layers", "integers"),
    ("mask_prev_attention", M + ["--every", "1"], "--every", "out of range"),
    ("rank_prev_heads", M + ["--prompts", "{d}/empty.txt"], "--prompts", "empty"),
    ("rank_prev_heads", M + ["--prompts", "{d}/binary.txt"], "--prompts", "binary"),
    ("rank_prev_heads", M + ["--prompts", "{d}/latin1.txt"], "--prompts", "not UTF-8"),
    ("rank_prev_heads", M + ["--prompts", "wikitxt"], "--prompts", "wikitext"),
    ("rank_prev_heads", M + ["--prompts", "{d}/notext.jsonl"], "--prompts", "'text'"),
    ("rank_prev_heads", M + ["--n-prompts", "0"], "--n-prompts", "out of range"),
    ("rank_prev_heads", M + ["--device", "cuda:7" if torch.cuda.is_available() else "cuda"], "--device", "cuda"),
    ("rank_prev_heads", M + ["--device", "gpu"], "--device", "allowed cpu"),
    ("rank_prev_heads", ["--model-dir", "data/mini-gpt", "--no-png"], "--model-dir", "did you mean"),
    ("rank_prev_heads", ["--model-dir", "{d}/a_file", "--no-png"], "--model-dir", "is a file, not a folder"),
    ("rank_prev_heads", ["--model-dir", "{d}/badcfg", "--no-png"], "--model-dir", "not valid JSON"),
    ("rank_prev_heads", ["--model-dir", "{d}/noweights", "--no-png"], "--model-dir", "no model weights"),
    ("rank_prev_heads", M + ["--out", "{d}/a_file"], "--out", "is a file"),
    ("pos_embed_helix", ["--w-pos", "{d}/w.np", "--no-png"], "w_pos", ".npy"),
    ("l4h11_edit", M + ["--target", " ninja turtle"], "--target", "three words"),
    ("l4h11_edit", M + ["--factors", "1,x"], "--factors", "numbers"),
    ("l4h11_edit", M + ["--factors", "1,3"], "--factors", "lacks 2"),
    ("l4h11_edit", M + ["--factors", "1e308,2"], "--factors", "1e+308 is out of range; allowed 0..1e6"),
    ("l4h11_edit", M + ["--factors", "inf,2"], "--factors", "inf is not a finite number"),
    (
        "train_mini_gpt2",
        ["--out", "{d}/new", "--d-model", "100", "--n-heads", "3", "--no-png"],
        "--d-model",
        "not divisible",
    ),
    ("train_mini_gpt2", ["--out", "{d}/new", "--pos-lr", "-1", "--no-png"], "--pos-lr", "out of range"),
    ("train_mini_gpt2", ["--no-png", "{no-out}"], "--out", "required"),
    ("cache_activations", M + ["--out", "{d}/a_file.safetensors"], "--out", "not a cache"),
    ("toy_similar_content", ["--quick", "--seeds", "0", "--no-png"], "--seeds", "out of range"),
    ("toy_prev_token", ["--quick", "--steps", "0", "--no-png"], "--steps", "out of range"),
    ("toy_sticky_plateau", ["--quick", "--lr", "-1", "--no-png"], "--lr", "> 0"),
    ("rank_prev_heads", M + ["--n-prompts", "abc"], "--n-prompts", "invalid int"),
]


@pytest.mark.parametrize(
    "script, argv, param, word",
    PRELOAD,
    ids=[f"{s}:{' '.join(a[3:] if a[:1] == ['--model-dir'] else a)}" for s, a, _, _ in PRELOAD],
)
def test_mistake_is_one_line_before_loading(script, argv, param, word, files, tmp_path, capsys, no_model_load):
    (files / "a_file.safetensors").write_text("not a cache")
    argv = [a.replace("{d}", str(files)) for a in argv]
    if "{no-out}" in argv:
        argv.remove("{no-out}")
    elif "--out" not in argv:
        argv += ["--out", str(tmp_path / "out")]
    mod = load_script(script)
    with pytest.raises(SystemExit) as e:
        main_entry(mod.main, argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"error: {param}:") and word in err[0], err[0]
    assert "Traceback" not in err[0]


def test_prompts_too_short_for_seq_len(files, tmp_path, capsys):
    mod = load_script("rank_prev_heads")
    with pytest.raises(SystemExit) as e:
        main_entry(mod.main, M + ["--prompts", str(files / "short.txt"), "--out", str(tmp_path / "o")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    # none of the documents is long enough: the option to change is --seq-len, with the longest document's length
    assert err.startswith("error: --seq-len: none of the source's") and "the longest has" in err and "\n" not in err
    assert not (tmp_path / "o" / "summary.json").exists()  # the failed run left nothing behind


def test_adjusted_inputs_are_said(tmp_path, capsys, small_tokenizer):  # the scripts read WikiText-2
    """A legitimate input that must be changed is changed and said: a --seq-len above the context, group sizes
    above it, a word that is several tokens in the vocabulary, a submatrix that does not fit the prompt."""
    mod = load_script("pos_embed_averaging")
    main_entry(
        mod.main,
        M
        + [
            "--prompts",
            "wikitext",
            "--n-prompts",
            "2",
            "--seq-len",
            "100000",
            "--group-sizes",
            "1,10,1000",
            "--out",
            str(tmp_path / "a"),
        ],
    )
    err = capsys.readouterr().err
    assert "note: --seq-len 100000 is capped at the model's context, 256" in err
    assert "note: --group-sizes: 1000 capped at the model's context, 256" in err
    assert "note: targets: several tokens each, replaced: ' apple' -> " in err
    s = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert s["seq_len"] == 256 and s["group_sizes"] == [1, 10, 256]
    mod = load_script("mask_prev_attention")
    main_entry(
        mod.main,
        M
        + [
            "--prompts",
            "wikitext",
            "--n-prompts",
            "2",
            "--seq-len",
            "64",
            "--start",
            "40",
            "--heads",
            "L1H0",
            "--out",
            str(tmp_path / "b"),
        ],
    )
    assert (
        "the 50x50 submatrix from position 40 does not fit a 64-token prompt: showing 50x50 from position 14"
        in capsys.readouterr().err
    )


def test_api_refuses_float_and_out_of_vocabulary_token_ids(tiny_model):
    from gpt2_posheads import UsageError, diagonal_attention

    with pytest.raises(UsageError, match="prompts: token ids are torch.float32; an integer tensor"):
        diagonal_attention(tiny_model, torch.zeros(1, 8), progress=False)
    bad = torch.full((1, 8), tiny_model.cfg.d_vocab)
    with pytest.raises(UsageError, match=f"token id {tiny_model.cfg.d_vocab} is outside the vocabulary"):
        diagonal_attention(tiny_model, bad, progress=False)


def test_make_prompts_checks_the_model_context(small_tokenizer, tiny_model):
    from gpt2_posheads import UsageError, make_prompts

    with pytest.raises(UsageError, match="seq_len: 1000 exceeds the model's context; allowed 2..64"):
        make_prompts(small_tokenizer, 4, 1000, docs=["x"], model=tiny_model)
    with pytest.raises(TypeError, match="^model: must be a TransformerLens"):
        make_prompts(small_tokenizer, 4, 16, docs=["x"], model="gpt2")


def test_internal_errors_keep_their_traceback():
    def broken(argv):
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        main_entry(broken, [])


def test_help_keeps_examples_and_shows_defaults_once(capsys):
    mod = load_script("pos_embed_averaging")
    with pytest.raises(SystemExit):
        mod.main(["--help"])
    raw = capsys.readouterr().out
    assert "\n    gpt2-posheads pos_embed_averaging --model mini-gpt2\n" in raw  # example block as written
    out = " ".join(raw.split())
    assert out.count("(default: 1,5,10,20,50,100)") == 1


def test_every_option_has_help(monkeypatch):
    import argparse

    from gpt2_posheads.commands import commands

    captured = {}

    def grab(self, *a, **k):  # the parser a script builds, caught before it parses anything
        captured["p"] = self
        raise SystemExit(0)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", grab)
    for name in commands():
        with pytest.raises(SystemExit):
            load_script(name).main([])
        missing = [a.dest for a in captured["p"]._actions if not a.help]
        assert not missing, (name, missing)
