"""A head atlas: for every head of a model, how previous-token-like, induction-like and duplicate-token-like it is,
under one stated protocol.

Two protocols, each stated in words by its constant: ``"toolkit"`` (:data:`TOOLKIT_PROTOCOL`) and
``"ood-composition"`` (:data:`OOD_PROTOCOL`): the protocol whose per-head scores were released with
"Out-of-distribution generalization via composition" (repository ``JiajunSong629/ood-generalization-via-composition``,
``llm-interventions/removal-ih/IH_list/prep.py``), each row renormalised as ``A[q, 1:] / sum_k (A[q, k] + 1e-6)``.
"""

from __future__ import annotations

from functools import partial
from typing import Literal

import numpy as np
import pandas as pd
import torch

from ..model.engine import Reduction, as_token_batches, engine_for
from ..model.state import measures_caller_model
from .diagonals import head_columns, traced_stats
from .induction import induction_from_patterns, repeated_random_tokens

Protocol = Literal["toolkit", "ood-composition"]
TOOLKIT_PROTOCOL = (
    "previous-token: second / greatest diagonal on natural-text prompts (every offset, key 0 left out, "
    "BOS first); induction: mean A[q, q - seg + 1] and duplicate-token: mean A[q, q - seg] over the "
    "second copy of BOS r r (r: seg uniform random non-special tokens)"
)
OOD_PROTOCOL = (
    "50 sequences r r of 25 uniform random ids (numpy seed 2024), BOS first only for the models the published script "
    "prepends it to (Llama-2, Llama-3, Gemma 7B, Mixtral); position 0 dropped, rows "
    "renormalised with +1e-6 per entry; mean of the diagonal at offset 1 (previous token) or 24 (induction), "
    "first entry skipped"
)


def _reduce_patterns(model, make_tokens, state: dict, engine: str = "auto") -> dict:
    """``{score: [n_layers, n_heads]}``: :func:`_score_layer`'s sums over ``make_tokens()``, over ``state["n"]``."""

    def batches() -> list[torch.Tensor]:  # only an engine that runs a model makes them
        state["shape"] = (model.cfg.n_layers, model.cfg.n_heads)
        return list(as_token_batches(model, make_tokens(), 8))

    def finish(state: dict) -> dict:
        return {k: (state[k].cpu() / state["n"]).float() for k in state["scores"]}

    return engine_for(model, engine).patterns(batches, Reduction(_score_layer, finish, state))


def _score_layer(state: dict, layer: int, p: torch.Tensor) -> None:
    """Each score's per-head sums ``[n_heads]`` of one batch's pattern ``p`` ``[batch, head, q, k]`` into
    ``state[score][layer]``: induction ``A[q, q - seg + 1]`` and duplicate-token ``A[q, q - seg]`` over the second copy
    (toolkit), or the ood-composition score at offsets 1 and ``seg - 1``."""
    for name in state["scores"]:
        if name not in state:
            state[name] = torch.zeros(state["shape"], dtype=torch.float64, device=p.device)
    if "duplicate" in state["scores"]:
        for name, back in (("induction", 0), ("duplicate", 1)):
            state[name][layer] += induction_from_patterns(p, state["seg_len"], state["bos"], back)
    else:
        state["previous_token"][layer] += ood_composition_from_patterns(p, 1).sum(0)
        state["induction"][layer] += ood_composition_from_patterns(p, state["seg_len"] - 1).sum(0)


@measures_caller_model
def repeat_scores(
    model, n_seqs: int = 16, seg_len: int = 50, seed: int = 0, bos: bool = True, engine: str = "auto"
) -> dict[str, torch.Tensor]:
    """Toolkit protocol on ``[BOS] r r``: ``induction`` and ``duplicate`` ``[n_layers, n_heads]`` (module doc)."""
    state = dict(seg_len=seg_len, bos=bos, n=n_seqs * seg_len, scores=("induction", "duplicate"))
    tokens = partial(repeated_random_tokens, model, n_seqs, seg_len, seed, bos=bos)
    return _reduce_patterns(model, tokens, state, engine)


# the hub names of the models the published script (prep.py) prepends BOS to: its list names llama2-7b, llama2-70b,
# llama3-8b, gemma-7b and mixtral-7b (its own gemma-2-9b and mistral-7b get no BOS)
_OOD_BOS_MODELS = ("llama-2-7b", "llama-2-70b", "meta-llama-3-8b", "gemma-7b", "mixtral")


