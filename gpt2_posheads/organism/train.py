"""Training a miniature GPT-2 (Hugging Face ``GPT2LMHeadModel``) that has previous-token and induction heads.

The result is a Hugging Face-format directory (``config.json``, ``model.safetensors``, tokenizer
files, ``training.json``) that :func:`gpt2_posheads.load_model` boots like GPT-2, so every GPT-2
analysis can run offline on a *trained* model with the mechanism the GPT-2 post is about.

Why the data mix. Previous-token heads exist to serve induction (the post's causal story: early
heads find the previous token, L4H11 aggregates them, induction heads read it). A small model trained
on a few million tokens of plain text barely needs to copy, so neither forms sharply. The recipe
therefore gives the model reasons to copy, in windows short enough for the heads to find their keys:

* ``synthetic_steps``: a first phase of synthetic windows. For ``skip_only_steps`` a skip-bigram
  language ``t+1 = pi(t-1)`` alone (``skip_rule="copy"``: pi is the identity, so a previous-token head
  whose OV circuit copies predicts it over the whole vocabulary); then windows of *repeated random
  segments* ``s s s' s' ...`` (ids below ``synthetic_vocab``; only induction lowers the loss on a second
  copy) with a share ``skip_fraction`` of the skip-bigram language. Windows start at ``synthetic_ctx``
  tokens and double every ``ctx_double_every`` steps; with ``position_offsets`` each starts at a random
  absolute position. Short windows are the ingredient: uniform attention over 16 keys gives the right
  one 1/8 of its weight, over 256 keys 1/128, and the heads sit on a plateau.
* afterwards, text windows, a fraction ``repeat_fraction`` of which have a span of their own text
  copied to a later place, mixed with a fraction ``synthetic_fraction`` of synthetic windows.

Every ``probe_every`` steps :func:`probe` measures the mechanism (sharpest previous-token ratio on
held-out text and on random tokens, best induction score, loss on the first and second copy), so the
training record shows when each piece appears. Checkpoints are written every ``checkpoint_minutes``
of wall-clock time; a run resumes exactly (batches depend on the step number only).
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

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
    # data mix (defaults: the shipped organism's recipe, data/mini-gpt2/README.md)
    synthetic_steps: int = 1400       # phase 1: synthetic windows only
    synthetic_vocab: int = 4096       # phase-1 synthetic token ids are drawn from [1, synthetic_vocab)
    synthetic_fraction: float = 0.125 # phase 2: share of windows still synthetic
    repeat_fraction: float = 0.5      # phase 2: share of text windows with a span of their own text repeated
    seg_min: int = 4                  # repeated segment lengths (capped at a quarter / half of a short window)
    seg_max: int = 32
    synthetic_ctx: int = 16           # phase-1 window length at step 0 (0: n_ctx); shorter windows, same tokens per step
    ctx_double_every: int = 400       # phase 1: the window length doubles every this many steps (0: never), up to n_ctx
    skip_fraction: float = 0.25       # share of synthetic windows from the skip-bigram language t+1 = pi(t-1)
    skip_only_steps: int = 200        # the first steps use that language alone (the previous-token head forms first)
    skip_vocab: int = 4096            # its tokens: ids 1..skip_vocab-1
    skip_noise: float = 0.2           # chance that a token of that language is uniform instead of pi(t-1)
    skip_rule: str = "copy"           # pi: "permutation" (random) or "copy" (identity: t+1 = t-1, any vocabulary size)
    repeat_kind: str = "pairs"        # synthetic repeats: "pairs" (s s s' s' ... tiled) or "span" (random tokens, one span copied once)
    position_offsets: bool = True     # short synthetic windows start at a random absolute position (every W_pos row trains)
    pos_init: str = "random"          # "random" (GPT-2's N(0, 0.02)), "sinusoidal", "gpt2" (GPT-2's own W_pos rows
                                      # projected onto their top d_model principal components) or "none" (no W_pos)
    pos_rms: float = 0.0              # RMS of a "sinusoidal" / "gpt2" W_pos (0: the initializer range, 0.02)
    pos_lr: float = 1.0               # W_pos learning rate as a multiple of lr (0: frozen)
    pos_smooth: float = 0.0           # weight of the roughness penalty on W_pos (see :func:`pos_roughness`)
    pos_avg_prob: float = 0.0         # chance that a step sees W_pos averaged in groups (training augmentation)
    pos_avg_max: int = 20             # ... of a random size 2..pos_avg_max, at a random offset
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
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_val = max(1, int(round(val_fraction * len(docs))))
    return [docs[i] for i in order[n_val:]], [docs[i] for i in order[:n_val]]


def encode_stream(tok, docs: Sequence[str]) -> torch.Tensor:
    """All documents as one token stream, each preceded by ``<|endoftext|>`` as GPT-2 was trained."""
    ids: list[int] = []
    for enc in tok(list(docs), add_special_tokens=False)["input_ids"]:
        ids.append(tok.bos_token_id)
        ids += enc
    return torch.tensor(ids, dtype=torch.long)


def sample_batch(stream: torch.Tensor, batch_size: int, n_ctx: int, gen: torch.Generator) -> torch.Tensor:
    """``[batch, n_ctx + 1]`` random windows of ``stream``."""
    starts = torch.randint(0, len(stream) - n_ctx - 1, (batch_size,), generator=gen)
    return torch.stack([stream[s : s + n_ctx + 1] for s in starts.tolist()])


def repeated_segments(batch_size: int, length: int, vocab_hi: int, seg_min: int, seg_max: int,
                      gen: torch.Generator, bos: int = 0) -> torch.Tensor:
    """``[batch, length]`` windows made of ``BOS`` then pairs ``s s`` of random segments.

    Each segment has ``seg_min..seg_max`` tokens drawn uniformly from ids ``1..vocab_hi-1``; the
    last pair is cut at ``length``. The second copy of every segment is predictable only by induction.
    """
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


def repeated_span(batch_size: int, length: int, vocab_hi: int, seg_min: int, seg_max: int, gen: torch.Generator,
                  bos: int = 0) -> torch.Tensor:
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


def skip_bigram_windows(batch_size: int, length: int, table: torch.Tensor, noise: float, gen: torch.Generator,
                        bos: int = 0) -> torch.Tensor:
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
    """Copy, in each row, a span of ``seg_min..seg_max`` of its own tokens to a later place (a new tensor).

    The copy starts anywhere after the span ends, so the gap between the two occurrences varies.
    """
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

    Short windows first: in a 16-token window a head attending uniformly already gives the previous
    token 1/8 of its weight on average, so the gradient towards previous-token attention is strong from
    step 0 (in a 256-token window it is 1/128 and the model sits on a plateau for hundreds of steps).
    """
    ctx = cfg.synthetic_ctx or cfg.n_ctx
    if cfg.ctx_double_every:
        ctx *= 2 ** (step // cfg.ctx_double_every)
    return min(ctx, cfg.n_ctx)


def training_batch(cfg: MiniConfig, stream: torch.Tensor, step: int, bos: int, vocab_size: int = 4096) -> torch.Tensor:
    """The ``[batch, n_ctx + 1]`` batch of ``step`` (a function of the step number alone: resumes are exact)."""
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step)
    if step < cfg.synthetic_steps:
        ctx = synthetic_ctx_at(cfg, step)
        n = max(1, cfg.batch_size * cfg.n_ctx // ctx)
        n_skip = n if step < cfg.skip_only_steps else int(round(cfg.skip_fraction * n))
        lo, hi = max(2, min(cfg.seg_min, ctx // 4)), max(2, min(cfg.seg_max, ctx // 2))
        make = REPEAT_KINDS.get(cfg.repeat_kind)
        if make is None:
            raise ValueError(f"repeat kind {cfg.repeat_kind!r} is not one of {sorted(REPEAT_KINDS)}")
        rep = make(n - n_skip, ctx + 1, cfg.synthetic_vocab, lo, hi, gen, bos)
        if not n_skip:
            return rep
        skip = skip_bigram_windows(n_skip, ctx + 1, skip_table(cfg.skip_vocab, cfg.seed, cfg.skip_rule), cfg.skip_noise,
                                   gen, bos)
        return torch.cat([skip, rep])
    n_syn = int(round(cfg.synthetic_fraction * cfg.batch_size))
    n_rep = int(round(cfg.repeat_fraction * (cfg.batch_size - n_syn)))
    text = sample_batch(stream, cfg.batch_size - n_syn, cfg.n_ctx, gen)
    if n_rep:
        text[:n_rep] = insert_repeats(text[:n_rep], cfg.seg_min, cfg.seg_max, gen)
    if n_syn:  # after phase 1 the synthetic copies range over the whole vocabulary
        text = torch.cat([text, repeated_segments(n_syn, cfg.n_ctx + 1, vocab_size, cfg.seg_min, cfg.seg_max, gen, bos)])
    return text


@torch.no_grad()
def evaluate(model, stream: torch.Tensor, n_ctx: int, max_windows: int = 64) -> float:
    """Mean next-token loss over non-overlapping windows of ``stream``."""
    was_training = model.training
    model.eval()
    n = min(max_windows, (len(stream) - 1) // n_ctx)
    x = stream[: n * n_ctx + 1]
    inp = x[:-1].view(n, n_ctx)
    tgt = x[1:].view(n, n_ctx)
    losses = []
    for i in range(0, n, 16):
        logits = model(inp[i : i + 16]).logits
        losses.append(F.cross_entropy(logits.flatten(0, 1), tgt[i : i + 16].flatten(), reduction="sum"))
    model.train(was_training)
    return float(torch.stack(losses).sum() / tgt.numel())


def _diagonal_masses(patterns: Sequence[torch.Tensor], n_offsets: int = 17) -> torch.Tensor:
    """``[layer, head, n_offsets]`` mean attention per diagonal from HF patterns ``[batch, head, q, k]`` per
    layer, BOS key left out."""
    from ..analysis.diagonals import diagonal_counts, diagonal_sums

    return torch.stack([diagonal_sums(p, n_offsets, True) / (p.shape[0] * diagonal_counts(p.shape[-1], n_offsets, True))
                        for p in patterns])


def _sharpest(mass: torch.Tensor, min_layer: int = 0) -> tuple[float, int, int]:
    """``(ratio, layer, head)`` of the sharpest previous-token head in layers ``>= min_layer`` (``inf`` if none)."""
    best = (float("inf"), -1, -1)
    for layer in range(min_layer, mass.shape[0]):
        for h in range(mass.shape[1]):
            top = mass[layer, h].topk(2)
            if int(top.indices[0]) == 1:
                best = min(best, (float(top.values[1] / top.values[0]), layer, h))
    return best


@torch.no_grad()
def probe(model, val_stream: torch.Tensor, n_ctx: int, vocab_hi: int, seed: int = 0, n: int = 8,
          seg: int = 50) -> dict:
    """The mechanism's vital signs on held-out text and on random tokens repeated twice.

    * ``prev_ratio_text`` / ``prev_ratio_random``: the sharpest previous-token head's ratio
      (second-greatest / previous diagonal, offsets 0..16) on ``n`` held-out text windows and ``n`` windows of
      random tokens; ``inf`` when no head has the previous diagonal greatest. ``prev_ratio_above0`` /
      ``prev_head_above0``: the same for the sharpest head above layer 0 on text.
    * ``prev_keep_avg10`` / ``prev_keep_avg10_above0``: the share of those heads' previous-token mass that
      survives averaging ``W_pos`` in groups of 10 (the post's L4H11 keeps nearly all of it; a head that reads
      the previous position off ``W_pos`` loses most of it: the toy route, seen early).
    * ``induction``: the best head's mean attention from each token of the second copy of a random
      ``seg``-token sequence (``BOS r r``) to the token after its first occurrence.
    * ``loss_first`` / ``loss_second``: next-token loss on the first copy (its first token left out: BOS
      does not predict it) and on the second copy (its first token left out too: nothing predicts it).
    """
    seg = min(seg, (n_ctx - 1) // 2)  # BOS r r must fit the context
    was_training = model.training
    model.eval()
    impl = model.config._attn_implementation
    model.set_attn_implementation("eager")
    gen = torch.Generator().manual_seed(10_000 + seed)
    text = sample_batch(val_stream, n, n_ctx - 1, gen)[:, : n_ctx]
    mass = _diagonal_masses(model(text, output_attentions=True).attentions)
    wpe = model.transformer.wpe.weight
    clean_wpe = wpe.detach().clone()
    wpe.copy_(group_average_matrix(wpe.shape[0], 10) @ clean_wpe)
    mass_avg = _diagonal_masses(model(text, output_attentions=True).attentions)
    wpe.copy_(clean_wpe)
    rand = torch.randint(1, vocab_hi, (n, n_ctx), generator=gen)
    rand[:, 0] = val_stream[0]
    r_rand = _sharpest(_diagonal_masses(model(rand, output_attentions=True).attentions))
    r = torch.randint(1, vocab_hi, (n, seg), generator=gen)
    rep = torch.cat([torch.full((n, 1), int(val_stream[0])), r, r], dim=1)
    out = model(rep, output_attentions=True)
    q = torch.arange(seg + 1, 2 * seg + 1)           # second-copy positions
    k = q - seg + 1                                   # the token after the first occurrence
    ind = torch.stack([a[:, :, q, k].mean((0, 2)) for a in out.attentions])  # [layer, head]
    lp = F.cross_entropy(out.logits[:, :-1].flatten(0, 1), rep[:, 1:].flatten(), reduction="none").view(n, -1)
    model.set_attn_implementation(impl)
    model.train(was_training)
    il, ih = divmod(int(ind.argmax()), ind.shape[1])

    def keep(layer: int, head: int) -> float:
        return float(mass_avg[layer, head, 1] / mass[layer, head, 1]) if layer >= 0 else float("nan")

    r_text, r_above = _sharpest(mass), _sharpest(mass, min_layer=1)
    name = lambda r: f"L{r[1]}H{r[2]}" if r[1] >= 0 else "none"  # noqa: E731
    # lp[:, i] predicts rep[:, i + 1]: the first copy is rep[1..seg], the second rep[seg+1..2 seg]
    return dict(prev_ratio_text=r_text[0], prev_head_text=name(r_text), prev_keep_avg10=keep(*r_text[1:]),
                prev_ratio_above0=r_above[0], prev_head_above0=name(r_above), prev_keep_avg10_above0=keep(*r_above[1:]),
                prev_ratio_random=r_rand[0], prev_head_random=name(r_rand), induction=float(ind.max()),
                induction_head=f"L{il}H{ih}", loss_first=float(lp[:, 1:seg].mean()),
                loss_second=float(lp[:, seg + 1:].mean()))


def sinusoidal_positions(n_ctx: int, d_model: int, rms: float) -> torch.Tensor:
    """``[n_ctx, d_model]`` sines and cosines of geometric frequencies (Vaswani et al.), scaled to ``rms``.

    A shift by one position is a rotation in each (sin, cos) pair, so "the previous position" is a
    linear map of the current one: an initialisation from which previous-token attention is easy to learn.
    """
    pos = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    freq = 10_000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    out = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return (out / out.pow(2).mean().sqrt() * rms).float()


def gpt2_positions(n_ctx: int, d_model: int, rms: float, w_pos: torch.Tensor | None = None) -> torch.Tensor:
    """``[n_ctx, d_model]``: GPT-2 small's own positional geometry at this size.

    The first ``n_ctx`` rows of GPT-2's ``W_pos`` ``[1024, 768]`` (``w_pos``, default ``shared/gpt2-small/W_pos.npy``),
    mean-centred and projected onto their top ``d_model`` principal components, scaled to ``rms``. Neighbouring
    rows stay almost the same vector (cosine ~0.99, the smooth helix), so a head cannot read "the previous
    position" off them as sharply as off a learned ``W_pos`` whose neighbours alternate in sign.
    """
    if w_pos is None:
        import numpy as np

        from ..model.paths import shared_file

        path = shared_file("gpt2-small", "W_pos.npy")
        if path is None:
            raise FileNotFoundError("pos_init='gpt2' needs shared/gpt2-small/W_pos.npy (set $GPT2_POSHEADS_SHARED)")
        w_pos = torch.from_numpy(np.load(path))
    if n_ctx > w_pos.shape[0] or d_model > min(n_ctx, w_pos.shape[1]):
        raise ValueError(f"GPT-2's W_pos {tuple(w_pos.shape)} cannot give {n_ctx} positions x {d_model} components")
    w = w_pos[:n_ctx].double()
    w = w - w.mean(0)
    _, _, vh = torch.linalg.svd(w, full_matrices=False)
    x = w @ vh[:d_model].T
    return (x / x.pow(2).mean().sqrt() * rms).float()


def pos_roughness(w: torch.Tensor) -> torch.Tensor:
    """``mean_p |W[p+1] - W[p]|^2 / mean_p |W[p] - mean W|^2`` of ``W`` ``[n_ctx, d_model]`` (scale-free).

    About 2 for independent random rows, ``2 (1 - c)`` for a curve whose neighbours have cosine ``c``
    (GPT-2's helix: ~0.02), up to 4 for rows alternating in sign. ``pos_smooth`` adds it to the loss.
    """
    step = (w[1:] - w[:-1]).pow(2).sum(-1).mean()
    spread = (w - w.mean(0)).pow(2).sum(-1).mean()
    return step / spread.clamp_min(1e-12)


def group_average_matrix(n: int, group_size: int, offset: int = 0) -> torch.Tensor:
    """``[n, n]`` matrix ``M`` with ``(M @ W)[p]`` the mean of ``W`` over ``p``'s group: groups ``[0, offset)``,
    then ``[offset + k g, offset + (k+1) g)``; a last partial group averages the rows it has. With
    ``offset = 0`` this is the post's averaging (:func:`gpt2_posheads.analysis.interventions.group_average_rows`),
    as a linear map so that gradients reach every row."""
    group = (torch.arange(n) - offset + group_size) // group_size if offset else torch.arange(n) // group_size
    same = (group[:, None] == group[None, :]).float()
    return same / same.sum(1, keepdim=True)


def pos_average_at(cfg: MiniConfig, step: int) -> tuple[int, int] | None:
    """``(group size, offset)`` when step ``step`` trains on group-averaged ``W_pos`` (chance ``pos_avg_prob``;
    size uniform in 2..``pos_avg_max``, offset uniform below it), else ``None``; seeded by the step."""
    if cfg.pos_avg_prob <= 0:
        return None
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step + 777_777)
    if float(torch.rand(1, generator=gen)) >= cfg.pos_avg_prob:
        return None
    g = int(torch.randint(2, cfg.pos_avg_max + 1, (1,), generator=gen))
    return g, int(torch.randint(0, g, (1,), generator=gen))


def lr_at(cfg: MiniConfig, s: int) -> float:
    """Linear warm-up then cosine decay to a tenth of ``cfg.lr``."""
    if s < cfg.warmup:
        return cfg.lr * (s + 1) / cfg.warmup
    frac = (s - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _load_tokenizer(work: Path, train_docs: Sequence[str], cfg: MiniConfig, tokenizer_dir: str | Path | None):
    from transformers import PreTrainedTokenizerFast

    tok_dir = work / "tokenizer"
    if (tok_dir / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(tok_dir)
    if tokenizer_dir is not None:
        tok = PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
    else:
        tok = train_tokenizer(train_docs, cfg.vocab_size)
    tok.save_pretrained(tok_dir)
    return tok


def train_mini_gpt2(docs: Sequence[str], out_dir: str | Path, cfg: MiniConfig = MiniConfig(),
                    work_dir: str | Path | None = None, progress: bool = True,
                    val_docs: Sequence[str] | None = None, tokenizer_dir: str | Path | None = None) -> dict:
    """Train and save a miniature GPT-2; resumes from ``work_dir/checkpoint.pt`` if present.

    ``val_docs``: held-out documents (default: a seeded ``val_fraction`` of ``docs``).
    ``tokenizer_dir``: reuse that directory's tokenizer (so held-out losses compare with another model
    token for token) instead of training a new BPE on ``docs``.
    Returns the training record (losses, validation losses, probes, timings), also saved as ``training.json``.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir else out_dir.with_name(out_dir.name + "-work")
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    if val_docs is None:
        train_docs, val_docs = split_docs(docs, cfg.val_fraction, cfg.seed)
    else:
        train_docs = list(docs)
    tok = _load_tokenizer(work, train_docs, cfg, tokenizer_dir)
    train_stream, val_stream = encode_stream(tok, train_docs), encode_stream(tok, val_docs)
    if cfg.synthetic_vocab > len(tok):
        cfg.synthetic_vocab = len(tok)

    hf_cfg = GPT2Config(n_layer=cfg.n_layers, n_head=cfg.n_heads, n_embd=cfg.d_model, n_positions=cfg.n_ctx,
                        vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(hf_cfg)
    wpe = model.transformer.wpe.weight
    rms = cfg.pos_rms or hf_cfg.initializer_range
    with torch.no_grad():
        if cfg.pos_init == "sinusoidal":
            wpe.copy_(sinusoidal_positions(cfg.n_ctx, cfg.d_model, rms))
        elif cfg.pos_init == "gpt2":
            wpe.copy_(gpt2_positions(cfg.n_ctx, cfg.d_model, rms))
        elif cfg.pos_init == "none":
            wpe.zero_()
        elif cfg.pos_init != "random":
            raise ValueError(f"pos_init {cfg.pos_init!r} is not one of {POS_INITS}")
    wpe.requires_grad_(cfg.pos_lr > 0 and cfg.pos_init != "none")
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad and p is not wpe]
    groups = [{"params": [p for _, p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay, "lr_scale": 1.0},
              {"params": [p for _, p in params if p.ndim < 2], "weight_decay": 0.0, "lr_scale": 1.0}]
    if wpe.requires_grad:
        groups.append({"params": [wpe], "weight_decay": cfg.weight_decay, "lr_scale": cfg.pos_lr})
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))
    record = {"config": asdict(cfg), "train_tokens": len(train_stream), "val_tokens": len(val_stream),
              "loss": [], "val_loss": [], "probes": [], "seconds": 0.0}
    step = 0
    ckpt = work / "checkpoint.pt"
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        record, step = state["record"], state["step"]
        record["config"] = asdict(cfg)  # a resumed run may extend steps; the record says what finished it
        print(f"resuming from step {step} ({ckpt})")

    def save_checkpoint(done: int) -> None:
        record["seconds"] = time.time() - t0
        tmp = ckpt.with_suffix(".tmp")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "record": record, "step": done}, tmp)
        tmp.replace(ckpt)  # never leave a half-written checkpoint behind

    model.train()
    t0 = time.time() - record["seconds"]
    last_ckpt = time.time()
    bos = tok.bos_token_id
    bar = tqdm(range(step, cfg.steps), initial=step, total=cfg.steps, desc="train mini-gpt2", disable=not progress)
    for s in bar:
        xy = training_batch(cfg, train_stream, s, bos, len(tok))
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, s) * g["lr_scale"]
        averaged = pos_average_at(cfg, s)
        handle = None
        if averaged is not None:  # this step sees W_pos averaged in groups: gradients still reach every row
            avg = group_average_matrix(cfg.n_ctx, *averaged)
            handle = model.transformer.wpe.register_forward_hook(lambda m, inp, out: F.embedding(inp[0], avg @ m.weight))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(xy[:, :-1], position_ids=position_ids(cfg, s, xy)).logits
        if handle is not None:
            handle.remove()
        loss = F.cross_entropy(logits.float().flatten(0, 1), xy[:, 1:].flatten())
        objective = loss + cfg.pos_smooth * pos_roughness(wpe) if cfg.pos_smooth else loss
        opt.zero_grad(set_to_none=True)
        objective.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        record["loss"].append([s, float(loss.detach())])
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
        done = s + 1
        if done % cfg.probe_every == 0 or done == cfg.steps:
            pr = probe(model, val_stream, cfg.n_ctx, len(tok), seed=cfg.seed)
            pr["step"] = done
            recent = [l for _, l in record["loss"][-cfg.probe_every:]]
            pr["train_loss"] = sum(recent) / len(recent)
            pr["val_loss"] = evaluate(model, val_stream, cfg.n_ctx, max_windows=32)
            pr["seconds"] = round(time.time() - t0, 1)
            record["probes"].append(pr)
            record["val_loss"].append([done, pr["val_loss"]])
            bar.write(f"step {done}: train {pr['train_loss']:.3f} val {pr['val_loss']:.3f} | prev ratio text {pr['prev_ratio_text']:.2f} "
                      f"({pr['prev_head_text']}, keeps {pr['prev_keep_avg10']:.0%} under W_pos/10) random "
                      f"{pr['prev_ratio_random']:.2f} | above L0 {pr['prev_ratio_above0']:.2f} ({pr['prev_head_above0']}, "
                      f"keeps {pr['prev_keep_avg10_above0']:.0%}) | induction "
                      f"{pr['induction']:.2f} ({pr['induction_head']}) | copy loss {pr['loss_first']:.2f} -> "
                      f"{pr['loss_second']:.2f} | {pr['seconds'] / 60:.1f} min")
        if time.time() - last_ckpt >= 60 * cfg.checkpoint_minutes or done == cfg.steps:
            save_checkpoint(done)
            last_ckpt = time.time()
    record["seconds"] = time.time() - t0
    record["final_val_loss"] = evaluate(model, val_stream, cfg.n_ctx)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    (out_dir / "training.json").write_text(json.dumps({k: v for k, v in record.items() if k != "loss"}, indent=2))
    return record
