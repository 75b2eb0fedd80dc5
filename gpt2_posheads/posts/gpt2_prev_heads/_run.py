"""The post (:data:`POST`), what every claim of it measures on: a model, natural-text prompts, and the previous-token
ranking (:class:`ModelRun`), and the pieces the claim scripts share (the arguments they take: the package's doc)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import torch

from ...analysis.diagonals import diagonal_attention, rank_from_diagonals
from ...analysis.heads import HeadDefault, HeadSpec, resolve_heads
from ...analysis.prompts import documents, make_prompts
from ...analysis.repeat_prompt import RepeatPrompt, fit_repeat_prompt, target_words
from ...claims.catalogue import Post, declare, register_post
from ...claims.gpt2_post import prev_head_precondition
from ...claims.verdicts import Precondition
from ...model.state import require_finite_half
from ...model.validation import (
    ARGUMENT_CHECKS,
    UsageError,
    capped_seq_len,
    check_layer,
    check_model,
    checked,
    head_name,
    note,
    parse_head,
)
from ...report.plotting import heatmap, submatrix

HeadsArg = str | Sequence[str | tuple[int, int]] | None

POST = register_post(
    Post(
        key="004",
        title="The positional embedding matrix and previous-token heads: how do they actually work?",
        author="not named in the seed",
        date="not given in the seed",
        seed="004_4e3a045ca875b10c.txt",
        subject="gpt2_prev_heads",
        needs_model=True,
        order=0,
    )
)


def claim_script(name: str, **spec):
    """Declare a claim function of the post as command ``name`` (:func:`~gpt2_posheads.claims.catalogue.declare`),
    its help its module's doc followed by where the claim is a function."""

    def register(fn):
        where, path = f"{fn.__module__.rpartition('.')[0]}.{fn.__name__}", fn.__module__.replace(".", "/") + ".py"
        usage = f"{(sys.modules[fn.__module__].__doc__ or '').rstrip()}\nThe claim as a function: {where}\n({path}).\n"
        return declare(POST, name, usage=usage, **spec)(fn)

    return register


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

    def __post_init__(self):
        ARGUMENT_CHECKS["model"]("model", self.model, None)

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

    def tokens(self) -> list[str]:  # the first prompt's, as text (a figure's hover)
        return [self.model.tokenizer.decode([int(t)]) for t in self.prompts[0]]

    def prev_head(self, head: tuple[int, int]) -> Precondition:  # head is a clear previous-token head here
        return prev_head_precondition(head_name(*head), self.ranked().diag[head[0], head[1]])

    def heads(self, heads: HeadsArg, default: HeadDefault) -> tuple[list[tuple[int, int]], str]:
        """``(heads, how they were chosen)``: ``heads`` as given (names like ``"L4H11"``, ``(layer, head)`` pairs, or
        ``"auto:N"``), else ``default`` (the post's heads on GPT-2 small, the same role elsewhere)."""
        if heads is not None and not isinstance(heads, str) and all(isinstance(h, tuple) for h in heads):
            return [parse_head(head_name(*h), self.model) for h in heads], "heads given"
        spec = None if heads is None else HeadSpec.parse(heads if isinstance(heads, str) else ",".join(map(str, heads)))
        if spec is not None and spec.auto is None:  # explicit names need no ranking
            return [parse_head(s, self.model) for s in spec.names], "heads given"
        return resolve_heads(self.model, spec, default, self.ranked().ranking)


@checked
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
    """A :class:`ModelRun` for ``model`` (or, ``traced``, an nnsight
    :class:`~gpt2_posheads.model.engine_nnsight.TracedModel`): ``prompts`` as given, or ``n_prompts`` natural-text
    prompts of ``seq_len`` tokens (capped at the model's context) from the shipped text, or openwebtext-10k with the
    hub."""
    if prompts is None:
        docs, found = documents("auto")
        seq_len = capped_seq_len(model, seq_len, "seq_len")
        prompts = make_prompts(model.tokenizer, n_prompts, seq_len, seed=seed, docs=docs)
        source = source or found
    elif not (isinstance(prompts, torch.Tensor) and prompts.ndim == 2 and not prompts.is_floating_point()):
        raise TypeError("prompts: token ids [batch, pos] as an integer tensor (gpt2_posheads.make_prompts makes them)")
    elif prompts.shape[1] > model.cfg.n_ctx:
        raise UsageError("prompts", f"{prompts.shape[1]} tokens exceed the model's context", f"<= {model.cfg.n_ctx}")
    return ModelRun(model, prompts, source or "given prompts", label or _label(model))


def _label(model) -> str:
    return str(getattr(model.cfg, "model_name", "") or "") or "model"


