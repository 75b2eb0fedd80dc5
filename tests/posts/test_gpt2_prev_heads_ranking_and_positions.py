"""Post 004's ranking and positional-embedding claims called as functions, on models whose answers are known by
construction: the hand-set model (its residual stream is ``W_pos`` = one-hot positions at every layer; L0H0 attends to
the previous position, L0H1 to the current one, L0H2 uniformly, L0H3 away from its own) and GPT-2's real ``W_pos``."""

import math

import pytest
import torch

from gpt2_posheads.model.paths import GPT2_W_POS
from gpt2_posheads.posts.gpt2_prev_heads import (
    ext_pos_vs_wpe,
    model_run,
    pos_embed_averaging,
    pos_embed_helix,
    rank_prev_heads,
)
from gpt2_posheads.posts.gpt2_prev_heads.wpos_averaging import group_sizes_for

from conftest import HANDSET


@pytest.fixture(scope="module")
def prompts(handset_model):
    return torch.randint(
        0, handset_model.cfg.d_vocab, (4, HANDSET["n_ctx"]), generator=torch.Generator().manual_seed(0)
    )


def verdicts(result) -> dict[str, str]:
    return {c.key: c.verdict for c in result.claims}


# --- rank_prev_heads --------------------------------------------------------------------------------------------------


def test_the_ranking_finds_the_built_previous_token_head(handset_model, prompts):
    r = rank_prev_heads(handset_model, prompts, progress=False)
    ranking = r.tables["ranking"]
    assert r.numbers["aggregator"] == "L0H0" == r.claim("sharp_prev_head").head
    assert r.claim("sharp_prev_head").verdict == "held"  # softmax of a 15.6-logit match: a ratio near 0
    # L0H3 (uniform over earlier keys) is a previous-token head, but far from sharp: L0H0 stands alone
    assert ranking.set_index("name").loc["L0H3", "is_prev_token"] and r.claim("sharpest_stands_alone").verdict == "held"
    assert r.numbers["n_prev_token_heads"] == int(ranking.is_prev_token.sum()) and r.numbers["n_heads"] == 8
    assert r.claim("half_prev_heads").measured == {"n_prev": r.numbers["n_prev_token_heads"], "n_heads": 8}
    assert "post_ratio" not in r.numbers["top"][0]  # the post's per-head ratios are GPT-2 small's only
    assert r.numbers["n_offsets"] == HANDSET["n_ctx"] and set(r.figures) == {"ratio_grid", "diagonal_masses"}


def test_a_bfloat16_ranking_is_written_but_not_judged(handset_model, prompts):
    """With bf16 on a CPU that has native bfloat16, the ranking is measured and kept, and every claim is not testable
    (its rules judge float32 masses); where the CPU has none, float32 runs and the verdicts are float32's."""
    import warnings

    from gpt2_posheads.model.state import bf16_native

    f32 = rank_prev_heads(handset_model, prompts, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback's one note on CPUs without bfloat16
        bf = rank_prev_heads(handset_model, prompts, progress=False, bf16=True)
    assert len(bf.tables["ranking"]) == 8 and bf.numbers["bf16"] == bf16_native("cpu")
    if bf16_native("cpu"):
        assert set(verdicts(bf).values()) == {"not testable"}
        assert all("bfloat16" in c.why for c in bf.claims)
    else:
        assert verdicts(bf) == verdicts(f32)


def test_a_forced_bfloat16_ranking_is_not_judged_either(handset_model, prompts, monkeypatch):
    """bfloat16 forced through the environment on any CPU: the pass runs in bfloat16, so its claims are not testable."""
    from gpt2_posheads.model import state as precision

    monkeypatch.setenv(precision.FORCE_ENV, "1")
    bf = rank_prev_heads(handset_model, prompts, progress=False, bf16=True)
    assert bf.numbers["bf16"] is True and set(verdicts(bf).values()) == {"not testable"}


def test_a_shared_run_is_ranked_once_and_other_options_leave_it_alone(handset_model, prompts):
    run = model_run(handset_model, prompts)
    first = rank_prev_heads(run=run, progress=False)
    assert run.ranking is first.tables["ranking"]  # kept for the claims after it
    again = rank_prev_heads(handset_model, run=run)
    assert again.tables["ranking"] is run.ranking  # used, not measured twice
    with_bos = rank_prev_heads(run=run, include_bos=True, progress=False)
    assert run.ranking is first.tables["ranking"] and with_bos.numbers["exclude_bos"] is False
    # key 0 counted: L0H2 (uniform) puts 1/(q+1) on it at offset q, so its longest diagonals grow
    a = first.tables["ranking"].set_index("name").loc["L0H2", "second_mass"]
    b = with_bos.tables["ranking"].set_index("name").loc["L0H2", "second_mass"]
    assert a != b


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"engine": "nnsight"}, "engine: 'nnsight' needs an nnsight traced model"),
        ({"engine": "gpu"}, "engine: 'gpu' is not an engine"),
        ({"include_bos": True, "engine": "fast"}, "include_bos"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_ranking_arguments_are_checked_before_any_work(kwargs, words, handset_model, prompts):
    with pytest.raises(ValueError, match=words):
        rank_prev_heads(handset_model, prompts, **kwargs)


def test_a_run_of_another_model_is_refused(handset_model, tiny_model, prompts):
    with pytest.raises(ValueError, match="run: it was made for another model"):
        rank_prev_heads(tiny_model, run=model_run(handset_model, prompts))
    with pytest.raises(TypeError, match="model: must be a TransformerLens"):
        pos_embed_helix("gpt2")


def test_the_claim_through_nnsight_equals_the_claim_through_transformerlens(handset_dir, prompts):
    """A traced model runs the same claim (engine ``auto`` means nnsight for it): the same ranking and verdicts."""
    pytest.importorskip("nnsight", reason="nnsight is not installed (pip install 'gpt2_posheads[nnsight]')")
    from gpt2_posheads import load_model
    from gpt2_posheads.model.engine_nnsight import load_traced

    tl = rank_prev_heads(load_model(handset_dir, device="cpu"), prompts, progress=False)
    nn = rank_prev_heads(load_traced(handset_dir), prompts)
    assert verdicts(nn) == verdicts(tl) and nn.numbers["n_offsets"] == tl.numbers["n_offsets"]
    a, b = tl.tables["ranking"], nn.tables["ranking"]
    assert list(a.name) == list(b.name) and (a.ratio - b.ratio).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="engine: 'hooks' needs a TransformerLens model"):
        rank_prev_heads(load_traced(handset_dir), prompts, engine="hooks")


