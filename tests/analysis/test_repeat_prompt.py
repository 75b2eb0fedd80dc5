"""The repeat-string prompt on any vocabulary and context: words that are one token each (single characters for a
character-level vocabulary), a shorter template where the context is short, and — where nothing faithful fits — the
reason with the numbers, never an exception. Tokenizers are built here, offline, with the ``tokenizers`` library."""

import pytest
import torch

from gpt2_posheads.analysis.repeat_prompt import (
    NoRepeatPrompt,
    edit_mapping,
    fit_repeat_prompt,
    repeat_string_prompt,
    single_token_target,
    target_words,
)


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def check_prompt(tok, rp, n_ctx=None):
    """What every claim on the prompt needs, checked against the tokenizer itself: each word one token, at the
    positions said, in the request and (the first n_given) in the reply; the prompt ends where the next word goes;
    the text is what the tokens read."""
    assert rp.tokens[0] == tok.bos_token_id and (n_ctx is None or len(rp.tokens) <= n_ctx)
    assert len(set(rp.words)) == len(rp.words)
    for w, req in zip(rp.words, rp.request_positions):
        assert len(req) == 1 and ids(tok, w) == [int(rp.tokens[req[0]])]
    for w, rep in zip(rp.words, rp.reply_positions):
        assert len(rep) == 1 and ids(tok, w) == [int(rp.tokens[rep[0]])]
    assert rp.request_positions[-1][0] < rp.reply_positions[0][0] if rp.reply_positions else True
    assert rp.next_token_id(tok) == ids(tok, rp.next_word)[0]
    assert "".join(tok.decode(rp.tokens[1:]).split()) == "".join(rp.text.split())


def test_a_character_vocabulary_gets_single_characters(char_tokenizer):
    words, sep, how = target_words(char_tokenizer, " ninja turtle pirate")
    assert (words, sep) == (["n", "t", "p"], " ")  # the first letter of each word, the space its own token
    assert "single characters" in how and "'ninja' -> 'n'" in how
    rp = fit_repeat_prompt(char_tokenizer, " ninja turtle pirate", n_given=1, max_len=256)
    check_prompt(char_tokenizer, rp, 256)
    assert rp.next_word == "t" and rp.template == "short" and rp.n_demos >= 1
    assert rp.text.endswith("'n t p'\n'n ")  # no double quote in this vocabulary: the single one
    assert not set("ntp") & set(rp.text[: rp.text.index("'n t p'")])  # the demonstrations use none of the words
    # several targets at once: a word gets the same replacement in each, so swapped targets stay swapped
    (ao, oa), sep, _ = target_words(char_tokenizer, [" apple orange", " orange apple"])
    assert (ao, oa, sep) == (["a", "o"], ["o", "a"], " ")
    rp2 = fit_repeat_prompt(char_tokenizer, oa, n_given=0, max_len=64, sep=sep)
    check_prompt(char_tokenizer, rp2, 64)
    assert rp2.next_word == "o" and rp2.text.endswith("'o a'\n'")
    mapping = edit_mapping(rp)  # the edit of the aggregator's pattern still has its three words
    (w1,), (w2,), (w3,) = rp.request_positions
    assert mapping == {w2: w1 - 1, w3: w1}


@pytest.mark.parametrize("n_ctx, template, n_demos", [(32, "short", 1), (16, "short", 0), (10, "bare", 0)])
def test_a_short_context_gets_a_shorter_template(char_tokenizer, n_ctx, template, n_demos):
    rp = fit_repeat_prompt(char_tokenizer, n_given=1, max_len=n_ctx)
    check_prompt(char_tokenizer, rp, n_ctx)
    assert (rp.template, rp.n_demos) == (template, n_demos)
    assert any("shorter template" in a for a in rp.adjusted)


