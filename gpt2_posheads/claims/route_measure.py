"""The route conclusion of a model, measured: the six claims :func:`~gpt2_posheads.claims.route.conclude` reads,
from one model and one set of prompts, judged by the post's rules (:mod:`~gpt2_posheads.claims.gpt2_post`).

Each claim is measured as its script measures it (the same analysis calls, heads, interventions and
preconditions), sharing one ranking of the heads: ``sharp_prev_head`` (``rank_prev_heads.py``),
``avg_prev_heads_unaffected`` (``pos_embed_averaging.py``, groups of 10), ``aggregator_above_layer0`` and
``sources_upstream`` (``prev_head_sources.py``: mean ablation, the layers below and the early heads removed
together against random groups), ``mask_disrupts`` (``mask_prev_attention.py``: p-1 masked at every 5th query
below the head) and ``early_self_suppressing`` (``raw_scores_taxonomy.py``, window 3). Where the sharpest head is
not even a clear previous-token head, nothing more is measured: every claim about it is ``not testable``.

    from gpt2_posheads import load_model
    from gpt2_posheads.claims.route_measure import measure_route

    route = measure_route(load_model("data/route-gpt2"))
    print(route.line())                      # the post's route: built from what earlier heads computed, ...
"""

from __future__ import annotations

import math

from ..analysis.diagonals import (
    aggregator_and_early,
    choose_aggregator,
    diagonal_attention,
    early_prev_heads,
    rank_from_diagonals,
    sharpest_prev_ratio,
)
from ..analysis.interventions import average_pos_embed, mask_previous_attention, masked_queries
from ..analysis.measures import compare_head_patterns
from ..analysis.prompts import make_prompts
from ..analysis.scores import classify_prev_heads, score_profile
from ..analysis.sources import BELOW, below_relayed, early_and_chance_groups, path_ablation, upstream_summary
from ..model.identity import has_learned_positions
from ..model.validation import head_name
from .gpt2_post import MASK_EVERY, POS_GROUP, judge_claim, layer_above, prev_head_precondition
from .route import RouteConclusion, conclude
from .verdicts import Precondition


