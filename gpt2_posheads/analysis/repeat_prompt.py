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

Any vocabulary and context (:func:`fit_repeat_prompt`): the target words are single tokens of the tokenizer
(:func:`target_words`), and where the post's wording does not fit the context a shorter template keeps what the claims
need, the target once and its start repeated (``"gorap"`` / ``"gorap"`` / ``"n t p"`` / ``"n`` on four lines; shortest,
``n t p`` / ``n `` on two). Where even that does not fit, the answer is a :class:`NoRepeatPrompt` saying so with the
numbers (context N, needs M), not an exception.
"""

from __future__ import annotations

import hashlib
import random
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

FIRST_DEMOS = ["hello", " gorapopefm", "1pdjpm3efe4"]
# the post's wording: the first demonstration's request, the others' (and the final one's) opening, and the reply's
POST_FIRST = "Request: Please repeat the following string exactly: "
POST_REQUEST = 'Request: "Please repeat the following string exactly: "'
POST_REPLY = '"\nReply: "'


@dataclass
class RepeatPrompt:
    text: str
    tokens: torch.Tensor  # [pos], BOS first
    words: list[str]  # the target split into words (" ninja", " turtle", " pirate")
    request_positions: list[list[int]]  # token positions of each word in the final request
    reply_positions: list[list[int]]  # positions of the words already given in the reply
    next_word: str | None  # the word that should come next (None when the whole target is given)
    sep: str = ""  # between words, its own token ("": each word carries its leading space, as in GPT-2)
    template: str = "post"  # "post" (the post's wording), "short" (quotes and lines only) or "bare" (no quotes)
    n_demos: int = 0  # demonstrations before the final request
    adjusted: list[str] = field(default_factory=list)  # what was changed from the post's prompt, in words

    def next_token_id(self, tokenizer) -> int | None:
        return None if self.next_word is None else _ids(tokenizer, self.next_word)[0]


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
    return re.findall(r"\s*\S[^ ]*|\s+\Z", target)


def repeat_string_prompt(
    tokenizer,
    target: str = " ninja turtle pirate",
    n_given: int = 1,
    n_demos: int = 12,
    seed: int = 0,
    max_len: int | None = None,
) -> RepeatPrompt:
    """The post's prompt with ``n_demos`` demonstrations (dropped from the end until it fits ``max_len``) and the first
    ``n_given`` words of ``target`` in the reply. Segments are tokenized separately (boundaries are quotes/spaces, where
    GPT-2's pre-tokenizer splits anyway) so every word's token positions are known exactly."""
    words = _check_counts(split_words(target), target, n_given, n_demos)
    for k in range(n_demos, 0, -1):
        head = _post_head(random_demo_strings(k, seed))
        rp = RepeatPrompt(**_assemble(tokenizer, head, POST_REQUEST, words, "", POST_REPLY, n_given))
        if max_len is None or len(rp.tokens) <= max_len:
            return rp
    raise ValueError(
        f"the repeat-string prompt needs {len(rp.tokens)} tokens even with one demonstration; max_len={max_len}"
    )


def _check_counts(words: list, target, n_given: int, n_demos: int) -> list:
    if not 0 <= n_given <= len(words):
        raise ValueError(f"n_given={n_given} must lie in 0..{len(words)} for target {target!r}")
    if n_demos < 1:
        raise ValueError(f"n_demos={n_demos} must be >= 1")
    return words


def _post_head(demos: list[str]) -> str:
    """The post's demonstrations: the first request unquoted, its reply ending in a period; the others quoted."""
    head = f'{POST_FIRST}"{demos[0]}"\nReply: "{demos[0]}".\n'
    return head + "".join(f'{POST_REQUEST}{d}{POST_REPLY}{d}"\n' for d in demos[1:])


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
_FALLBACK_WORDS = tuple(
    f" {w}"
    for w in (  # noqa: SIM905 - thirty words read as a sentence, not thirty lines
        "apple orange ninja turtle pirate river horse garden church island music paper water house king ship bird"
        " tree road book city army school fire dog car money song wine gold"
    ).split()
)


def single_token_target(tokenizer, preferred: str | list[str]) -> str | list[str]:
    """``preferred`` (a target, or a list of them) with every word that is several tokens replaced by a distinct
    single-token noun of :data:`_FALLBACK_WORDS`, the same in every target: the copy claims need one token per word."""
    targets = [preferred] if isinstance(preferred, str) else list(preferred)
    is_one = lambda w: len(_ids(tokenizer, w)) == 1  # noqa: E731
    words = list(dict.fromkeys(w for t in targets for w in split_words(t)))
    mapping = {w: w for w in words if is_one(w)}
    spare = [w for w in _FALLBACK_WORDS if is_one(w) and w not in mapping.values()]
    for w in [w for w in words if w not in mapping]:
        if not spare:
            raise ValueError(f"no single-token word left to replace {w!r} in this vocabulary")
        mapping[w] = spare.pop(0)
    out = ["".join(mapping[w] for w in split_words(t)) for t in targets]
    return out[0] if isinstance(preferred, str) else out


# --- any vocabulary, any context ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoRepeatPrompt:
    """Falsy: no faithful repeat-string prompt fits ``n_ctx``; ``reason`` says why, ``needs``: the shortest prompt's
    tokens (``None`` where the vocabulary lacks)."""

    reason: str
    n_ctx: int | None = None
    needs: int | None = None

    def __bool__(self) -> bool:
        return False


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def representable(tokenizer, text: str) -> bool:
    """Whether ``tokenizer`` reads ``text`` without losing a character (no unknown token; decoded, the same)."""
    ids = _ids(tokenizer, text)
    unk = getattr(tokenizer, "unk_token_id", None)
    if unk is not None and unk in ids and getattr(tokenizer, "unk_token", None) not in text:
        return False
    back = tokenizer.decode(ids, clean_up_tokenization_spaces=False)
    return back == text or "".join(back.split()) == "".join(text.split())


def _one_token(tokenizer, word: str) -> bool:
    return len(_ids(tokenizer, word)) == 1 and representable(tokenizer, word)


def tokenizer_fingerprint(tokenizer) -> str | None:
    """A digest of ``tokenizer``'s class and a fast tokenizer's whole serialisation; ``None`` where it has none."""
    try:
        text = tokenizer.backend_tokenizer.to_str()
    except Exception:  # noqa: BLE001 - a tokenizer that has none, or cannot say what it is, is not cached
        return None
    return f"{type(tokenizer).__name__}:{hashlib.sha256(text.encode()).hexdigest()}" if isinstance(text, str) else None


# Scans of a vocabulary by tokenizer_fingerprint: each checks every token (tens of thousands of tokenizer calls, a
# second for a 50k vocabulary), and every model of a folder or run with the same tokenizer asks again
_VOCABULARY_WORDS: dict[tuple[str, bool], tuple[str, ...]] = {}
_VOCABULARY_WORDS_KEPT = 16


def _vocabulary_words(tokenizer, spaced: bool) -> list[str]:
    """The vocabulary's single-token words (letters; a leading space when ``spaced``), longest first, then by name."""
    fingerprint = tokenizer_fingerprint(tokenizer)
    key = (fingerprint, spaced) if fingerprint is not None else None
    if key in _VOCABULARY_WORDS:
        return list(_VOCABULARY_WORDS[key])
    special = set(getattr(tokenizer, "all_special_tokens", []) or [])
    found = set()
    for i in (i for piece, i in tokenizer.get_vocab().items() if piece not in special):
        w = tokenizer.decode([i], clean_up_tokenization_spaces=False)
        core = w[1:] if spaced and w.startswith(" ") else None if spaced else w
        if core and core.isascii() and core.isalpha() and _one_token(tokenizer, w):
            found.add(w)
    words = sorted(found, key=lambda w: (-len(w), w))
    if key is not None:
        if len(_VOCABULARY_WORDS) >= _VOCABULARY_WORDS_KEPT:
            _VOCABULARY_WORDS.pop(next(iter(_VOCABULARY_WORDS)))
        _VOCABULARY_WORDS[key] = tuple(words)
    return words


def _spare_words(tokenizer, bare: bool, distinct: list[str]) -> list[str]:
    vocabulary = _vocabulary_words(tokenizer, spaced=not bare)
    spare = [f.strip() if bare else f for f in _FALLBACK_WORDS] + vocabulary
    if bare:
        spare += [w[0] for w in distinct] + list(string.ascii_lowercase + string.ascii_uppercase)
    one = set(vocabulary)  # already found to be one token each
    return [w for w in dict.fromkeys(spare) if w in one or _one_token(tokenizer, w)]


def target_words(tokenizer, preferred: str | Sequence[str] = " ninja turtle pirate") -> tuple[list, str, str]:
    """A target (a string of words), or several (a list), as words that are each one token of ``tokenizer``:
    ``(words, sep, how)``, ``words`` a list per target when several are given.

    In order: the preferred words with their leading space (GPT-2: ``" ninja"``), every word that is several tokens
    replaced by a single-token noun (:data:`_FALLBACK_WORDS`) or by one of the vocabulary's own single-token words;
    then, for a character-level vocabulary, the words without their space, and at last single characters (the first
    letter of each preferred word where it is free), with ``sep`` ``" "`` between them as its own token. A word gets
    the same replacement in every target (``" apple orange"`` and ``" orange apple"`` stay each other's swap). ``how``
    says what was replaced (``""``: nothing). ``ValueError`` when the vocabulary has too few such words."""
    several = not isinstance(preferred, str)
    targets = [split_words(t) for t in (preferred if several else [preferred])]
    distinct = list(dict.fromkeys(w.strip() for t in targets for w in t if w.strip()))
    if not distinct or not all(t for t in targets):
        raise ValueError(f"preferred target {preferred!r} has no words: give words, e.g. ' ninja turtle pirate'")
    for space, sep in ((" ", ""), ("", " ")):
        if sep and not _one_token(tokenizer, sep):
            sep = ""  # no space token: the words follow each other (each is still one token)
        bare = not space
        mapping = {w: space + w for w in distinct if _one_token(tokenizer, space + w)}
        spare = None  # looked up only when a preferred word is several tokens: it scans the whole vocabulary
        for w in [w for w in distinct if w not in mapping]:
            spare = _spare_words(tokenizer, bare, distinct) if spare is None else spare
            taken = set(mapping.values())
            free = [c for c in spare if c not in taken and bare and c == w[0]] or [c for c in spare if c not in taken]
            if not free:
                break
            mapping[w] = free[0]
        if len(mapping) < len(distinct):
            continue
        out = [[mapping[w.strip()] for w in t] for t in targets]
        changed = [f"{space + w!r} -> {mapping[w]!r}" for w in distinct if mapping[w] != space + w]
        kind = "single characters" if all(len(w) == 1 for w in mapping.values()) else "words without their space"
        how = f"no word with its leading space is one token in this vocabulary: {kind}, separated by {sep!r}"
        how = how if bare else ""
        if changed:
            how += ("; " if how else "") + "several tokens each, replaced: " + ", ".join(changed)
        return (out if several else out[0]), sep, how
    raise ValueError(
        f"the vocabulary ({len(tokenizer)} tokens) holds fewer than {len(distinct)} distinct single-token words or "
        f"characters for the target {preferred!r}"
    )


def _assemble(tokenizer, head: str, open_request: str, words, sep: str, middle: str, n_given: int) -> dict:
    """Ids and word positions of ``head + open_request + words (sep between) + middle + given words``."""

    def tagged(ws: list[str], tag: str) -> list[tuple[str, str | None]]:  # sep after every word but the target's last
        return [
            x for i, w in enumerate(ws) for x in [(w, f"{tag}{i}")] + [(sep, None)] * (bool(sep) and i < len(words) - 1)
        ]

    segments = [(head + open_request, None), *tagged(words, "req"), (middle, None), *tagged(words[:n_given], "rep")]
    ids = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    where: dict[str, list[int]] = {}
    for text, tag in segments:
        if not text:
            continue
        seg = _ids(tokenizer, text)
        if tag:
            where[tag] = list(range(len(ids), len(ids) + len(seg)))
        ids += seg
    return dict(
        text="".join(t for t, _ in segments),
        tokens=torch.tensor(ids),
        words=list(words),
        request_positions=[where[f"req{i}"] for i in range(len(words))],
        reply_positions=[where[f"rep{i}"] for i in range(n_given)],
        next_word=words[n_given] if n_given < len(words) else None,
    )


def _candidates(tokenizer, words, sep: str, n_given: int, n_demos: int, seed: int):
    """Every prompt to try, most faithful first: the post's wording (``n_demos`` down to 1), the short template (down
    to 0 demonstrations)."""
    if sep == "" and words[0].startswith(" ") and representable(tokenizer, _post_head(FIRST_DEMOS[:1])):
        for k in range(n_demos, 0, -1):
            yield "post", k, _post_head(random_demo_strings(k, seed)), POST_REQUEST, POST_REPLY
    nl = "\n" if representable(tokenizer, "\n") else " "
    quote = next((q for q in ('"', "'") if representable(tokenizer, q)), "")
    # short demonstrations: strings of 3-6 letters, none a target letter (it must not teach what follows a target word)
    avoid = "".join(words) if all(len(w.strip()) == 1 for w in words) else ""
    letters = [c for c in string.ascii_lowercase if c not in avoid and representable(tokenizer, c)]
    for k in range(n_demos, -1, -1):
        rng = random.Random(seed)
        demos = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 6))) for _ in range(k)] if letters else []
        head = "".join(f"{quote}{d}{quote}{nl}{quote}{d}{quote}{nl}" for d in demos)
        yield ("short" if quote else "bare"), len(demos), head, quote, f"{quote}{nl}{quote}"
    if quote:  # the shortest: the target, a line break, the reply's start
        yield "bare", 0, "", "", nl


