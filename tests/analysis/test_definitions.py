"""One definition per quantity, checked where it is used, and the numbers that once measured something else."""

import numpy as np
import pytest
import torch

from gpt2_posheads import (
    diagonal_attention,
    extended_pos_embeddings,
    load_model,
    make_prompts,
    make_random_model_dir,
    prev_token_ranking,
    prev_token_stats,
)
from gpt2_posheads.analysis.atlas import head_table
from gpt2_posheads.analysis.induction import copy_losses, induction_positions, repeated_random_tokens
from gpt2_posheads.analysis.interventions import average_ext_pos_embed, group_average_rows
from gpt2_posheads.analysis.repeat_prompt import edit_mapping, repeat_string_prompt
from gpt2_posheads.analysis.scores import attention_scores
from gpt2_posheads.analysis.sources import path_ablation
from gpt2_posheads.model.engine import attn_scale
from gpt2_posheads.model.loading import is_gpt2_small
from gpt2_posheads.model.paths import GPT2_W_POS
from gpt2_posheads.organism.probe import _sharpest
from gpt2_posheads.posts.gpt2_prev_heads.organism_targets import random_prompts
from gpt2_posheads.store.cache import build_cache


def test_one_previous_token_ratio_everywhere(tiny_model, small_tokenizer):  # prompts from WikiText-2
    """The same head on the same prompts gets the same ratio from the ranking, the cache, the training probe's
    definition, the atlas and path ablation's clean row."""
    prompts = make_prompts(small_tokenizer, 4, 48, source="wikitext", seed=3)
    rank = prev_token_ranking(tiny_model, prompts, progress=False).set_index("name")
    cache = build_cache(tiny_model, prompts, [(1, 0)], "tiny", ext_n_prompts=2, progress=False)
    cached = cache.ranking().set_index("name")
    table = head_table(tiny_model, prompts).set_index("name")
    probe_mass = diagonal_attention(tiny_model, prompts, progress=False)  # what the training probe reads (lens)
    probe_st = prev_token_stats(probe_mass)
    for name in rank.index:
        l, h = int(rank.loc[name, "layer"]), int(rank.loc[name, "head"])
        r = rank.loc[name, "ratio"]
        assert cached.loc[name, "ratio"] == pytest.approx(r, abs=1e-5)
        assert table.loc[name, "prev_ratio"] == pytest.approx(r, abs=1e-5)
        assert float(probe_st["ratio"][l, h]) == pytest.approx(r, abs=1e-5)
    prev = rank[rank.is_prev_token]
    if len(prev):
        best = prev.iloc[0]
        assert _sharpest(probe_mass)[0] == pytest.approx(best.ratio, abs=1e-5)
    df = path_ablation(tiny_model, prompts, 2, 1)
    clean = df[df.source == "none"].iloc[0]
    assert clean["prev_mass"] == pytest.approx(rank.loc["L2H1", "prev_mass"], abs=1e-5)


def test_cache_gives_the_models_extended_embeddings_for_a_shorter_seq_len(tiny_model, small_tokenizer):
    prompts = make_prompts(small_tokenizer, 2, 32, source="wikitext")
    cache = build_cache(tiny_model, prompts, [], "tiny", ext_n_prompts=3, seed=5, progress=False)
    for layer in (0, 2):
        from_model = extended_pos_embeddings(tiny_model, layer, n_prompts=3, seed=5, seq_len=20)
        torch.testing.assert_close(extended_pos_embeddings(cache, layer, seq_len=20), from_model, atol=1e-4, rtol=1e-4)
        assert float(from_model[1:].mean(0).abs().max()) < 1e-5  # centred over its own 19 positions after BOS
    with pytest.raises(ValueError, match="stored activations fix the prompts"):
        prev_token_ranking(cache, prompts)
    # what the store did not fix when it was built is refused, never silently ignored
    for bad in (dict(seed=6), dict(n_prompts=4), dict(tokens=[1, 2]), dict(bos=False), dict(engine="hooks")):
        with pytest.raises(ValueError, match=f"stored activations fix {next(iter(bad))}"):
            extended_pos_embeddings(cache, 2, **bad)
    # what the store fixed, asked for again, is the model's own matrix computed afresh (not the store read back)
    from_model = extended_pos_embeddings(tiny_model, 2, n_prompts=3, seed=5)
    torch.testing.assert_close(extended_pos_embeddings(cache, 2, seed=5, n_prompts=3), from_model, atol=1e-4, rtol=1e-4)