def test_where_nothing_fits_the_answer_is_the_reason_with_the_numbers(char_tokenizer):
    rp = fit_repeat_prompt(char_tokenizer, n_given=1, max_len=8)
    # BOS, n, ' ', t, ' ', p, line break, n, ' ': the shortest prompt is 9 tokens
    assert isinstance(rp, NoRepeatPrompt) and not rp and (rp.n_ctx, rp.needs) == (8, 9)
    assert rp.reason.startswith("no repeat-string prompt fits: context 8, needs 9")
    many = " ".join(f"w{i}" for i in range(61))  # more distinct words than the 52 letters
    none = fit_repeat_prompt(char_tokenizer, many, max_len=512)
    assert not none and "fewer than 61 distinct single-token words" in none.reason and none.needs is None


def test_a_50_token_vocabulary(bpe50_tokenizer):
    tok = bpe50_tokenizer
    assert not any(len(ids(tok, w)) == 1 for w in (" ninja", " turtle", " pirate", " apple", " orange"))
    for target, n_given in ((" ninja turtle pirate", 1), (" apple orange", 0)):
        rp = fit_repeat_prompt(tok, target, n_given=n_given, max_len=64)
        check_prompt(tok, rp, 64)
        assert rp.adjusted and len(rp.words) == len(target.split())


def test_gpt2_style_vocabularies_get_the_posts_prompt_unchanged(small_tokenizer):
    """Where the words and the context allow it, the prompt is the post's, token for token."""
    target = single_token_target(small_tokenizer, " ninja turtle pirate")
    for n_given in (0, 1, 2):
        rp = fit_repeat_prompt(small_tokenizer, " ninja turtle pirate", n_given=n_given)
        post = repeat_string_prompt(small_tokenizer, target, n_given=n_given)
        assert torch.equal(rp.tokens, post.tokens) and rp.request_positions == post.request_positions
        assert rp.reply_positions == post.reply_positions and rp.template == "post" and rp.n_demos == 12
    targets = [" apple orange", " orange apple", " ninja turtle pirate"]
    words, sep, _ = target_words(small_tokenizer, targets)
    assert sep == "" and words[0] == words[1][::-1] and all(len(ids(small_tokenizer, w)) == 1 for w in words[2])
    assert single_token_target(small_tokenizer, targets) == ["".join(w) for w in words]  # as the scripts choose
    short = fit_repeat_prompt(small_tokenizer, n_given=1, max_len=32)  # the post's needs more than 32 tokens
    check_prompt(small_tokenizer, short, 32)
    assert short.template == "short" and "the post's wording needs" in short.adjusted[-1]


def test_a_vocabulary_is_scanned_once_per_tokenizer_and_again_when_it_changes(small_tokenizer, monkeypatch):
    """Two loads of one tokenizer share the scan of its vocabulary for single-token words (the same words, one scan);
    a token added to one of them changes what it is, so it is scanned again and the new word is found. Where every
    preferred word is one token the vocabulary is not scanned at all."""
    from transformers import AutoTokenizer

    from gpt2_posheads.analysis import repeat_prompt as rpm

    monkeypatch.setattr(rpm, "_VOCABULARY_WORDS", {})
    a = small_tokenizer
    b = AutoTokenizer.from_pretrained(a.name_or_path)
    scans = []
    for t in (a, b):
        monkeypatch.setattr(t, "get_vocab", lambda real=t.get_vocab: scans.append(1) or real())
    first = rpm._vocabulary_words(a, spaced=True)
    assert first and all(w.startswith(" ") and w[1:].isalpha() and len(ids(a, w)) == 1 for w in first)
    assert rpm._vocabulary_words(b, spaced=True) == first and len(scans) == 1
    words, _, how = target_words(b, "".join(first[:3]))
    assert words == first[:3] and how == "" and len(scans) == 1  # one token each: nothing to look up
    b.add_tokens([" zyzzyvaq"])
    assert rpm.tokenizer_fingerprint(b) != rpm.tokenizer_fingerprint(a)
    assert " zyzzyvaq" in rpm._vocabulary_words(b, spaced=True) and len(scans) == 2
    monkeypatch.setattr(rpm, "tokenizer_fingerprint", lambda t: None)  # nothing remembered: the same words
    assert rpm._vocabulary_words(a, spaced=True) == first and len(scans) == 3
