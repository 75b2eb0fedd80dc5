"""What kind of model this is: OpenAI's GPT-2 small or not, and what kind of positions it has.

The GPT-2 post names heads (L4H11, L2H2, ...) that mean something only on GPT-2 small, so scripts use those names as
defaults only when :func:`is_gpt2_small` is sure. Shape alone is not enough (a random 12 x 12 x 768 model has it, and so
does one carrying GPT-2's real ``W_pos``): the check also needs GPT-2's token-embedding values and its tokenizer.
Compatibility mode centres every row of ``W_E`` and ``W_pos`` (subtracts its mean over ``d_model``), so values are
compared up to one offset per row."""

from __future__ import annotations

from typing import Literal

import torch

from .validation import checked

PositionKind = Literal["learned", "rotary", "alibi", "none", "other"]

GPT2_SMALL_SHAPE = (12, 12, 768, 1024, 50257)  # n_layers, n_heads, d_model, n_ctx, d_vocab
# Known entries of the real weights (Hugging Face ``gpt2``): row -> {column: value}.
GPT2_W_E = {
    0: {0: -0.1101, 1: -0.0393, 2: 0.0331, 765: -0.1364, 766: 0.0151, 767: 0.0453},
    1: {0: 0.0403, 1: -0.0486, 2: 0.0462, 765: 0.0861, 766: 0.0025, 767: 0.0432},
    2: {0: -0.1275, 1: 0.0479, 2: 0.1841, 765: 0.0899, 766: -0.1297, 767: -0.0879},
}
GPT2_W_POS = {0: {0: -0.0188, 1: -0.1974, 2: 0.0040}}
GPT2_TOKENS = ("Hello world", [15496, 995])
# config.json's key that marks a compiled stand-in (gpt2_posheads.organism.standin): a model that passes the check
# below by construction, for tests, and must never be taken for GPT-2 by whoever reads its results
STANDIN_KEY = "gpt2_posheads_compiled_standin"


def _rows_match(w: torch.Tensor, known: dict[int, dict[int, float]], tol: float = 2e-3) -> bool:
    """Each known row equals ``w``'s up to one offset per row (the compatibility-mode centring), to ``tol``."""
    for row, cols in known.items():
        diff = torch.tensor(list(cols.values())) - torch.tensor([float(w[row, c]) for c in cols])
        if float(diff.max() - diff.min()) > 2 * tol or float(diff.abs().max()) > 0.05:
            return False
    return True


@checked
def is_gpt2_small(model) -> bool:
    """True only for OpenAI's GPT-2 small: its shape, its token-embedding and positional-embedding values,
    and its tokenizer (``"Hello world"`` is ``[15496, 995]``)."""
    c = model.cfg
    if (c.n_layers, c.n_heads, c.d_model, c.n_ctx, c.d_vocab) != GPT2_SMALL_SHAPE:
        return False
    try:
        w_e, w_pos = model.W_E.detach().float().cpu(), model.W_pos.detach().float().cpu()
        if not (_rows_match(w_e, GPT2_W_E) and _rows_match(w_pos, GPT2_W_POS)):
            return False
        tok = getattr(model, "tokenizer", None)
        return tok is not None and list(tok(GPT2_TOKENS[0], add_special_tokens=False)["input_ids"]) == GPT2_TOKENS[1]
    except (AttributeError, IndexError, KeyError, RuntimeError, TypeError):
        return False


def compiled_standin(model) -> str | None:
    """The marker of a compiled stand-in (:data:`STANDIN_KEY` in its ``config.json``: what it is, in words), or
    ``None`` for any other model. Read off the Hugging Face config the model was loaded from."""
    for cfg in (getattr(getattr(model, "original_model", None), "config", None), getattr(model, "config", None)):
        marker = getattr(cfg, STANDIN_KEY, None) if cfg is not None else None
        if isinstance(marker, str) and marker:
            return marker
    return None


@checked
def position_kind(model) -> PositionKind:
    """How the model knows positions: ``learned`` absolute embeddings (``W_pos``; GPT-2, GPT-Neo, OPT),
    ``rotary`` (Pythia, Llama), ``alibi``, ``none``, or ``other``."""
    kind = getattr(model.cfg, "positional_embedding_type", "standard")
    if kind == "standard":
        w_pos = getattr(model, "W_pos", None)
        # a W_pos of zeros (a model trained without positions) adds nothing: averaging it would change nothing
        # and the W_pos claims would look held where the phenomenon is absent
        return "learned" if w_pos is not None and bool(w_pos.detach().abs().max() > 0) else "none"
    return {"rotary": "rotary", "alibi": "alibi", "shortformer": "learned"}.get(kind, "other")


def has_learned_positions(model) -> bool:
    """``W_pos`` exists and is added to the residual stream (what the ``W_pos`` interventions need)."""
    standard = getattr(model.cfg, "positional_embedding_type", "standard") == "standard"
    return standard and position_kind(model) == "learned"


def wpos_reason(model, label: str) -> str | None:
    """Why ``W_pos`` interventions do not apply to ``model`` (``None`` when they do)."""
    why = f"{label} has {position_kind(model)} positions; W_pos interventions need learned absolute positions"
    return None if has_learned_positions(model) else why
