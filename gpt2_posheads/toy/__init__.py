"""Toy sparse-attention models: tasks, a batched attention-only transformer, sweeps, what is measured on them."""

from .analysis import effective_rank, relative_perplexity, separation_direction, wq_wk
from .model import ToyShape, attention_scores, forward, init_params
from .train import ToyConfig, make_batch, targets, train_group, train_sweep

__all__ = [
    "ToyConfig",
    "ToyShape",
    "attention_scores",
    "effective_rank",
    "forward",
    "init_params",
    "make_batch",
    "relative_perplexity",
    "separation_direction",
    "targets",
    "train_group",
    "train_sweep",
    "wq_wk",
]
