"""The model organism: a miniature GPT-2 trained offline to have the mechanism the GPT-2 post is about
(data and synthetic languages, positional embeddings, the training loop, the probe of its vital signs)."""

from .config import POS_INITS, MiniConfig
from .data import REPEAT_KINDS, encode_stream, split_docs
from .probe import probe
from .train import train_mini_gpt2

__all__ = ["MiniConfig", "POS_INITS", "REPEAT_KINDS", "encode_stream", "probe", "split_docs", "train_mini_gpt2"]
