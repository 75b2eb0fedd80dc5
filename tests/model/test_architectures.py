"""Every model script on random-weight local folders of each architecture TransformerLens 4 loads (GPT-2, GPT-Neo,
OPT, Pythia, Llama): each runs, or ends with its one 'not applicable' line and its claims not testable."""

import json

import pytest
import torch

from gpt2_posheads import diagonal_attention, extended_pos_embeddings, load_model
from gpt2_posheads.analysis.scores import attention_scores
from gpt2_posheads.analysis.sources import path_ablation
from gpt2_posheads.model.engine_hooks import hook_status
from gpt2_posheads.model.loading import position_kind

from conftest import ARCHITECTURES, EXPERIMENTS, run_script

W = ["--prompts", "wikitext", "--n-prompts", "2", "--seq-len", "40"]
SCRIPTS = {
    "rank_prev_heads": W,
    "pos_embed_helix": ["--layer", "1", "--n-prompts", "2", "--seq-len", "32"],
    "ext_pos_vs_wpe": ["--n-prompts", "2", "--n-token-dependence", "2", "--seq-len", "32"],
    "pos_embed_averaging": W + ["--group-sizes", "1,10,20,50"],
    "mask_prev_attention": W + ["--heads", "L2H1", "--start", "0", "--size", "20"],
    "raw_scores_taxonomy": W + ["--heads", "L0H0,L2H3", "--start", "0", "--size", "20"],
    "ext_pos_averaging": W + ["--heads", "L1H0,L2H1", "--start", "0", "--size", "20", "--ext-prompts", "2"],
    "l4h11_edit": ["--heads", "L2H1", "--factors", "1,2"],
    "prev_head_sources": W + ["--heads", "L2H1"],
    "weight_route": ["--n-positions", "32"],
}
ROTARY = {"pythia", "llama"}