def ood_composition_bos(model_name: str | None) -> bool:
    """Whether the published script prepends BOS for ``model_name`` (a hub id or folder name)."""
    name = (model_name or "").lower().rstrip("/").split("/")[-1]
    return any(m in name for m in _OOD_BOS_MODELS)


def ood_composition_tokens(
    vocab_size: int, n_seqs: int = 50, seg_len: int = 25, seed: int = 2024, bos_id: int | None = None
) -> torch.Tensor:
    """``[n_seqs, 2 * seg_len]`` (``+ 1`` with ``bos_id`` first): the protocol's sequences (numpy's legacy generator,
    as ``np.random.seed(seed)`` followed by ``np.random.randint(0, vocab_size, n_seqs * seg_len)`` draws them)."""
    r = np.random.RandomState(seed).randint(low=0, high=vocab_size, size=n_seqs * seg_len).reshape(n_seqs, seg_len)
    toks = np.concatenate([r, r], axis=1)
    if bos_id is not None:
        toks = np.hstack([np.full((n_seqs, 1), bos_id, dtype=toks.dtype), toks])
    return torch.from_numpy(toks).long()


def ood_composition_from_patterns(pattern: torch.Tensor, offset: int, eps: float = 1e-6) -> torch.Tensor:
    """The protocol's score ``[batch, head]`` of patterns ``[batch, head, T, T]``: the mean over each sequence's
    diagonal at ``offset`` of the renormalised pattern, first entry skipped."""
    A = pattern.double()
    adj = torch.zeros_like(A)
    adj[..., 1:, 1:] = A[..., 1:, 1:] / (A[..., 1:, 1:] + eps).sum(-1, keepdim=True)
    diag = torch.diagonal(adj, offset=-offset, dim1=-2, dim2=-1)  # [batch, head, T - offset]
    return diag[..., 1:].mean(-1)


@measures_caller_model
def ood_composition_scores(
    model, n_seqs: int = 50, seg_len: int = 25, seed: int = 2024, bos: bool | None = None, engine: str = "auto"
) -> dict[str, torch.Tensor]:
    """``{"previous_token", "induction"}`` ``[n_layers, n_heads]`` by the "ood-composition" protocol (module doc).
    ``bos`` (default: :func:`ood_composition_bos` of the model's name) puts the tokenizer's BOS first."""

    def tokens() -> torch.Tensor:
        b = ood_composition_bos(getattr(model.cfg, "model_name", None)) if bos is None else bos
        bos_id = model.tokenizer.bos_token_id if b and getattr(model, "tokenizer", None) is not None else None
        if b and bos_id is None:
            raise ValueError("bos=True needs a tokenizer with a BOS token")
        return ood_composition_tokens(model.cfg.d_vocab, n_seqs, seg_len, seed, bos_id)

    state = dict(seg_len=seg_len, n=n_seqs, scores=("previous_token", "induction"))
    return _reduce_patterns(model, tokens, state, engine)


@measures_caller_model
def head_table(
    model,
    prompts: torch.Tensor,
    protocol: Protocol = "toolkit",
    seg_len: int = 50,
    n_seqs: int = 16,
    seed: int = 0,
    model_name: str | None = None,
    engine: str = "auto",
) -> pd.DataFrame:
    """One row per head: ``layer, head, name, top_offset, prev_ratio, prev_mass, is_prev_token, induction, duplicate``
    (toolkit protocol), plus ``ood_previous_token`` and ``ood_induction`` with ``protocol="ood-composition"`` (BOS
    first as the published script does for ``model_name``). Every score is one reduction on the model's engine."""
    st = traced_stats(model, prompts, engine=engine)
    seg = min(seg_len, (model.cfg.n_ctx - 1) // 2)
    rep = repeat_scores(model, n_seqs, seg, seed, engine=engine)
    name = model_name or getattr(model.cfg, "model_name", None)
    ood = None
    if protocol == "ood-composition":
        ood = ood_composition_scores(model, bos=ood_composition_bos(name), engine=engine)
    col = lambda t: t.flatten().tolist()  # noqa: E731
    cols = dict(
        **head_columns(model.cfg.n_layers, model.cfg.n_heads),
        top_offset=col(st["top_offset"]),
        prev_ratio=col(st["ratio"]),
        prev_mass=col(st["prev_mass"]),
        is_prev_token=[t == 1 for t in col(st["top_offset"])],
        induction=col(rep["induction"]),
        duplicate=col(rep["duplicate"]),
    )
    if ood is not None:
        cols.update(ood_previous_token=col(ood["previous_token"]), ood_induction=col(ood["induction"]))
    return pd.DataFrame(cols)