# --- pos_embed_helix --------------------------------------------------------------------------------------------------


def test_gpt2s_w_pos_is_a_helix_from_a_file_or_a_tensor(tiny_model):
    import numpy as np

    from_file = pos_embed_helix(w_pos=GPT2_W_POS)
    evr = from_file.numbers["w_pos"]["explained_variance_top4"]
    assert abs(sum(evr[:3]) - 0.90) < 0.02 and evr[3] < 0.05  # the post's 33%, 32%, 25%; then 3.5%
    assert verdicts(from_file) == {"wpos_helix": "held"} and from_file.model == "W_pos"
    assert from_file.numbers["w_pos"]["shape"] == [1024, 768]
    from_tensor = pos_embed_helix(w_pos=torch.from_numpy(np.load(GPT2_W_POS)))
    assert from_tensor.numbers["w_pos"]["explained_variance_top4"] == evr
    with pytest.raises(ValueError, match="w_pos: measured alone"):
        pos_embed_helix(tiny_model, w_pos=GPT2_W_POS)
    with pytest.raises(TypeError, match="w_pos"):
        pos_embed_helix(w_pos=[[0.0, 1.0]])


def test_one_hot_positions_are_no_helix(handset_model):
    """Centred one-hot rows spread their variance evenly: n rows give n - 1 components of 1/(n - 1) each. W_pos has
    16 rows (1/15 each); the extended embeddings at layer 0 are its 15 rows after BOS (1/14 each)."""
    r = pos_embed_helix(handset_model, layer=0, progress=False)
    assert r.numbers["ext"]["after_bos"] is True
    assert r.numbers["w_pos"]["explained_variance_top4"] == pytest.approx([1 / 15] * 4, abs=1e-5)
    assert r.numbers["ext"]["explained_variance_top4"] == pytest.approx([1 / 14] * 4, abs=1e-5)
    assert verdicts(r) == {"wpos_helix": "not held", "ext_helix": "not held"}
    assert set(r.figures) == {"w_pos_helix", "ext_pos_helix_L0"}


def test_helix_seq_len_is_capped_and_said(handset_model, capsys):
    r = pos_embed_helix(handset_model, layer=1, seq_len=99, progress=False)
    assert "note: seq_len 99 is capped at the model's context, 16" in capsys.readouterr().err
    assert r.numbers["ext"]["explained_variance_top4"] == pytest.approx([1 / 14] * 4, abs=1e-5)  # no block writes
    with pytest.raises(ValueError, match="layer"):
        pos_embed_helix(handset_model, layer=3)  # 0..2 (2 = the final residual)


# --- ext_pos_vs_wpe ---------------------------------------------------------------------------------------------------