def route_records(
    model, prompts, seed: int = 0, n_pattern_prompts: int = 4, batch_size: int = 4, progress: bool = False
) -> dict[str, dict]:
    """``{claim key: record}`` for the claims the route conclusion reads, measured on ``model`` with ``prompts``
    (``[batch, pos]`` token ids, BOS first). ``n_pattern_prompts``: how many of them the masking compares pattern by
    pattern; ``seed``: the random groups of the chance level."""
    diag = diagonal_attention(model, prompts, batch_size=batch_size, progress=progress)
    rank = rank_from_diagonals(diag)
    ratios = rank[rank.is_prev_token].ratio.tolist()
    agg_l, agg_h = choose_aggregator(rank)
    agg = head_name(agg_l, agg_h)
    out: dict[str, dict] = {}

    def add(key, measured, value=None, preconditions=(), head=agg, shown=""):
        out[key] = judge_claim(key, measured, value, preconditions, head=head, shown=shown).as_dict()

    add(
        "sharp_prev_head",
        {"head": agg if ratios else None, "ratio": ratios[0] if ratios else None},
        sharpest_prev_ratio(rank),
        head=agg if ratios else "",
        shown=f"ratio {ratios[0]:.3g}" if ratios else "no previous-token head",
    )
    pre_agg = prev_head_precondition(agg, diag[agg_l, agg_h])
    above = layer_above(agg, agg_l, 0)
    early = [(int(r.layer), int(r.head)) for r in early_prev_heads(rank, agg_l).itertuples()]
    has_early = Precondition(
        "clear previous-token heads sit below the aggregator",
        bool(early),
        f"no clear previous-token head sits below {agg} (layer {agg_l})",
    )
    learned = Precondition(
        "the model has learned absolute positions (W_pos)",
        has_learned_positions(model),
        "the model has no learned W_pos: W_pos interventions do not apply",
    )
    measure = pre_agg.ok  # a head that is not even a clear previous-token head: every claim about it is not testable

    tracked = aggregator_and_early(rank)
    names = [head_name(l, h) for l, h in tracked]
    kept = {}
    if measure and learned.ok:
        avg = diagonal_attention(
            model,
            prompts,
            fwd_hooks=average_pos_embed(POS_GROUP).hooks(model),
            batch_size=batch_size,
            progress=progress,
        )
        kept = {n: (float(diag[l, h, 1]), float(avg[l, h, 1])) for n, (l, h) in zip(names, tracked)}
    add(
        "avg_prev_heads_unaffected",
        {f"{n} clean -> g{POS_GROUP}": v for n, v in kept.items()},
        kept,
        [learned] + [prev_head_precondition(n, diag[l, h]) for n, (l, h) in zip(names, tracked)],
        head=",".join(names),
        shown=", ".join(f"{n} keeps {b / a:.0%}" for n, (a, b) in kept.items() if a > 0),
    )

    if measure and agg_l >= 1:
        df = path_ablation(
            model,
            prompts,
            agg_l,
            agg_h,
            groups=early_and_chance_groups(early, agg_l, model.cfg.n_heads, seed=seed),
            below=True,
            pos_group=POS_GROUP,
            batch_size=batch_size,
        )
        rel = df.set_index(["source", "side"])["relative_drop"]
        below = float(rel[(BELOW, "both")])
        key = (below_relayed(POS_GROUP), "both")
        relayed = float(rel[key]) if key in rel.index else None
        add(
            "aggregator_above_layer0",
            {
                "head": agg,
                "layer": agg_l,
                "relative_drop_without_layers_below": below,
                "relative_drop_wpos_averaged_below": relayed,
            },
            (agg, agg_l, below, relayed),
            [pre_agg],
            shown=f"layer {agg_l}; {below:.0%} lower without the layers below"
            + (f", {relayed:.0%} with them fed averaged W_pos" if relayed is not None else ""),
        )
        up = upstream_summary(df, early)
        add(
            "sources_upstream",
            up,
            up,
            [pre_agg, above, has_early],
            shown=f"{up['group_drop']:.0%} lower without the early heads (chance {up['chance']:.0%})" if early else "",
        )
        cmp = compare_head_patterns(
            model,
            prompts[:n_pattern_prompts],
            (agg_l, agg_h),
            mask_previous_attention(MASK_EVERY, range(agg_l)).hooks(model),
            rows=masked_queries(MASK_EVERY, prompts.shape[1]),
        )
        add(
            "mask_disrupts",
            {
                "head": agg,
                "masked_layers": list(range(agg_l)),
                "prev_mass_masked_rows": [cmp["prev_rows_clean"], cmp["prev_rows_intervened"]],
            },
            (cmp["prev_rows_clean"], cmp["prev_rows_intervened"]),
            [pre_agg, above],
            shown=f"{cmp['rows_relative_drop']:.0%} lower on the masked rows",
        )
    else:  # layer 0 (nothing below it), or not a clear previous-token head: the preconditions say which
        add("aggregator_above_layer0", {"head": agg, "layer": agg_l}, (agg, agg_l, math.nan, math.nan), [pre_agg])
        add("sources_upstream", {"head": agg}, {}, [pre_agg, above])
        add("mask_disrupts", {"head": agg, "masked_layers": list(range(agg_l))}, (0.0, 0.0), [pre_agg, above])

    labels = {}
    if measure and early:
        profile = score_profile(model, prompts, batch_size=batch_size, progress=progress)
        labels = classify_prev_heads(profile).set_index("name")["label"].to_dict()
    early_names = [head_name(l, h) for l, h in early]
    self_s = [n for n in early_names if labels.get(n) == "self_suppressing"]
    add(
        "early_self_suppressing",
        {
            "aggregator": agg,
            "early_prev_heads": early_names,
            "self_suppressing": self_s,
            "prev_boosting": [n for n in early_names if labels.get(n) == "prev_boosting"],
        },
        (len(self_s), len(early_names)),
        [pre_agg, has_early],
        head=",".join(early_names),
        shown=f"{len(self_s)} of {len(early_names)} self-suppressing",
    )
    return out


def measure_route(
    model, prompts=None, n_prompts: int = 8, seq_len: int = 256, source: str = "auto", seed: int = 0
) -> RouteConclusion:
    """Which route ``model``'s sharpest previous-token head takes, with the rows that decided it
    (:func:`~gpt2_posheads.claims.route.conclude` on :func:`route_records`). ``prompts``: ``[batch, pos]`` token ids
    with BOS first; default ``n_prompts`` of ``seq_len`` tokens (at most the context) from ``source``."""
    if prompts is None:
        prompts = make_prompts(model.tokenizer, n_prompts, min(seq_len, model.cfg.n_ctx), source=source, seed=seed)
    return conclude(route_records(model, prompts, seed=seed))
