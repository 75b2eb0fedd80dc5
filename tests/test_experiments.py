"""Every experiment script runs end to end on a tiny model (or in --quick mode) and writes its outputs."""
import json

import pytest

from conftest import EXPERIMENTS, run_script


@pytest.fixture(scope="module")
def script_model(tmp_path_factory, small_tokenizer):
    from gpt2_posheads import make_random_model_dir

    return make_random_model_dir(tmp_path_factory.mktemp("script_model"), n_layers=3, n_heads=4, d_model=32,
                                 n_ctx=256, tokenizer=small_tokenizer, seed=2)


W = ["--prompts", "wikitext"]
GPT2_SCRIPTS = {
    "rank_prev_heads": W + ["--n-prompts", "3", "--seq-len", "48"],
    "pos_embed_helix": ["--layer", "2", "--n-prompts", "2", "--seq-len", "64"],
    "ext_pos_vs_wpe": ["--n-prompts", "2", "--n-token-dependence", "2", "--seq-len", "64"],
    "pos_embed_averaging": W + ["--heads", "L1H0,L2H1", "--group-sizes", "1,5,20", "--n-prompts", "2", "--seq-len", "48"],
    "mask_prev_attention": W + ["--heads", "L2H1", "--n-prompts", "2", "--seq-len", "48", "--start", "5", "--size", "20"],
    "raw_scores_taxonomy": W + ["--heads", "L0H0,L2H3", "--n-prompts", "2", "--seq-len", "48", "--start", "5",
                                "--size", "20"],
    "ext_pos_averaging": W + ["--heads", "L1H0,L2H1", "--n-prompts", "2", "--seq-len", "48", "--start", "5",
                              "--size", "20", "--ext-prompts", "2"],
    "l4h11_edit": ["--heads", "L2H1", "--factors", "1,2"],
    "cache_activations": W + ["--heads", "L1H0", "--n-prompts", "2", "--seq-len", "48", "--max-offset", "8",
                              "--ext-prompts", "2"],
}


@pytest.mark.parametrize("script", sorted(GPT2_SCRIPTS))
def test_gpt2_script_runs_on_tiny_model(script, script_model, tmp_path, shared):
    out = tmp_path / ("cache.safetensors" if script == "cache_activations" else "out")
    run_script(EXPERIMENTS / f"{script}.py",
               ["--model-dir", str(script_model), "--out", str(out), "--no-png"] + GPT2_SCRIPTS[script])
    if script == "cache_activations":
        assert out.stat().st_size > 0
        return
    summary = json.loads((out / "summary.json").read_text())
    assert summary and list(out.glob("*.html"))


def test_helix_of_real_w_pos(shared, tmp_path):
    run_script(EXPERIMENTS / "pos_embed_helix.py", ["--w-pos", str(shared / "gpt2-small" / "W_pos.npy"),
                                                   "--out", str(tmp_path), "--no-png"])
    evr = json.loads((tmp_path / "summary.json").read_text())["w_pos"]["explained_variance_top3"]
    assert abs(sum(evr) - 0.90) < 0.02


def test_unknown_head_exits_with_message(script_model, tmp_path, shared):
    with pytest.raises(SystemExit, match="unknown head L4H11"):
        run_script(EXPERIMENTS / "l4h11_edit.py", ["--model-dir", str(script_model), "--out", str(tmp_path), "--no-png"])


def test_offline_hub_model_exits_with_message(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SystemExit, match="local"):
        run_script(EXPERIMENTS / "rank_prev_heads.py", ["--model", "some-org/not-cached", "--out", str(tmp_path)])


@pytest.mark.parametrize("script", ["toy_sticky_plateau", "toy_similar_content", "toy_prev_token", "toy_lost_in_middle"])
def test_toy_script_quick(script, tmp_path):
    run_script(EXPERIMENTS / f"{script}.py", ["--quick", "--out", str(tmp_path), "--no-png", "--steps", "60"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["claims"] and all("held" in c or isinstance(c, dict) for c in summary["claims"].values())
    assert list((tmp_path / "runs").glob("*.json"))