def test_extended_embedding_averaging_with_groups(tiny_model):
    """Groups of 4 at layer 2: the residual entering block 2 becomes resid + (group mean - E) of the extended
    embeddings E, exactly, with the groups starting after BOS (positions 1-4, 5-8, ...) and BOS's row untouched;
    groups of 1 change nothing."""
    ext = extended_pos_embeddings(tiny_model, 2, n_prompts=2, seq_len=24)
    toks = torch.randint(1, 1000, (1, 24), generator=torch.Generator().manual_seed(0))
    seen = {}

    def grab(x, hook):
        seen.setdefault("x", []).append(x.detach().clone())

    with torch.inference_mode():
        tiny_model.run_with_hooks(toks, fwd_hooks=[("blocks.2.hook_resid_pre", grab)])
        hooks = average_ext_pos_embed(2, 4, ext=ext).hooks(tiny_model) + [("blocks.2.hook_resid_pre", grab)]
        tiny_model.run_with_hooks(toks, fwd_hooks=hooks)
    clean, averaged = seen["x"]
    delta = group_average_rows(ext, 4, offset=1) - ext
    torch.testing.assert_close(averaged[0] - clean[0], delta, atol=1e-5, rtol=1e-5)
    assert float(delta.abs().max()) > 1e-3
    assert float(delta[0].abs().max()) == 0.0  # the BOS position keeps its own row
    torch.testing.assert_close(delta[1:5], ext[1:5].mean(0, keepdim=True) - ext[1:5])
    torch.testing.assert_close(group_average_rows(ext[:8], 4)[:4], ext[:4].mean(0, keepdim=True).expand(4, -1))


def test_group_average_with_an_offset_is_differentiable():
    x = torch.arange(10.0)[:, None].requires_grad_()
    y = group_average_rows(x, 4, offset=2)
    torch.testing.assert_close(y[:, 0].detach(), torch.tensor([0.5, 0.5, 3.5, 3.5, 3.5, 3.5, 7.5, 7.5, 7.5, 7.5]))
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.ones(10, 1))


def test_raw_scores_include_the_upper_triangle(tiny_model):
    """Above the diagonal (the future keys the mask removes) the raw score is q . k * scale, computed here from the
    model's own queries and keys."""
    toks = torch.randint(1, 1000, (14,), generator=torch.Generator().manual_seed(4))
    s = attention_scores(tiny_model, toks, 1, 3)
    _, cache = tiny_model.run_with_cache(toks[None])
    q, k = cache["blocks.1.attn.hook_q"][0, :, 3], cache["blocks.1.attn.hook_k"][0, :, 3]
    expect = (q @ k.T) * attn_scale(tiny_model.cfg, 1)
    upper = torch.ones(14, 14, dtype=torch.bool).triu(1)
    torch.testing.assert_close(s["raw"][upper], expect[upper], atol=1e-4, rtol=1e-4)
    assert torch.isinf(s["masked"][upper]).all() and float(s["raw"][upper].abs().max()) > 0


def test_scores_follow_scale_attn_by_inverse_layer_idx(tmp_path, small_tokenizer):
    """GPT-2's option divides layer l's scores by l + 1: the one attention scale knows it, and the raw scores
    reproduce the model's pattern."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        n_layer=3,
        n_head=2,
        n_embd=32,
        n_positions=32,
        vocab_size=len(small_tokenizer),
        scale_attn_by_inverse_layer_idx=True,
    )
    torch.manual_seed(0)
    GPT2LMHeadModel(cfg).save_pretrained(tmp_path / "m")
    small_tokenizer.save_pretrained(tmp_path / "m")
    model = load_model(tmp_path / "m", device="cpu")
    assert attn_scale(model.cfg, 2) == pytest.approx(1 / 16**0.5 / 3)  # d_head 16, layer 2
    s = attention_scores(model, torch.arange(1, 13), 2, 1)
    torch.testing.assert_close(s["masked"].softmax(-1), s["pattern"], atol=1e-5, rtol=0)


def test_induction_windows_and_copy_losses(tiny_model):
    """With BOS the second copy starts at 1 + seg_len; without it at seg_len; an induction head attends from each
    of its tokens to the token after the first occurrence. The copy losses leave each copy's first token out."""
    q, k = induction_positions(5, bos=True)
    assert q.tolist() == [6, 7, 8, 9, 10] and k.tolist() == [2, 3, 4, 5, 6]
    q, k = induction_positions(5, bos=False)
    assert q.tolist() == [5, 6, 7, 8, 9] and k.tolist() == [1, 2, 3, 4, 5]
    toks = repeated_random_tokens(tiny_model, 2, 5, bos=True)
    assert toks.shape == (2, 11) and torch.equal(toks[:, 1:6], toks[:, 6:])
    assert torch.equal(repeated_random_tokens(tiny_model, 2, 5, bos=False), toks[:, 1:])  # the same r, no BOS
    # a "model" that predicts every next token perfectly except the first of each copy
    logits = torch.full((1, 11, 50), -30.0)
    t = torch.tensor([[0, 11, 12, 13, 14, 15, 11, 12, 13, 14, 15]])
    for i in range(10):
        logits[0, i, t[0, i + 1]] = 30.0
    logits[0, 0], logits[0, 5] = 0.0, 0.0  # the first token of each copy: uniform (unpredictable)
    first, second = copy_losses(logits, t, 5, bos=True)
    assert float(first) < 1e-6 and float(second) < 1e-6  # the unpredictable tokens are not counted


