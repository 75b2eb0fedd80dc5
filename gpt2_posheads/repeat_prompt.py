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


def repeat_string_prompt(tokenizer, target: str = " ninja turtle pirate", n_given: int = 1, n_demos: int = 12,
                         seed: int = 0, max_len: int | None = None) -> RepeatPrompt:
    """Build the prompt with ``n_demos`` demonstrations and the first ``n_given`` words of ``target`` in
    the reply. Segments are tokenized separately (boundaries are quotes/spaces, where GPT-2's
    pre-tokenizer splits anyway) so every word's token positions are known exactly.

    ``max_len`` (a model's ``n_ctx``): demonstrations are dropped from the end until the prompt fits.
    """
    rp = _build(tokenizer, target, n_given, n_demos, seed)
    while max_len is not None and len(rp.tokens) > max_len:
        if n_demos == 1:
            raise ValueError(f"the repeat-string prompt needs {len(rp.tokens)} tokens even with one demonstration; "
                             f"max_len={max_len}")
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
        text="".join(t for t, _ in segments), tokens=torch.tensor(ids), words=words,
        request_positions=[where[f"req{i}"] for i in range(len(words))],
        reply_positions=[where[f"rep{i}"] for i in range(n_given)],
        next_word=words[n_given] if n_given < len(words) else None,
    )