def prompted_run(model, prompts, run: ModelRun | None, **options) -> ModelRun:
    """``run`` when given (its model must be ``model``), else :func:`model_run` of ``model`` on ``prompts``. A model
    whose half-precision weights overflow to NaN on the prompts is a
    :class:`~gpt2_posheads.model.validation.NonFiniteError` here, before anything is judged."""
    run = model_run(model, prompts, **options) if run is None else _same_model(model, run)
    require_finite_half(run.model, run.prompts)
    return run


def unprompted_run(model, run: ModelRun | None) -> ModelRun:
    """``run`` when given (its model must be ``model``), else a run of ``model`` without natural-text prompts: for the
    claims that make their own (repeated-token prompts) or read only the weights (``W_pos``)."""
    if run is None:
        check_model(model, "model")
        return ModelRun(model, None, "", _label(model))
    return _same_model(model, run)


def repeated_token_run(model, run: ModelRun | None, layer: int, n_prompts: int, seq_len: int | None):
    """``(run, seq_len)`` for a claim on the extended positional embeddings (:func:`unprompted_run`: it makes its own
    repeated-token prompts), ``layer`` checked in ``0..n_layers`` (``n_layers`` = the final residual) and ``seq_len >=
    2`` capped at the model's context, and said (``None``: the context)."""
    run = unprompted_run(model, run)
    check_layer(run.model, layer, allow_final=True)
    if seq_len is not None and seq_len < 2:
        raise ValueError(f"seq_len: {seq_len} is out of range; allowed >= 2 (a position after the first)")
    return run, None if seq_len is None else capped_seq_len(run.model, seq_len, "seq_len")


def _same_model(model, run: ModelRun) -> ModelRun:
    if model is not None and model is not run.model:
        raise ValueError("run: it was made for another model than the one given")
    return run


def repeat_prompts(
    model, targets: Sequence[str], n_given: int, seed: int = 0, param: str = "targets", contiguous: bool = False
) -> tuple[list[RepeatPrompt], str]:
    """``(prompts, why there are none)``: one repeat-string prompt per target
    (:func:`~gpt2_posheads.analysis.repeat_prompt.fit_repeat_prompt`), each word one token of the model's vocabulary (a
    longer word replaced by a single-token one, single characters in a character vocabulary; the same word the same
    replacement in every target, so swapped targets stay swapped), within the context; what differs from the post's
    prompt is said (a note naming ``param``). ``contiguous``: no separator between the words, so the token after a word
    is the next word, as on GPT-2, which the induction an edit redirects needs. No prompt (the vocabulary lacks the
    words, or the shortest template exceeds the context): ``([], reason with the numbers)``: not testable."""
    tok, n_ctx = model.tokenizer, model.cfg.n_ctx
    try:
        words, sep, how = target_words(tok, list(targets))
    except ValueError as e:
        return [], f"no repeat-string target: {e}"
    if contiguous and sep:
        joined = ", one after another with no separator (the token after a word is the next word)"
        how, sep = how.replace(f", separated by {sep!r}", joined), ""
    if how:
        note(f"{param}: {how}")
    prompts = []
    for w in words:
        rp = fit_repeat_prompt(tok, w, n_given=n_given, max_len=n_ctx, seed=seed, sep=sep)
        if not rp:
            return [], rp.reason
        prompts.append(rp)
    for adjusted in dict.fromkeys(a for rp in prompts for a in rp.adjusted if a != how):
        note(f"the repeat-string prompt: {adjusted}")
    return prompts, ""


def side_by_side(panels: dict, cmp: dict, name: str, changed: str, start: int, size: int) -> int:
    """Put a head's ``[size, size]`` attention submatrices from ``start`` into ``panels`` (``"<name> clean"``,
    ``"<name> <changed>"``), popping the first prompt's ``[pos, pos]`` patterns from ``cmp``; returns the first position
    shown."""
    panels[f"{name} clean"], first = submatrix(cmp.pop("clean"), start, size)
    panels[f"{name} {changed}"], _ = submatrix(cmp.pop("intervened"), start, size)
    return first


def ratio_grid(ranking: pd.DataFrame, n_layers: int, n_heads: int, title: str, **kw) -> go.Figure:
    """The previous-token heads' ratios on a layer x head grid ``[n_layers, n_heads]`` (0..1, lower = sharper), blank
    where a head is not a previous-token head."""
    grid = np.full((n_layers, n_heads), np.nan)
    for r in ranking[ranking.is_prev_token].itertuples():
        grid[r.layer, r.head] = r.ratio
    return head_grid(grid, title, "ratio", colorscale="Viridis_r", **kw)


def head_grid(z, title: str, what: str, **kw) -> go.Figure:
    """A layer x head heat map of ``z`` ``[n_layers, n_heads]`` on 0..1, its colour bar titled ``what``."""
    x, y = list(range(z.shape[1])), list(range(z.shape[0]))
    return heatmap(z, x, y, title, xlabel="head", ylabel="layer", zmin=0, zmax=1, colorbar=dict(title=what), **kw)
