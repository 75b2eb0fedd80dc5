"""The GPT-2 post's "please repeat the following string" prompt, with every target token located.

    Request: Please repeat the following string exactly: "hello"
    Reply: "hello".
    Request: "Please repeat the following string exactly: " gorapopefm"
    Reply: " gorapopefm"
    ... (more demonstrations) ...
    Request: "Please repeat the following string exactly: " ninja turtle pirate"
    Reply: " ninja

The model should continue with `` turtle``: an induction head at the final `` ninja`` looks for the
token that followed `` ninja`` earlier, which it finds through the previous-token head's write.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass

import torch

FIRST_DEMOS = ["hello", " gorapopefm", "1pdjpm3efe4"]


@dataclass
class RepeatPrompt:
    text: str
    tokens: torch.Tensor  # [pos], BOS first
    words: list[str]  # the target split into words (" ninja", " turtle", " pirate")
    request_positions: list[list[int]]  # token positions of each word in the final request
    reply_positions: list[list[int]]  # positions of the words already given in the reply
    next_word: str | None  # the word that should come next (None when the whole target is given)

    def next_token_id(self, tokenizer) -> int | None:
        if self.next_word is None:
            return None
        return tokenizer(self.next_word, add_special_tokens=False)["input_ids"][0]


def random_demo_strings(n: int, seed: int = 0) -> list[str]:
    """``n`` demonstration strings: the post's three, then random letter/digit strings."""
    rng = random.Random(seed)
    out = list(FIRST_DEMOS[:n])
    while len(out) < n:
        s = "".join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(rng.randint(6, 11)))
        out.append((" " if rng.random() < 0.5 else "") + s)
    return out


def split_words(target: str) -> list[str]:
    """``" ninja turtle pirate"`` → ``[" ninja", " turtle", " pirate"]`` (each word keeps its space)."""
    words, cur = [], ""
    for ch in target:
        if ch == " " and cur.strip():
            words.append(cur)
            cur = ""
        cur += ch
    if cur:
        words.append(cur)
    return words


def repeat_string_prompt(
    tokenizer,
    target: str = " ninja turtle pirate",
    n_given: int = 1,
    n_demos: int = 12,
    seed: int = 0,
    max_len: int | None = None,
) -> RepeatPrompt:
    """Build the prompt with ``n_demos`` demonstrations and the first ``n_given`` words of ``target`` in
    the reply. Segments are tokenized separately (boundaries are quotes/spaces, where GPT-2's
    pre-tokenizer splits anyway) so every word's token positions are known exactly.

    ``max_len`` (a model's ``n_ctx``): demonstrations are dropped from the end until the prompt fits.
    """
    rp = _build(tokenizer, target, n_given, n_demos, seed)
    while max_len is not None and len(rp.tokens) > max_len:
        if n_demos == 1:
            raise ValueError(
                f"the repeat-string prompt needs {len(rp.tokens)} tokens even with one demonstration; max_len={max_len}"
            )
        n_demos -= 1
        rp = _build(tokenizer, target, n_given, n_demos, seed)
    return rp


def _build(tokenizer, target: str, n_given: int, n_demos: int, seed: int) -> RepeatPrompt:
    words = split_words(target)
    if not 0 <= n_given <= len(words):
        raise ValueError(f"n_given={n_given} must lie in 0..{len(words)} for target {target!r}")
    if n_demos < 1:
        raise ValueError(f"n_demos={n_demos} must be >= 1")
    demos = random_demo_strings(n_demos, seed)
    head = f'Request: Please repeat the following string exactly: "{demos[0]}"\nReply: "{demos[0]}".\n'
    head += "".join(f'Request: "Please repeat the following string exactly: "{d}"\nReply: "{d}"\n' for d in demos[1:])
    segments: list[tuple[str, str | None]] = [(head + 'Request: "Please repeat the following string exactly: "', None)]
    segments += [(w, f"req{i}") for i, w in enumerate(words)]
    segments.append(('"\nReply: "', None))
    segments += [(w, f"rep{i}") for i, w in enumerate(words[:n_given])]
    ids = [tokenizer.bos_token_id]
    where: dict[str, list[int]] = {}
    for text, tag in segments:
        seg = tokenizer(text, add_special_tokens=False)["input_ids"]
        if tag:
            where[tag] = list(range(len(ids), len(ids) + len(seg)))
        ids += seg
    return RepeatPrompt(
        text="".join(t for t, _ in segments),
        tokens=torch.tensor(ids),
        words=words,
        request_positions=[where[f"req{i}"] for i in range(len(words))],
        reply_positions=[where[f"rep{i}"] for i in range(n_given)],
        next_word=words[n_given] if n_given < len(words) else None,
    )


def edit_mapping(rp: RepeatPrompt) -> dict[int, int]:
    """The post's edit of the aggregator's pattern, as ``{query position: key position}`` in the request
    (first token of each word): the second word attends to the token before the first word, the third word
    to the first word (its own previous token is the second word). An induction head looking for "the token
    after word 1" then finds word 3. Needs a target of at least three words."""
    if len(rp.request_positions) < 3:
        raise ValueError(f"the edit needs three words in the target, got {len(rp.request_positions)}")
    w1, w2, w3 = rp.request_positions[:3]
    return {w2[0]: w1[0] - 1, w3[0]: w1[-1]}


# Concrete nouns to fall back on when a target word is several tokens in a model's vocabulary.
_FALLBACK_WORDS = (
    " apple",
    " orange",
    " ninja",
    " turtle",
    " pirate",
    " river",
    " horse",
    " garden",
    " church",
    " island",
    " music",
    " paper",
    " water",
    " house",
    " king",
    " ship",
    " bird",
    " tree",
    " road",
    " book",
    " city",
    " army",
    " school",
    " fire",
    " dog",
    " car",
    " money",
    " song",
    " wine",
    " gold",
)


def single_token_words(tokenizer, words) -> dict[str, str]:
    """``{word: replacement}``: each word that is one token of ``tokenizer`` maps to itself, every other
    to a distinct single-token noun from a fixed list (deterministic, in order of first appearance)."""
    is_one = lambda w: len(tokenizer(w, add_special_tokens=False)["input_ids"]) == 1  # noqa: E731
    words = list(dict.fromkeys(words))
    out = {w: w for w in words if is_one(w)}
    spare = [w for w in _FALLBACK_WORDS if is_one(w) and w not in out.values()]
    for w in words:
        if w not in out:
            if not spare:
                raise ValueError(f"no single-token word left to replace {w!r} in this vocabulary")
            out[w] = spare.pop(0)
    return out


def single_token_target(tokenizer, preferred: str | list[str]) -> str | list[str]:
    """``preferred`` (e.g. ``" ninja turtle pirate"``, or a list of such targets) with every word that is
    several tokens in ``tokenizer`` replaced by a single-token noun; the same word gets the same
    replacement in every target, so ``" apple orange"`` and ``" orange apple"`` stay each other's swap.
    The copy claims need one token per word."""
    targets = [preferred] if isinstance(preferred, str) else list(preferred)
    mapping = single_token_words(tokenizer, [w for t in targets for w in split_words(t)])
    out = ["".join(mapping[w] for w in split_words(t)) for t in targets]
    return out[0] if isinstance(preferred, str) else out
