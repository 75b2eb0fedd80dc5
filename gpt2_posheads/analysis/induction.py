"""Induction: attention from a repeated sequence back to "the token after the last occurrence", and copying.

On prompts ``BOS r r`` (``r`` a sequence of ``seg_len`` random tokens), the token at position
``q = 1 + seg_len + j`` (``j``-th token of the second copy) first occurred at ``1 + j``; an induction
head attends from ``q`` to the token *after* that occurrence, ``k = q - seg_len + 1``. The *induction
score* of a head is the mean of ``A[q, q - seg_len + 1]`` over the second copy (TransformerLens's
head detector on the same prompts gives a close, slightly differently normalised number). Copying
shows in the loss: on the first copy the next token is unpredictable (about ``ln(n_vocab)`` nats),
on the second an induction circuit predicts it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..model.tokens import model_device
from ..model.validation import UsageError


def repeated_random_tokens(model, n_seqs: int = 8, seg_len: int = 50, seed: int = 0,
                           vocab_hi: int | None = None) -> torch.Tensor:
    """``[n_seqs, 1 + 2 * seg_len]`` prompts ``BOS r r``, ``r`` uniform over non-special token ids below ``vocab_hi``."""
    if seg_len < 2:
        raise UsageError("seg_len", f"{seg_len} is out of range", "allowed >= 2")
    if 1 + 2 * seg_len > model.cfg.n_ctx:
        raise UsageError("seg_len", f"{seg_len} does not fit twice in the context",
                         f"allowed 2..{(model.cfg.n_ctx - 1) // 2}")
    gen = torch.Generator().manual_seed(seed)
    hi = vocab_hi or model.cfg.d_vocab
    special = set(getattr(model.tokenizer, "all_special_ids", []) or []) if getattr(model, "tokenizer", None) else set()
    r = torch.randint(0, hi, (n_seqs, seg_len), generator=gen)
    for s in special:  # move special ids to a neighbour: they would end the text
        r[r == s] = (s + 1) % hi
    bos = model.tokenizer.bos_token_id if getattr(model, "tokenizer", None) is not None else 0
    return torch.cat([torch.full((n_seqs, 1), bos), r, r], dim=1)


@dataclass
class InductionResult:
    scores: torch.Tensor  # [n_layers, n_heads] mean attention to the token after the earlier occurrence
    loss_first: float     # mean next-token loss predicting tokens 2..seg_len of the first copy (nats)
    loss_second: float    # mean next-token loss over the second copy (nats)
    seg_len: int

    @property
    def best(self) -> tuple[str, float]:
        l, h = divmod(int(self.scores.argmax()), self.scores.shape[1])
        return f"L{l}H{h}", float(self.scores.max())


def induction_scores(model, n_seqs: int = 8, seg_len: int = 50, seed: int = 0, batch_size: int = 8) -> InductionResult:
    """Induction score of every head and the loss on each copy of ``BOS r r`` (see the module doc)."""
    toks = repeated_random_tokens(model, n_seqs, seg_len, seed)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    q = torch.arange(seg_len + 1, 2 * seg_len + 1)
    k = q - seg_len + 1
    sums = torch.zeros(L, H, dtype=torch.float64)
    losses = []

    def hook_for(layer):
        def hook(pattern, hook):  # [batch, head, q, k]
            sums[layer] += pattern[:, :, q, k].double().sum((0, 2)).cpu()
        return hook

    hooks = [(f"blocks.{l}.attn.hook_pattern", hook_for(l)) for l in range(L)]
    device = model_device(model)
    with torch.inference_mode():
        for i in range(0, n_seqs, batch_size):
            t = toks[i : i + batch_size].to(device)
            logits = model.run_with_hooks(t, fwd_hooks=hooks)
            losses.append(F.cross_entropy(logits[:, :-1].float().flatten(0, 1), t[:, 1:].flatten(),
                                          reduction="none").view(t.shape[0], -1).cpu())
    lp = torch.cat(losses)  # [n, 2 * seg_len]; entry j predicts token j + 1
    return InductionResult(scores=(sums / (n_seqs * seg_len)).float(), loss_first=float(lp[:, 1:seg_len].mean()),
                           loss_second=float(lp[:, seg_len:].mean()), seg_len=seg_len)