@pytest.fixture(scope="module", autouse=True)
def one_load_per_model():
    """The scripts of this module share each model, as the main job does (loaded once, its prompts made and its heads
    ranked once per set of options): a script that left a model changed would fail the scripts after it."""
    from gpt2_posheads.cli.experiment import shared_setup

    with shared_setup():
        yield


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_script_on_every_architecture(script, arch, arch_dirs, tmp_path, capsys):
    out = tmp_path / "out"
    run_script(
        EXPERIMENTS / f"{script}.py",
        ["--model-dir", str(arch_dirs[arch]), "--out", str(out), "--no-png"] + SCRIPTS[script],
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["claims"] and all(c["verdict"] in ("held", "not held", "not testable") for c in summary["claims"])
    if script in ("pos_embed_averaging", "weight_route") and arch in ROTARY:  # they need learned positions
        assert "not applicable: " in capsys.readouterr().out and "rotary positions" in summary["not_applicable"]
        assert {c["verdict"] for c in summary["claims"]} == {"not testable"}
    else:
        assert "not_applicable" not in summary
    # a random-weight model has none of the post's mechanism: no claim may come out held by accident
    assert not [(c["key"], c["why"]) for c in summary["claims"] if c["verdict"] == "held"]


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("script", sorted(s for s, a in SCRIPTS.items() if "--heads" in a))
def test_no_claim_held_on_random_models_with_default_heads(script, arch, arch_dirs, tmp_path):
    """The same with the heads each script chooses itself (the model's aggregator and early heads)."""
    args = SCRIPTS[script]
    i = args.index("--heads")
    out = tmp_path / "out"
    run_script(
        EXPERIMENTS / f"{script}.py",
        ["--model-dir", str(arch_dirs[arch]), "--out", str(out), "--no-png"] + args[:i] + args[i + 2 :],
    )
    claims = json.loads((out / "summary.json").read_text())["claims"]
    assert not [(c["key"], c["why"]) for c in claims if c["verdict"] == "held"]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_analyses_are_exact_on_every_architecture(arch, arch_dirs):
    """The raw scores reproduce the model's own masked scores; path ablation's clean pattern is the model's; the
    extended positional embeddings exist without W_pos (zero at layer 0 when there is none)."""
    model = load_model(arch_dirs[arch], device="cpu")
    assert position_kind(model) == ("rotary" if arch in ROTARY else "learned")
    toks = torch.randint(1, model.cfg.d_vocab, (2, 24), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(toks[:1])
    s = attention_scores(model, toks[0], 1, 2)
    torch.testing.assert_close(
        s["masked"].softmax(-1), cache["blocks.1.attn.hook_pattern"][0, 2].float(), atol=1e-4, rtol=0
    )
    assert torch.isfinite(s["raw"]).all()  # the upper triangle the mask removes is there too
    if hook_status(model)["attn.hook_attn_scores"] == "live":  # where the hook holds scores (GPT-Neo's and OPT's hold
        tri = torch.ones(24, 24, dtype=torch.bool).tril()  # the pattern, and fire too late to matter)
        torch.testing.assert_close(
            s["raw"][tri], cache["blocks.1.attn.hook_attn_scores"][0, 2][tri].float(), atol=1e-4, rtol=1e-4
        )
    df = path_ablation(model, toks, 2, 1)
    clean = diagonal_attention(model, toks, progress=False)[2, 1, 1]
    assert df.attrs["pattern_check_max_abs_err"] < 1e-4
    assert df[df.source == "none"].iloc[0]["prev_mass"] == pytest.approx(float(clean), abs=1e-5)
    assert any(r.startswith("W_pos") for r in df.source) == (arch not in ROTARY)
    ext0 = extended_pos_embeddings(model, 0, n_prompts=2, seq_len=16)  # after BOS: row 0 is BOS's own embedding
    assert (float(ext0[1:].abs().max()) < 1e-5) == (arch in ROTARY)


def test_pattern_edits_through_z_equal_the_hooked_edit(arch_dirs, monkeypatch):
    """On GPT-2 both routes exist: the edit through hook_z (used where hook_pattern does not feed the output)
    gives the same logits as editing hook_pattern itself."""
    from gpt2_posheads import edit_head_pattern, hooks_for, mask_previous_attention
    from gpt2_posheads.model import engine_hooks

    model = load_model(arch_dirs["gpt2"], device="cpu")
    toks = torch.randint(1, model.cfg.d_vocab, (2, 30), generator=torch.Generator().manual_seed(1))
    ivs = [mask_previous_attention(5, [0, 1]), edit_head_pattern(2, 1, {10: 3, 20: 19})]
    with torch.inference_mode():
        direct = model.run_with_hooks(toks, fwd_hooks=hooks_for(model, *ivs))
        real = engine_hooks.hook_status(model)
        monkeypatch.setattr(engine_hooks, "hook_status", lambda m: {**real, "attn.hook_pattern": "dead"})
        through_z = model.run_with_hooks(toks, fwd_hooks=hooks_for(model, *ivs))
        clean = model(toks)
    assert float((direct - clean).abs().max()) > 1e-3  # the edit does something
    torch.testing.assert_close(through_z, direct, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_masking_changes_every_model(arch, arch_dirs):
    """Masking the previous position changes the output on every architecture (on GPT-Neo and OPT an edit of
    hook_pattern alone would be discarded by the bridge)."""
    from gpt2_posheads import mask_previous_attention

    model = load_model(arch_dirs[arch], device="cpu")
    toks = torch.randint(1, model.cfg.d_vocab, (1, 30), generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        masked = model.run_with_hooks(toks, fwd_hooks=mask_previous_attention(5, [0]).hooks(model))
        clean = model(toks)
    assert float((masked[0, :5] - clean[0, :5]).abs().max()) < 1e-5  # causal: queries before position 5 untouched
    assert float((masked[0, 5:] - clean[0, 5:]).abs().max()) > 1e-4


def test_score_profile_is_in_the_logits_the_softmax_sees(arch_dirs):
    """GPT-Neo does not scale its scores, though the bridge declares 1/sqrt(d_head): the profile reads each layer's
    scale off its own pattern, so it equals the raw scores of :func:`attention_scores` (checked against the pattern)
    averaged the same way."""
    from gpt2_posheads.analysis.scores import score_profile

    model = load_model(arch_dirs["gpt-neo"], device="cpu")
    toks = torch.randint(1, 1000, (1, 24), generator=torch.Generator().manual_seed(0))
    profile = score_profile(model, toks, window=3, skip_first=4)
    raw = attention_scores(model, toks[0], 1, 2)["raw"]  # [q, k], the model's own scale
    qs = torch.arange(4, 24 - 3)
    window = torch.stack([raw[q, q - 3 : q + 4] for q in qs])  # [n_q, 7]
    want = (window - window.mean(1, keepdim=True)).mean(0)
    torch.testing.assert_close(profile[1, 2], want, atol=1e-4, rtol=1e-4)
