"""The posts this toolkit reproduces and the script that tests each of their claims, in reading order."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Post:
    key: str  # the seed's number
    title: str
    scripts: tuple[str, ...]
    needs_model: bool  # its scripts run on a transformer (True) or train their own toy models (False)


POSTS: tuple[Post, ...] = (
    Post(
        "004",
        "The positional embedding matrix and previous-token heads: how do they actually work?",
        (
            "rank_prev_heads",
            "pos_embed_helix",
            "ext_pos_vs_wpe",
            "pos_embed_averaging",
            "mask_prev_attention",
            "raw_scores_taxonomy",
            "ext_pos_averaging",
            "l4h11_edit",
            "prev_head_sources",
        ),
        True,
    ),
    Post("003", "Sparse attention 1: sticky plateau and rank collapse", ("toy_sticky_plateau",), False),
    Post("001", "Sparse attention 3: inefficiency of extracting similar content", ("toy_similar_content",), False),
    Post("000", "Sparse attention 4: previous token head", ("toy_prev_token",), False),
    Post(
        "002",
        "Sparse attention 7: stacked causal attention as implicit positions, and lost in the middle",
        ("toy_lost_in_middle",),
        False,
    ),
)
MODEL_SCRIPTS: tuple[str, ...] = tuple(s for p in POSTS if p.needs_model for s in p.scripts)
TOY_SCRIPTS: tuple[str, ...] = tuple(s for p in POSTS if not p.needs_model for s in p.scripts)
SCRIPT_POST: dict[str, Post] = {s: p for p in POSTS for s in p.scripts}

# The claims each model script judges (keys of gpt2_posheads.claims.gpt2_post.CLAIMS), in the order it writes them.
SCRIPT_CLAIMS: dict[str, tuple[str, ...]] = {
    "rank_prev_heads": ("sharp_prev_head", "sharpest_stands_alone", "half_prev_heads"),
    "pos_embed_helix": ("wpos_helix", "ext_helix"),
    "ext_pos_vs_wpe": ("ext_same_subspace", "ext_sparser", "ext_token_independent"),
    "pos_embed_averaging": ("avg_output_unchanged", "avg_breaks_down", "avg_prev_heads_unaffected"),
    "mask_prev_attention": ("mask_disrupts",),
    "raw_scores_taxonomy": ("early_self_suppressing", "aggregator_prev_boosting"),
    "ext_pos_averaging": ("ext_avg_hurts_early_more",),
    "l4h11_edit": ("edit_moves_copy",),
    "prev_head_sources": ("aggregator_above_layer0", "sources_upstream", "sources_named_heads"),
}
