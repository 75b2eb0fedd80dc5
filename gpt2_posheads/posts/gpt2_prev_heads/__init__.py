"""Post 004: "The positional embedding matrix and previous-token heads: how do they actually work?" (GPT-2 small).

One function per claim script; each takes a model (and optionally ``prompts``, ``heads`` and a shared ``run``) and
returns a :class:`~gpt2_posheads.posts.result.ClaimResult`. To measure several claims on one model with one set of
prompts and one ranking, make the run once::

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
