"""Folders whose config disagrees with the weights or the tokenizer in ways no shape reveals: each is refused before
loading, in one line naming the file and the field, never loaded as a partly or wholly freshly initialised model."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from gpt2_posheads.cli.args import main_entry
from gpt2_posheads.model.folder import folder_problem
from gpt2_posheads.model.loading import ModelLoadError, load_model
from gpt2_posheads.model.paths import REPO_ROOT

from conftest import EXPERIMENTS, load_script

SCRIPT = ["--prompts", "wikitext", "--n-prompts", "2", "--seq-len", "32", "--no-png"]


def _rewrite_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


def _rewrite_weights(folder, edit):
    from safetensors.torch import load_file, save_file

    sd = load_file(folder / "model.safetensors")
    edit(sd)
    save_file(sd, folder / "model.safetensors", metadata={"format": "pt"})


@pytest.fixture(scope="module")
def inconsistent(tmp_path_factory, tiny_dir):
    """One folder per kind of inconsistency, each a copy of the small random GPT-2 (3 layers, 4 heads, width 64, the
    4,096-token tokenizer) with one thing wrong."""
    from transformers import GPTNeoXConfig

    root = tmp_path_factory.mktemp("inconsistent")

    def copy(name):
        d = root / name
        shutil.copytree(tiny_dir, d)
        return d

    gpt2 = json.loads((tiny_dir / "config.json").read_text())
    # GPT-2's weights under a GPT-NeoX config of the same sizes: transformers would build a NeoX model and initialise
    # every one of its weights afresh
    neox = GPTNeoXConfig(
        num_hidden_layers=gpt2["n_layer"],
        num_attention_heads=gpt2["n_head"],
        hidden_size=gpt2["n_embd"],
        intermediate_size=4 * gpt2["n_embd"],
        max_position_embeddings=gpt2["n_positions"],
        vocab_size=gpt2["vocab_size"],
        architectures=["GPTNeoXForCausalLM"],
    )
    (copy("neox-config") / "config.json").write_text(json.dumps(neox.to_dict()))
    _rewrite_config(copy("architectures"), architectures=["GPTNeoXForCausalLM"])
    _rewrite_config(copy("vocab"), vocab_size=50)
    _rewrite_config(copy("heads"), n_head=5)
    _rewrite_weights(copy("missing"), lambda sd: sd.pop("transformer.h.1.mlp.c_fc.bias"))
    _rewrite_weights(copy("unexpected"), lambda sd: sd.update({"transformer.h.1.attn.extra.weight": torch.ones(3)}))
    return root


CASES = {
    "neox-config": "config.json: model_type 'gpt_neox' (GPTNeoXForCausalLM) does not match the weights in "
    "model.safetensors: none of its",
    "architectures": "config.json: architectures names GPTNeoXForCausalLM (a 'gpt_neox' model) but model_type is "
    "'gpt2'",
    "vocab": "config.json: vocab_size 50 is smaller than the tokenizer's 4,096 tokens (tokenizer.json)",
    "heads": "config.json: n_head 5 does not divide n_embd 64",
    "missing": "model.safetensors does not hold the weights of the model config.json describes ('gpt2'): 1 "
    "parameter(s) of the model have no tensor (transformer.h.1.mlp.c_fc.bias)",
    "unexpected": "model.safetensors does not hold the weights of the model config.json describes ('gpt2'): 1 "
    "tensor(s) are no parameter of it (transformer.h.1.attn.extra.weight)",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_inconsistent_folder_is_refused_in_one_line(case, inconsistent, tmp_path, capsys):
    """From the files, before any model is built: the library refuses to load it, a script prints one line naming
    --model-dir and exits 2, writing nothing."""
    folder = inconsistent / case
    problem = folder_problem(folder)
    assert problem is not None and problem.startswith(CASES[case]), problem
    assert "\n" not in problem
    with pytest.raises(ModelLoadError, match="^" + re.escape(CASES[case])):
        load_model(folder)
    mod = load_script("rank_prev_heads")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        main_entry(mod.main, ["--model-dir", str(folder), "--out", str(out), *SCRIPT])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --model-dir: ") and CASES[case] in err[0], err
    assert not out.exists()


@pytest.mark.slow
def test_gpt2_weights_under_a_neox_config_end_the_script_with_one_line(inconsistent, tmp_path):
    """The case that once gave three confident verdicts on a freshly initialised model: a real process, its stderr
    one line, exit 2, no traceback.

    Slow (a fresh interpreter, 4 s); the default suite runs the script on this folder inside the test process (one
    line, exit 2, nothing written: test_an_inconsistent_folder_is_refused_in_one_line[neox-config]) and, as real
    processes, on broken folders (tests/cli/test_failures.py, test_broken_model_folders_are_one_line_errors)."""
    r = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "rank_prev_heads.py"), "--model-dir", str(inconsistent / "neox-config")]
        + ["--out", str(tmp_path / "out"), *SCRIPT],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert err[0].startswith("error: --model-dir: config.json: model_type 'gpt_neox'") and "Traceback" not in r.stderr


@pytest.mark.parametrize("case", ["missing", "unexpected"])
def test_the_loader_checks_the_names_itself(case, inconsistent, monkeypatch):
    """The loader refuses a checkpoint whose names do not match the model as from_pretrained matched them, even where
    the folder check was not run."""
    import gpt2_posheads.model.loading as loading

    monkeypatch.setattr(loading, "folder_problem", lambda *a, **k: None)
    name = "transformer.h.1.mlp.c_fc.bias" if case == "missing" else "transformer.h.1.attn.extra.weight"
    with pytest.raises(ModelLoadError, match=f"does not hold the weights .*{name}"):
        load_model(inconsistent / case, device="cpu")


def test_hub_style_names_and_stored_masks_load(tiny_dir, tiny_model, tmp_path):
    """GPT-2's checkpoints on the hub name tensors without the ``transformer.`` prefix, leave the tied unembedding
    out and may hold each block's causal mask and its fill value: all of that is the same model, loaded as such."""
    d = tmp_path / "hub-style"
    shutil.copytree(tiny_dir, d)

    def hub_names(sd):
        n_ctx = json.loads((d / "config.json").read_text())["n_positions"]
        for k in list(sd):
            sd[k.removeprefix("transformer.")] = sd.pop(k)
        for layer in range(3):
            sd[f"h.{layer}.attn.bias"] = torch.tril(torch.ones(n_ctx, n_ctx)).view(1, 1, n_ctx, n_ctx)
            sd[f"h.{layer}.attn.masked_bias"] = torch.tensor(-1e4)

    _rewrite_weights(d, hub_names)
    assert folder_problem(d) is None
    model = load_model(d, device="cpu")
    toks = torch.randint(0, model.cfg.d_vocab, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        torch.testing.assert_close(model(toks), tiny_model(toks), atol=0, rtol=0)


def test_a_padded_vocabulary_and_an_explicit_head_width_are_consistent(tiny_dir):
    """A vocab_size above the tokenizer's (padded for speed, as Pythia's) and heads that divide the width: no
    problem; a config transformers itself rejects is named as such."""
    from gpt2_posheads.model.folder import heads_problem, vocab_problem

    cfg = json.loads((tiny_dir / "config.json").read_text())
    assert vocab_problem(tiny_dir, {**cfg, "vocab_size": cfg["vocab_size"] + 60}) is None
    assert vocab_problem(tiny_dir, cfg) is None
    assert heads_problem(cfg) is None
    assert heads_problem({**cfg, "n_head": 0}).startswith("config.json: n_head is 0")