def test_the_post_edit_touches_only_two_queries(small_tokenizer):
    rp = repeat_string_prompt(small_tokenizer, " ninja turtle pirate", n_given=1)
    w1, w2, w3 = rp.request_positions
    mapping = edit_mapping(rp)
    assert mapping == {w2[0]: w1[0] - 1, w3[0]: w1[-1]}  # turtle -> before ninja; pirate -> ninja


def test_make_prompts_is_deterministic_and_starts_with_bos(small_tokenizer):
    a = make_prompts(small_tokenizer, 3, 40, source="wikitext", seed=7)
    b = make_prompts(small_tokenizer, 3, 40, source="wikitext", seed=7)
    c = make_prompts(small_tokenizer, 3, 40, source="wikitext", seed=8)
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert (a[:, 0] == small_tokenizer.bos_token_id).all() and (a[:, 1:] != small_tokenizer.bos_token_id).any()
    no_bos = make_prompts(small_tokenizer, 3, 40, source="wikitext", seed=7, prepend_bos=False)
    assert torch.equal(no_bos[:, :39], a[:, 1:])


def test_random_prompts_hold_no_special_token(tiny_model):
    t = random_prompts(tiny_model, 64, 64, seed=0)
    assert (t[:, 0] == tiny_model.tokenizer.bos_token_id).all()
    special = set(tiny_model.tokenizer.all_special_ids)
    assert not any(int(x) in special for x in t[:, 1:].flatten())


def test_resample_ablation_with_a_lone_last_batch(tiny_model):
    toks = torch.randint(1, 1000, (5, 16), generator=torch.Generator().manual_seed(1))
    df = path_ablation(tiny_model, toks, 2, 1, ablation="resample", batch_size=2)  # batches 2, 2 and 1
    assert np.isfinite(df["prev_mass"]).all()


def test_gpt2_detection_is_not_fooled_by_gpt2s_positions(tmp_path, shared):
    """A random 12 x 12 x 768 model carrying GPT-2's real W_pos (and GPT-2's tokenizer, from shared/) is not GPT-2
    small: its token embeddings are not GPT-2's, so the post's head names are not its defaults."""
    from gpt2_posheads import gpt2_tokenizer

    w = torch.from_numpy(np.load(GPT2_W_POS))
    d = make_random_model_dir(
        tmp_path,
        n_layers=12,
        n_heads=12,
        d_model=768,
        n_ctx=1024,
        tokenizer=gpt2_tokenizer(),
        state_dict={"transformer.wpe.weight": w},
    )
    model = load_model(d, device="cpu")
    assert not is_gpt2_small(model)


def test_diagonal_attention_of_every_offset_by_default(tiny_model):
    toks = torch.randint(1, 1000, (2, 30), generator=torch.Generator().manual_seed(2))
    assert diagonal_attention(tiny_model, toks, progress=False).shape[-1] == 30


def test_wikitext_is_read_again_when_its_file_changes(tmp_path):
    """Parsed WikiText is remembered per file, by size and modification time: a changed file is read again, and the
    list a caller gets is its own."""
    from gpt2_posheads.analysis.prompts import wikitext_documents

    f = tmp_path / "wiki.txt"
    f.write_text(" = One = \n a @-@ b , c .\n\n = Two = \n d 's\n", encoding="utf-8")
    docs = wikitext_documents(f)
    assert docs == ["One\na-b, c.", "Two\nd's"]
    docs.append("the caller's")
    assert wikitext_documents(f) == ["One\na-b, c.", "Two\nd's"]
    f.write_text(" = Three = \n e\n", encoding="utf-8")
    assert wikitext_documents(f) == ["Three\ne"]
    assert wikitext_documents() == wikitext_documents()  # the shipped splits, twice
