"""What every claim of the GPT-2 post measures on: a model, natural-text prompts, and the previous-token ranking.

Each claim function takes ``model`` and, optionally, ``prompts`` (``[batch, pos]`` token ids); without them it makes
the post's prompts from the shipped text (or openwebtext-10k with the hub). The ranking of every head on those
prompts (:func:`~gpt2_posheads.analysis.diagonals.diagonal_attention`, every offset) chooses the heads a claim is
measured on when ``heads`` is not given, as the post's roles say (the aggregator: the sharpest previous-token head;
the early heads below it). A caller measuring several claims on one model passes the same ``run`` to each
(:func:`model_run`), so the prompts are made and the heads ranked once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch

from ...analysis.diagonals import diagonal_attention, rank_from_diagonals
from ...analysis.prompts import make_prompts
from ...cli.heads import HeadDefault, HeadSpec, resolve_heads
from ...model.traced import is_traced
from ...model.validation import UsageError, head_name, parse_head

HeadsArg = str | Sequence[str | tuple[int, int]] | None


@dataclass
class ModelRun:
    """A model with its prompts and its ranking on them: what the post's claims share.

    ``diag``: ``[n_layers, n_heads, n_offsets]`` mean attention per diagonal (key 0 left out); ``ranking``: its
    DataFrame (:func:`~gpt2_posheads.analysis.diagonals.rank_from_diagonals`).
    """

    model: object
    prompts: torch.Tensor | None
    source: str = "given prompts"
    label: str = ""
    diag: torch.Tensor | None = None
    ranking: pd.DataFrame | None = None

    @classmethod
    def of(cls, exp) -> ModelRun:
        """The run a command set up (:class:`~gpt2_posheads.cli.experiment.Experiment`: model, prompts, ranking)."""
        return cls(exp.model, exp.prompts, exp.source, exp.label, exp.diag, exp.ranking)

    def ranked(self) -> ModelRun:
        """This run with its ranking computed (once)."""
        if self.diag is None:
            self.diag = diagonal_attention(self.model, self.prompts, progress=False)
        if self.ranking is None:
            self.ranking = rank_from_diagonals(self.diag)
        return self

    def heads(self, heads: HeadsArg, default: HeadDefault) -> tuple[list[tuple[int, int]], str]:
        """``(heads, how they were chosen)``: ``heads`` as given (names like ``"L4H11"``, ``(layer, head)`` pairs,
        or ``"auto:N"``), else ``default`` (the post's heads on GPT-2 small, the same role elsewhere)."""
        if heads is not None and not isinstance(heads, str) and all(isinstance(h, tuple) for h in heads):
            pairs = [parse_head(head_name(*h), self.model) for h in heads]
            return pairs, "heads given"
        if isinstance(heads, str):
            spec = HeadSpec.parse(heads)
        elif heads is not None:
            spec = HeadSpec.parse(",".join(str(h) for h in heads))
        else:
            spec = None
        if spec is not None and spec.auto is None:  # explicit names need no ranking
            return [parse_head(s, self.model) for s in spec.names], "heads given"
        return resolve_heads(self.model, spec, default, self.ranked().ranking)


def model_run(
    model,
    prompts: torch.Tensor | None = None,
    *,
    n_prompts: int = 32,
    seq_len: int = 256,
    seed: int = 0,
    label: str = "",
    source: str | None = None,
    traced: bool = False,
) -> ModelRun:
    """A :class:`ModelRun` for ``model``: ``prompts`` as given, or ``n_prompts`` natural-text prompts of ``seq_len``
    tokens (capped at the model's context) from the shipped text, or openwebtext-10k with the hub. ``traced``: an
    nnsight :class:`~gpt2_posheads.model.traced.TracedModel` is accepted too (a claim that runs through nnsight)."""
    _check_model(model, traced)
    if prompts is None:
        from ...analysis.prompts import documents

        docs, found = documents("auto")
        prompts = make_prompts(model.tokenizer, n_prompts, min(seq_len, model.cfg.n_ctx), seed=seed, docs=docs)
        source = source or found
    elif not (isinstance(prompts, torch.Tensor) and prompts.ndim == 2 and not prompts.is_floating_point()):
        raise TypeError("prompts: token ids [batch, pos] as an integer tensor (gpt2_posheads.make_prompts makes them)")
    elif prompts.shape[1] > model.cfg.n_ctx:
        raise UsageError("prompts", f"{prompts.shape[1]} tokens exceed the model's context", f"<= {model.cfg.n_ctx}")
    return ModelRun(model, prompts, source or "given prompts", label or _label(model))


def _check_model(model, traced: bool = False) -> None:
    if traced and is_traced(model):
        return
    if not (hasattr(model, "cfg") and hasattr(model, "run_with_hooks")):
        raise TypeError(
            f"model: a TransformerLens model or bridge is needed, got {type(model).__name__}; "
            "gpt2_posheads.load_model(name or folder) loads one"
        )


def _label(model) -> str:
    name = getattr(model.cfg, "model_name", "") or ""
    return str(name) or "model"


def as_run(model, prompts, run: ModelRun | None, **options) -> ModelRun:
    """``run`` when given (its model must be ``model``), else :func:`model_run` of ``model`` and ``prompts``."""
    if run is None:
        return model_run(model, prompts, **options)
    return _same_model(model, run)


def model_only(model, run: ModelRun | None) -> ModelRun:
    """``run`` when given (its model must be ``model``), else a run of ``model`` without natural-text prompts: for
    the claims that make their own (repeated-token prompts) or read only the weights (``W_pos``)."""
    if run is None:
        _check_model(model)
        return ModelRun(model, None, "", _label(model))
    return _same_model(model, run)


def _same_model(model, run: ModelRun) -> ModelRun:
    if model is not None and model is not run.model:
        raise ValueError("run: it was made for another model than the one given")
    return run