def test_extended_embeddings_of_a_model_whose_blocks_write_nothing(handset_model):
    """Every block writes nothing and the token embeddings are zero: at every layer the extended embeddings are W_pos's
    15 one-hot rows after BOS, centred: norm sqrt(14) (each row (1 - 1/15)^2 + 14/15^2 = 14/15), one large entry
    per row (1 - 1/15 against an RMS of sqrt(14/15/64); -1/15 lies below it: 1/64 of the entries), no token
    dependence, nothing sparser than layer 0."""
    r = ext_pos_vs_wpe(handset_model, layer=1, progress=False)
    df = r.tables["per_layer"]
    assert list(df.layer) == [0, 1, 2]
    assert df.norm.tolist() == pytest.approx([math.sqrt(14)] * 3, rel=1e-5)
    assert df.large_entry_fraction.tolist() == pytest.approx([1 / 64] * 3)
    assert df.token_dependence.max() < 1e-5 and df.sparsity_vs_layer0.tolist() == pytest.approx([1.0] * 3)
    v = {c.key: c for c in r.claims}
    assert v["ext_sparser"].verdict == "not held" and r.numbers["mean_sparsity_ratio_layers_gt0"] == pytest.approx(1)
    # no helix: neither the subspace comparison nor the token dependence is testable, and each says why
    assert v["ext_same_subspace"].verdict == v["ext_token_independent"].verdict == "not testable"
    assert "not a low-dimensional helix" in v["ext_same_subspace"].why
    assert r.claim("ext_same_subspace").measured["layer"] == 2  # the post's layer (this model has 2: the final)
    assert set(r.figures) == {"three_panel_L1", "principal_angles", "sparsity", "token_dependence"}


def test_a_rotary_model_has_no_layer0_measurement(small_tokenizer, tmp_path):
    """Pythia (rotary, no W_pos): layer 0's residual holds no position, so its row is NaN with the reason, nothing is
    compared with it, and the claims resting on W_pos are not testable."""
    from gpt2_posheads import load_model

    from conftest import random_arch_dir

    model = load_model(random_arch_dir(tmp_path / "pythia", "pythia", small_tokenizer, n_ctx=32))
    r = ext_pos_vs_wpe(model, n_prompts=2, n_token_dependence=2, progress=False)
    df = r.tables["per_layer"].set_index("layer")
    assert df.loc[0, ["large_entry_fraction", "norm", "token_dependence"]].isna().all()
    assert "no learned W_pos (rotary positions)" in df.loc[0, "not_measured"]
    assert df.sparsity_vs_layer0.isna().all() and df.loc[1:, "norm"].gt(0).all()
    v = {c.key: c for c in r.claims}
    assert v["ext_sparser"].verdict == v["ext_same_subspace"].verdict == "not testable"
    assert v["ext_sparser"].measured["ratio"] != v["ext_sparser"].measured["ratio"]  # NaN, written as null


@pytest.mark.parametrize(
    "kwargs, words",
    [({"k": 17}, "k: 17 is out of range; allowed 1..16"), ({"n_token_dependence": 1}, "n_token_dependence")],
)
def test_extended_arguments_are_checked(kwargs, words, handset_model):
    with pytest.raises(ValueError, match=words):
        ext_pos_vs_wpe(handset_model, **kwargs)


# --- pos_embed_averaging ----------------------------------------------------------------------------------------------


def test_averaging_on_a_short_context_gets_a_shorter_repeat_prompt_and_says_so(handset_model, prompts, capsys):
    """Groups of 1 are the clean model (KL 0, the ranking's masses); a 16-token context cannot hold the post's
    repeat-string prompt, so a shorter template is measured, and said; sizes above the context are capped and said.
    The hand-set model copies nothing, so the output claims are not testable, saying so."""
    r = pos_embed_averaging(handset_model, prompts, heads=["L0H0"], group_sizes=[1, 10, 20, 50])
    err = capsys.readouterr().err
    assert "note: group_sizes: 20, 50 capped at the model's context, 16" in err
    assert "note: the repeat-string prompt: a shorter template" in err and "the context is 16" in err
    assert r.numbers["group_sizes"] == [1, 10, 16] and r.numbers["heads"] == ["L0H0"]
    rows = {row["group_size"]: row for row in r.numbers["rows"]}
    run = model_run(handset_model, prompts).ranked()
    assert rows[1]["kl"] == 0.0 and rows[1]["prev_mass L0H0"] == pytest.approx(float(run.diag[0, 0, 1]))
    p_keys = [k for k in rows[1] if k.startswith("P(")]
    assert len(p_keys) == 2 and all(0 <= rows[g][k] <= 1 for g in rows for k in p_keys)
    v = {c.key: c for c in r.claims}
    for key in ("avg_output_unchanged", "avg_breaks_down"):
        assert v[key].verdict == "not testable" and "copy" in v[key].why, v[key].why
    assert list(r.tables["pos_embed_averaging"].group_size) == [1, 10, 16]


def test_group_sizes_always_hold_the_clean_model(handset_model):
    assert group_sizes_for(handset_model, [5, 3, 5]) == [1, 3, 5]
    with pytest.raises(ValueError, match="group_sizes"):
        pos_embed_averaging(handset_model, group_sizes=[0, 5])
    with pytest.raises(TypeError, match="targets"):
        pos_embed_averaging(handset_model, targets=" apple orange")
