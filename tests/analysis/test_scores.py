import torch

from gpt2_posheads.analysis.repeat_prompt import repeat_string_prompt, split_words
from gpt2_posheads.analysis.scores import attention_scores, classify_prev_heads, score_profile

from conftest import HANDSET


def test_raw_scores_match_hooked_masked_scores(tiny_model):
    toks = torch.randint(0, tiny_model.cfg.d_vocab, (1, 15), generator=torch.Generator().manual_seed(0))
    out = attention_scores(tiny_model, toks[0], 1, 3)
    _, cache = tiny_model.run_with_cache(toks)
    hooked = cache["blocks.1.attn.hook_attn_scores"][0, 3]
    tri = torch.ones(15, 15, dtype=torch.bool).tril()
    torch.testing.assert_close(out["raw"][tri], hooked[tri], atol=1e-4, rtol=1e-4)
    assert torch.isinf(out["masked"][~tri]).all()
    torch.testing.assert_close(out["pattern"], cache["blocks.1.attn.hook_pattern"][0, 3])


def test_handset_heads_classified(handset_model):
    toks = torch.randint(
        0, handset_model.cfg.d_vocab, (2, HANDSET["n_ctx"]), generator=torch.Generator().manual_seed(0)
    )
    profile = score_profile(handset_model, toks, window=3, skip_first=3)
    df = classify_prev_heads(profile).set_index("name")
    assert df.loc["L0H0", "label"] == "prev_boosting"  # query reads the previous position: bright diagonal -1
    assert df.loc["L0H1", "label"] == "neither"  # attends to itself: a bright main diagonal
    assert df.loc["L0H2", "label"] == "neither"  # zero query: flat
    # query = -key: a dark main diagonal, but nothing rises towards recent keys, so the previous key does not stand
    # out from older ones: it attends to the whole past alike, not the post's self-suppressing previous-token head
    assert df.loc["L0H3", "dip"] > 1 and abs(df.loc["L0H3", "trend"]) < 1e-3 and df.loc["L0H1", "dip"] < 0
    assert df.loc["L0H3", "label"] == "neither"


def test_repeat_prompt_positions(small_tokenizer):
    rp = repeat_string_prompt(small_tokenizer, " ninja turtle pirate", n_given=1, n_demos=12)
    assert split_words(" ninja turtle pirate") == [" ninja", " turtle", " pirate"]
    assert rp.text.endswith('Reply: " ninja') and rp.next_word == " turtle"
    assert rp.text.count("Request:") == 13
    for word, pos in zip(rp.words, rp.request_positions):
        assert small_tokenizer.decode(rp.tokens[pos]) == word
    assert small_tokenizer.decode(rp.tokens[rp.reply_positions[0]]) == " ninja"
    assert small_tokenizer.decode(rp.tokens[1:]) == rp.text
