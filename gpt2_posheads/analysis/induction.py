"""Induction: attention from a repeated sequence back to "the token after the last occurrence", and copying.

On prompts ``[BOS] r r`` (``r`` a sequence of ``seg_len`` random tokens; ``b = 1`` with a leading BOS, else
0), the ``j``-th token of the second copy sits at ``q = b + seg_len + j`` and first occurred at ``b + j``; an
induction head attends from ``q`` to the token *after* that occurrence, ``k = q - seg_len + 1``. The
*induction score* of a head is the mean of ``A[q, q - seg_len + 1]`` over the second copy.

Copying shows in the loss. The first token of each copy is unpredictable (nothing says the sequence repeats), so
both losses leave it out:

* ``loss_first``: mean next-token loss on tokens ``2..seg_len`` of the first copy (about ``ln d_vocab``);
* ``loss_second``: mean next-token loss on tokens ``2..seg_len`` of the second copy (near 0 with induction).

The pure functions take tensors, so the training probe of :mod:`gpt2_posheads.organism` computes exactly these numbers
on a Hugging Face model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..model.engine import Reduction, engine_for
from ..model.state import measures_caller_model
from ..model.validation import UsageError, check_model


def repeated_random_tokens(
    model, n_seqs: int = 8, seg_len: int = 50, seed: int = 0, bos: bool = True, vocab_hi: int | None = None
) -> torch.Tensor:
    """``[n_seqs, b + 2 * seg_len]`` prompts ``[BOS] r r``, ``r`` uniform over non-special token ids below
    ``vocab_hi`` (default ``d_vocab``)."""
    b = int(bos)
    if seg_len < 2:
        raise UsageError("seg_len", f"{seg_len} is out of range", "allowed >= 2")
    if b + 2 * seg_len > model.cfg.n_ctx:
        raise UsageError(
            "seg_len", f"{seg_len} does not fit twice in the context", f"allowed 2..{(model.cfg.n_ctx - b) // 2}"
        )
    gen = torch.Generator().manual_seed(seed)
    hi = vocab_hi or model.cfg.d_vocab
    special = set(getattr(model.tokenizer, "all_special_ids", []) or []) if getattr(model, "tokenizer", None) else set()
    r = torch.randint(0, hi, (n_seqs, seg_len), generator=gen)
    for s in special:  # move special ids to a neighbour: they would end the text
        r[r == s] = (s + 1) % hi
    parts = [r, r]
    if bos:
        tok_bos = model.tokenizer.bos_token_id if getattr(model, "tokenizer", None) is not None else 0
        parts.insert(0, torch.full((n_seqs, 1), tok_bos))
    return torch.cat(parts, dim=1)


def induction_positions(seg_len: int, bos: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(q, k)``: every query of the second copy and the key an induction head attends to from it."""
    q = torch.arange(int(bos) + seg_len, int(bos) + 2 * seg_len)
    return q, q - seg_len + 1


def induction_from_patterns(pattern: torch.Tensor, seg_len: int, bos: bool = True, back: int = 0) -> torch.Tensor:
    """Sum over batch and the second copy of ``A[q, q - seg_len + 1 - back]`` per head: ``[batch, head, q, k]`` →
    ``[head]`` (divide by ``batch * seg_len`` for the score; ``back=1``: the duplicate-token key)."""
    q, k = (t.to(pattern.device) for t in induction_positions(seg_len, bos))
    return pattern[:, :, q, k - back].double().sum((0, 2))


def copy_losses(
    logits: torch.Tensor, tokens: torch.Tensor, seg_len: int, bos: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sequence mean losses ``(first copy, second copy)`` ``[batch]`` each (module doc) of ``logits`` ``[batch,
    pos, vocab]`` and ``tokens`` ``[batch, pos]``."""
    b = int(bos)
    nll = F.cross_entropy(
        logits[:, :-1].float().flatten(0, 1), tokens[:, 1:].flatten().to(logits.device), reduction="none"
    )
    lp = nll.view(tokens.shape[0], -1).cpu()  # lp[:, i] predicts token i + 1
    return lp[:, b : b + seg_len - 1].mean(1), lp[:, b + seg_len :].mean(1)


@dataclass
class InductionResult:
    scores: torch.Tensor  # [n_layers, n_heads] mean attention to the token after the earlier occurrence
    loss_first: float  # mean next-token loss on tokens 2..seg_len of the first copy (nats)
    loss_second: float  # the same on the second copy (nats)
    seg_len: int
    bos: bool = True

    @property
    def best(self) -> tuple[str, float]:
        l, h = divmod(int(self.scores.argmax()), self.scores.shape[1])
        return f"L{l}H{h}", float(self.scores.max())


def _induction_step(state: dict, layer: int, pattern: torch.Tensor) -> None:
    state["sums"][layer] += induction_from_patterns(pattern, state["seg_len"], state["bos"]).cpu()


def _copy_loss_step(state: dict, tokens: torch.Tensor, logits: torch.Tensor) -> None:
    first, second = copy_losses(logits, tokens, state["seg_len"], state["bos"])
    state["first"].append(first)
    state["second"].append(second)


def _induction_finish(state: dict) -> dict:
    return {"sums": state["sums"], "first": torch.cat(state["first"]), "second": torch.cat(state["second"])}


@measures_caller_model
def induction_scores(
    model,
    n_seqs: int = 8,
    seg_len: int = 50,
    seed: int = 0,
    batch_size: int = 8,
    bos: bool = True,
    engine: str = "auto",
) -> InductionResult:
    """Induction score of every head and the loss on each copy of ``[BOS] r r`` (module doc), from one pass."""
    check_model(model)
    toks = repeated_random_tokens(model, n_seqs, seg_len, seed, bos=bos)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    state = {"sums": torch.zeros(L, H, dtype=torch.float64), "seg_len": seg_len, "bos": bos, "first": [], "second": []}
    batches = [toks[i : i + batch_size] for i in range(0, n_seqs, batch_size)]
    reduction = Reduction(_induction_step, _induction_finish, state, logits=_copy_loss_step)
    got = engine_for(model, engine).patterns(batches, reduction)
    return InductionResult(
        scores=(got["sums"] / (n_seqs * seg_len)).float(),
        loss_first=float(got["first"].mean()),
        loss_second=float(got["second"].mean()),
        seg_len=seg_len,
        bos=bos,
    )