def fit_repeat_prompt(
    tokenizer,
    target: str | list[str] = " ninja turtle pirate",
    n_given: int = 1,
    max_len: int | None = None,
    n_demos: int = 12,
    seed: int = 0,
    sep: str | None = None,
) -> RepeatPrompt | NoRepeatPrompt:
    """The repeat-string prompt for any tokenizer and context (module doc), or a :class:`NoRepeatPrompt` saying why
    there is none. ``target``: a string of words (made one token each by :func:`target_words`), or the words it chose
    (with its ``sep``). ``adjusted`` lists, in words, what differs from the post's prompt."""
    if isinstance(target, str):
        try:
            words, sep, how = target_words(tokenizer, target)
        except ValueError as e:
            return NoRepeatPrompt(f"no repeat-string target: {e}")
    else:  # words already chosen (several targets: target_words of them all, then one prompt each)
        words, how = list(target), ""
        sep = ("" if words[0].startswith(" ") else " ") if sep is None else sep
    n_words = len(_check_counts(words, target, n_given, n_demos))
    shortest, post_needs = None, None
    for template, k, head, open_request, middle in _candidates(tokenizer, words, sep, n_given, n_demos, seed):
        parts = _assemble(tokenizer, head, open_request, words, sep, middle, n_given)
        n = len(parts["tokens"])
        if template == "post" and k == 1:
            post_needs = n
        shortest = n
        if max_len is not None and n > max_len:
            continue
        adjusted = [how] if how else []
        if template != "post":
            why = (
                f"the post's wording needs {post_needs} tokens, the context is {max_len}"
                if post_needs is not None
                else "the vocabulary cannot write the post's wording"
            )
            adjusted.append(
                f"a shorter template ({template}: the target{' in quotes' if template == 'short' else ''} and the "
                f"reply's start on the next line, {k} demonstration{'s' if k != 1 else ''}; {why})"
            )
        elif k < n_demos:
            adjusted.append(f"{k} of {n_demos} demonstrations (the context is {max_len} tokens)")
        return RepeatPrompt(**parts, sep=sep, template=template, n_demos=k, adjusted=adjusted)
    return NoRepeatPrompt(
        f"no repeat-string prompt fits: context {max_len}, needs {shortest} (the shortest template: the "
        f"{n_words}-word target, a line break and {n_given} word{'s' if n_given != 1 else ''} of the reply, BOS "
        "included)",
        n_ctx=max_len,
        needs=shortest,
    )
