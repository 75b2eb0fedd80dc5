"""gpt2_posheads: positional information and previous-token heads, in GPT-2 and in toy models."""
from .diagonals import count_prev_heads, diagonal_attention, rank_from_diagonals, rank_prev_heads
from .loading import ModelLoadError, gpt2_tokenizer, hub_reachable, load_model, make_random_model_dir
from .prompts import make_prompts

__all__ = [
    "ModelLoadError", "count_prev_heads", "diagonal_attention", "gpt2_tokenizer", "hub_reachable",
    "load_model", "make_prompts", "make_random_model_dir", "rank_from_diagonals", "rank_prev_heads",
]
__version__ = "0.1.0"
