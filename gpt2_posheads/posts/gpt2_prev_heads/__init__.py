"""Post 004: "The positional embedding matrix and previous-token heads: how do they actually work?" (GPT-2 small).

One function per claim script; each returns a :class:`~gpt2_posheads.posts.result.ClaimResult`. Each takes ``model`` (a
TransformerLens model or bridge, ``gpt2_posheads.load_model``) and, optionally, ``prompts`` (``[batch, pos]`` token ids;
default: its script's ``PROMPTS``, natural-text prompts from the shipped text, or openwebtext-10k with the hub). The
ranking of every head on them (every offset) chooses the heads a claim is measured on when ``heads`` is not given
(:meth:`~._run.ModelRun.heads`: ``"L4H11"``-style names, ``(layer, head)`` pairs or ``"auto:N"``), as the post's roles
say in the script's ``HEADS`` (the aggregator: the sharpest previous-token head; the early heads below it; the post's
heads on GPT-2 small). ``start``, ``size``: the attention submatrix a figure shows (the post: 50 x 50 from position 60).
A claim that makes its own prompts (repeated tokens) or reads only the weights takes from ``run`` only its model and
label. To measure several claims on one model with one set of prompts and one ranking, make the run once::

    run = model_run(model)                       # prompts from the shipped text, the ranking on first use
    a = mask_prev_attention(run=run)
    b = rank_prev_heads(run=run)
"""

from ._run import ModelRun, model_run, prompted_run, unprompted_run
from .edit import l4h11_edit
from .ext_averaging import ext_pos_averaging
from .extended import ext_pos_vs_wpe
from .helix import pos_embed_helix
from .masking import mask_prev_attention
from .organism_report import mini_gpt2_report
from .ranking import rank_prev_heads
from .sources import prev_head_sources
from .taxonomy import raw_scores_taxonomy
from .weight_route import weight_route
from .wpos_averaging import pos_embed_averaging

__all__ = [
    "ModelRun",
    "ext_pos_averaging",
    "ext_pos_vs_wpe",
    "l4h11_edit",
    "mask_prev_attention",
    "mini_gpt2_report",
    "model_run",
    "pos_embed_averaging",
    "pos_embed_helix",
    "prev_head_sources",
    "prompted_run",
    "rank_prev_heads",
    "raw_scores_taxonomy",
    "unprompted_run",
    "weight_route",
]
