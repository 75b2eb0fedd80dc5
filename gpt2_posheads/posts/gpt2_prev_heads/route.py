"""Which route a model's sharpest previous-token head takes, measured: the post's own claim functions on one shared
:class:`~._run.ModelRun` (one set of prompts, one ranking, so one aggregator), judged by the route rule
(:func:`~gpt2_posheads.claims.route.conclude`), which reads six claims: ``sharp_prev_head`` (:mod:`.ranking`; where no
head is sharp the rule stops there, and nothing more is measured); ``avg_prev_heads_unaffected`` (:mod:`.wpos_averaging`
on the aggregator and the sharpest clear previous-token head below it, at groups of 10 alone, the size the rule reads);
``aggregator_above_layer0`` and ``sources_upstream`` (:mod:`.sources` on the aggregator); ``mask_disrupts``
(:mod:`.masking` on the aggregator, on the run's first ``n_pattern_prompts`` prompts: it runs every prompt twice and
keeps whole patterns; the head and its preconditions are the whole run's); ``early_self_suppressing`` (:mod:`.taxonomy`:
every head labelled, one drawn).

    from gpt2_posheads import load_model
    from gpt2_posheads.posts.gpt2_prev_heads.route import measure_route

    route = measure_route(load_model("route-gpt2"))
    print(route.line())                      # the post's route: built from what earlier heads computed, ...
"""

from __future__ import annotations

import dataclasses

import torch

from ...analysis.diagonals import aggregator_and_early, choose_aggregator
from ...claims.gpt2_post import POS_GROUP
from ...claims.route import RouteConclusion, conclude, records_from_claims
from ...claims.verdicts import HELD
from ._run import ModelRun, prompted_run
from .masking import mask_prev_attention
from .ranking import rank_prev_heads
from .sources import prev_head_sources
from .taxonomy import raw_scores_taxonomy
from .wpos_averaging import pos_embed_averaging

N_PATTERN_PROMPTS = 4  # prompts the masking compares pattern by pattern (by default)


def route_records(
    model=None,
    prompts: torch.Tensor | None = None,
    *,
    seed: int = 0,
    n_pattern_prompts: int = N_PATTERN_PROMPTS,
    run: ModelRun | None = None,
) -> dict[str, dict]:
    """``{claim key: record}`` of every claim :func:`~gpt2_posheads.claims.route.conclude` reads, measured on one run of
    ``model`` (``prompts`` ``[batch, pos]``, BOS first; default 8 natural-text prompts of 256 tokens) or on ``run``.
    ``seed``: the random groups of the chance level (``sources_upstream``)."""
    if not (isinstance(n_pattern_prompts, int) and n_pattern_prompts >= 1):
        raise ValueError(f"n_pattern_prompts: {n_pattern_prompts!r} is out of range; allowed an integer >= 1")
    run = prompted_run(model, prompts, run, n_prompts=8, seq_len=256).ranked()
    out = [rank_prev_heads(run=run, progress=False)]
    if out[0].claim("sharp_prev_head").verdict == HELD:  # else the rule stops at its first row
        agg = [choose_aggregator(run.ranking)]
        out.append(pos_embed_averaging(run=run, heads=aggregator_and_early(run.ranking), group_sizes=(POS_GROUP,)))
        out.append(prev_head_sources(run=run, heads=agg, seed=seed))
        patterns = dataclasses.replace(run, prompts=run.prompts[:n_pattern_prompts])  # the ranking kept: the same head
        out.append(mask_prev_attention(run=patterns, heads=agg))
        out.append(raw_scores_taxonomy(run=run, heads=agg))  # every head labelled; one drawn
    return records_from_claims(c for r in out for c in r.claims)


def measure_route(
    model=None,
    prompts: torch.Tensor | None = None,
    *,
    n_prompts: int = 8,
    seq_len: int = 256,
    seed: int = 0,
    run: ModelRun | None = None,
) -> RouteConclusion:
    """Which route ``model``'s sharpest previous-token head takes, with the rows that decided it: ``conclude`` on
    :func:`route_records` (default ``n_prompts`` natural-text prompts of ``seq_len`` tokens, at most the context)."""
    run = prompted_run(model, prompts, run, n_prompts=n_prompts, seq_len=seq_len, seed=seed)
    return conclude(route_records(run=run, seed=seed))
