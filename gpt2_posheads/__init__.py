"""gpt2_posheads: positional information and previous-token heads, in GPT-2 and in toy models."""
from .analysis.diagonals import count_prev_heads, diagonal_attention, rank_from_diagonals, rank_prev_heads
from .analysis.induction import induction_scores
from .analysis.interventions import (average_ext_pos_embed, average_pos_embed, edit_head_pattern, hooks_for,
                            mask_previous_attention, scale_head_output)
from .model.loading import ModelLoadError, gpt2_tokenizer, hub_reachable, load_model, make_random_model_dir
from .analysis.posembed import extended_pos_embeddings, extended_pos_embeddings_by_layer, load_w_pos
from .analysis.prompts import make_prompts
from .model.validation import UsageError

__all__ = [
    "ModelLoadError", "UsageError", "average_ext_pos_embed", "average_pos_embed", "count_prev_heads",
    "diagonal_attention", "edit_head_pattern", "extended_pos_embeddings", "extended_pos_embeddings_by_layer",
    "gpt2_tokenizer", "hooks_for", "hub_reachable", "induction_scores", "load_model", "load_w_pos", "make_prompts",
    "make_random_model_dir", "mask_previous_attention", "rank_from_diagonals", "rank_prev_heads", "scale_head_output",
]
__version__ = "0.2.0"
