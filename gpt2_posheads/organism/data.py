"""The organism's training configuration (:class:`MiniConfig`, recorded in ``training.json``) and data: a tokenizer,
text streams, and the synthetic languages that give the heads reasons to form (a step's batch depends on the step
number alone, so resumes are exact).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..analysis.prompts import encode_stream  # noqa: F401 - part of this module's interface

EOT = "<|endoftext|>"
POS_INITS = ("random", "sinusoidal", "gpt2", "none")


@dataclass
class MiniConfig:
    """Architecture, data mix and optimisation of a mini GPT-2 run (recorded in ``training.json``)."""

    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    n_ctx: int = 256
    vocab_size: int = 4096
    steps: int = 5000
    batch_size: int = 16
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.1
    val_fraction: float = 0.05
    seed: int = 0
    # data mix (defaults: the shipped organism's recipe, gpt2_posheads/data/mini-gpt2/README.md)
    synthetic_steps: int = 1400  # phase 1: synthetic windows only
    synthetic_vocab: int = 4096  # phase-1 synthetic token ids are drawn from [1, synthetic_vocab)
    synthetic_fraction: float = 0.125  # phase 2: share of windows still synthetic (segment pairs)
    skip_text_fraction: float = 0.0  # phase 2: share of windows from the skip-bigram language (it keeps asking for the
    # exact previous token while the model learns text)
    repeat_fraction: float = 0.5  # phase 2: share of text windows with a span of their own text repeated
    seg_min: int = 4  # repeated segment lengths (capped at a quarter / half of a short window)
    seg_max: int = 32
    synthetic_ctx: int = 16  # phase-1 window length at step 0 (0: n_ctx); shorter windows, same tokens per step
    ctx_double_every: int = 400  # phase 1: the window length doubles every this many steps (0: never), up to n_ctx
    skip_fraction: float = 0.25  # share of synthetic windows from the skip-bigram language t+1 = pi(t-1)
    skip_only_steps: int = 200  # the first steps use that language alone (the previous-token head forms first)
    skip_vocab: int = 4096  # its tokens: ids 1..skip_vocab-1
    skip_noise: float = 0.2  # chance that a token of that language is uniform instead of pi(t-1)
    skip_rule: str = "copy"  # pi: "permutation" (random) or "copy" (identity: t+1 = t-1, any vocabulary size)
    # synthetic repeats: "pairs" (s s s' s' ... tiled) or "span" (random tokens, one span copied once)
    repeat_kind: str = "pairs"
    position_offsets: bool = True  # short synthetic windows start at random absolute positions: every W_pos row trains
    pos_init: str = "random"  # "random" (GPT-2's N(0, 0.02)), "sinusoidal", "gpt2" (GPT-2's own W_pos rows
    # projected onto their top d_model principal components) or "none" (no W_pos)
    pos_rms: float = 0.0  # RMS of a "sinusoidal" / "gpt2" W_pos (0: the initializer range, 0.02)
    pos_lr: float = 1.0  # W_pos learning rate as a multiple of lr (0: frozen)
    pos_smooth: float = 0.0  # weight of the roughness penalty on W_pos (see :func:`pos_roughness`)
    pos_avg_prob: float = 0.0  # chance that a step sees W_pos averaged in groups (training augmentation)
    pos_avg_max: int = 20  # ... of a random size 2..pos_avg_max, at a random offset
    pos_avg_start: int = 0  # ... from this step on (a circuit learned first, then made robust)
    # bookkeeping
    checkpoint_minutes: float = 5.0
    probe_every: int = 100
    bf16: bool = False  # bfloat16 autocast for forward/backward (weights and AdamW stay float32)


def train_tokenizer(docs: Sequence[str], vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2's scheme) trained on ``docs``, wrapped for ``transformers``."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(docs, vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT], show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=EOT, eos_token=EOT, unk_token=EOT)


def split_docs(docs: Sequence[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    """``(train, held-out)``: a seeded ``val_fraction`` of the documents held out (at least one)."""
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_val = max(1, int(round(val_fraction * len(docs))))
    return [docs[i] for i in order[n_val:]], [docs[i] for i in order[:n_val]]


def sample_batch(stream: torch.Tensor, batch_size: int, n_ctx: int, gen: torch.Generator) -> torch.Tensor:
    """``[batch, n_ctx + 1]`` random windows of ``stream``."""
    starts = torch.randint(0, len(stream) - n_ctx - 1, (batch_size,), generator=gen)
    return torch.stack([stream[s : s + n_ctx + 1] for s in starts.tolist()])


def repeated_segments(
    batch_size: int, length: int, vocab_hi: int, seg_min: int, seg_max: int, gen: torch.Generator, bos: int = 0
) -> torch.Tensor:
    """``[batch, length]`` windows made of ``BOS`` then pairs ``s s`` of random segments of ``seg_min..seg_max``
    tokens (ids ``1..vocab_hi-1``), the last pair cut at ``length``: only induction predicts a second copy."""
    out = torch.empty(batch_size, length, dtype=torch.long)
    for b in range(batch_size):
        row = [bos]
        while len(row) < length:
            n = int(torch.randint(seg_min, seg_max + 1, (1,), generator=gen))
            seg = torch.randint(1, vocab_hi, (n,), generator=gen).tolist()
            row += seg + seg
        out[b] = torch.tensor(row[:length])
    return out


def skip_table(vocab_hi: int, seed: int, rule: str = "permutation") -> torch.Tensor:
    """The skip-bigram language's rule ``pi`` on ids ``1..vocab_hi-1`` (index 0 unused): a random
    permutation, or with ``rule="copy"`` the identity (t+1 = t-1: the previous token is copied, which a
    previous-token head with a copying OV circuit predicts for every token, no table to learn)."""
    if rule == "copy":
        return torch.arange(vocab_hi)
    if rule != "permutation":
        raise ValueError(f"skip rule {rule!r} is not 'permutation' or 'copy'")
    g = torch.Generator().manual_seed(seed + 7919)
    return torch.cat([torch.zeros(1, dtype=torch.long), 1 + torch.randperm(vocab_hi - 1, generator=g)])


def repeated_span(
    batch_size: int, length: int, vocab_hi: int, seg_min: int, seg_max: int, gen: torch.Generator, bos: int = 0
) -> torch.Tensor:
    """``[batch, length]`` windows of uniform random tokens (ids ``1..vocab_hi-1``) after ``BOS`` in which one
    span of ``seg_min..seg_max`` tokens is copied right after itself at a random place: the gap to the
    first occurrence varies from row to row, so only induction (match the current token, read the one
    after its earlier occurrence), not a fixed positional offset, predicts the copy."""
    out = torch.randint(1, vocab_hi, (batch_size, length), generator=gen)
    out[:, 0] = bos
    for b in range(batch_size):
        n = int(torch.randint(seg_min, min(seg_max, (length - 1) // 2) + 1, (1,), generator=gen))
        a = int(torch.randint(1, length - 2 * n + 1, (1,), generator=gen))
        out[b, a + n : a + 2 * n] = out[b, a : a + n]
    return out


REPEAT_KINDS = {"pairs": repeated_segments, "span": repeated_span}


def skip_bigram_windows(
    batch_size: int, length: int, table: torch.Tensor, noise: float, gen: torch.Generator, bos: int = 0
) -> torch.Tensor:
    """``[batch, length]`` windows ``BOS t1 t2 ...`` with ``t_{i+1} = pi(t_{i-1})`` except, with chance
    ``noise``, a uniform token. The next token is a fixed function of the *previous* one, not of the
    current one: predicting it needs the previous token at the current position, the plainest reason for
    a previous-token head to form (the task of the ``000`` toy post, inside a language)."""
    hi = table.shape[0]
    out = torch.empty(batch_size, length, dtype=torch.long)
    out[:, 0] = bos
    out[:, 1:3] = torch.randint(1, hi, (batch_size, 2), generator=gen)
    fresh = torch.randint(1, hi, (batch_size, length), generator=gen)
    flip = torch.rand(batch_size, length, generator=gen) < noise
    for i in range(3, length):
        out[:, i] = torch.where(flip[:, i], fresh[:, i], table[out[:, i - 2]])
    return out


def insert_repeats(windows: torch.Tensor, seg_min: int, seg_max: int, gen: torch.Generator) -> torch.Tensor:
    """Copy, in each row, a span of ``seg_min..seg_max`` of its own tokens to a later place (a new tensor), anywhere
    after the span ends: the gap between the two occurrences varies."""
    out = windows.clone()
    n = out.shape[1]
    for b in range(out.shape[0]):
        L = int(torch.randint(seg_min, min(seg_max, n // 2 - 1) + 1, (1,), generator=gen))
        a = int(torch.randint(1, n - 2 * L + 1, (1,), generator=gen))
        c = int(torch.randint(a + L, n - L + 1, (1,), generator=gen))
        out[b, c : c + L] = windows[b, a : a + L]
    return out


def position_ids(cfg: MiniConfig, step: int, batch: torch.Tensor) -> torch.Tensor | None:
    """``[batch, pos]`` absolute positions of a step's inputs: ``None`` (0, 1, ...) except for synthetic
    windows shorter than ``n_ctx`` with ``position_offsets``, which start at a random position so every row
    of ``W_pos`` trains while attention spans stay short (seeded by the step: resumes are exact)."""
    n = batch.shape[1] - 1
    if not cfg.position_offsets or step >= cfg.synthetic_steps or n >= cfg.n_ctx:
        return None
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step + 555_555)
    return torch.randint(0, cfg.n_ctx - n + 1, (batch.shape[0], 1), generator=gen) + torch.arange(n)


def synthetic_ctx_at(cfg: MiniConfig, step: int) -> int:
    """Phase-1 window length at ``step``: ``synthetic_ctx`` doubling every ``ctx_double_every`` steps, at most n_ctx.
    Short windows first: in a 16-token window a head attending uniformly already gives the previous token 1/8 of its
    weight on average, so the gradient towards previous-token attention is strong from step 0 (in a 256-token window
    it is 1/128 and the model sits on a plateau for hundreds of steps)."""
    ctx = cfg.synthetic_ctx or cfg.n_ctx
    if cfg.ctx_double_every:
        ctx *= 2 ** (step // cfg.ctx_double_every)
    return min(ctx, cfg.n_ctx)


def training_batch(cfg: MiniConfig, stream: torch.Tensor, step: int, bos: int, vocab_size: int = 4096) -> torch.Tensor:
    """The ``[batch, n_ctx + 1]`` batch of ``step`` (a function of the step number alone: resumes are exact)."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)

    def skip(n: int, length: int) -> torch.Tensor:  # n windows of the skip-bigram language
        return skip_bigram_windows(
            n, length, skip_table(cfg.skip_vocab, cfg.seed, cfg.skip_rule), cfg.skip_noise, gen, bos
        )

    if step < cfg.synthetic_steps:
        ctx = synthetic_ctx_at(cfg, step)
        n = max(1, cfg.batch_size * cfg.n_ctx // ctx)
        n_skip = n if step < cfg.skip_only_steps else int(round(cfg.skip_fraction * n))
        lo, hi = max(2, min(cfg.seg_min, ctx // 4)), max(2, min(cfg.seg_max, ctx // 2))
        make = REPEAT_KINDS.get(cfg.repeat_kind)
        if make is None:
            raise ValueError(f"repeat kind {cfg.repeat_kind!r} is not one of {sorted(REPEAT_KINDS)}")
        rep = make(n - n_skip, ctx + 1, cfg.synthetic_vocab, lo, hi, gen, bos)
        return torch.cat([skip(n_skip, ctx + 1), rep]) if n_skip else rep
    n_syn = int(round(cfg.synthetic_fraction * cfg.batch_size))
    n_skip = int(round(cfg.skip_text_fraction * cfg.batch_size))
    n_rep = int(round(cfg.repeat_fraction * (cfg.batch_size - n_syn - n_skip)))
    text = sample_batch(stream, cfg.batch_size - n_syn - n_skip, cfg.n_ctx, gen)
    if n_rep:
        text[:n_rep] = insert_repeats(text[:n_rep], cfg.seg_min, cfg.seg_max, gen)
    if n_syn:  # after phase 1 the synthetic copies range over the whole vocabulary
        text = torch.cat(
            [text, repeated_segments(n_syn, cfg.n_ctx + 1, vocab_size, cfg.seg_min, cfg.seg_max, gen, bos)]
        )
    return torch.cat([text, skip(n_skip, cfg.n_ctx + 1)]) if n_skip else text
