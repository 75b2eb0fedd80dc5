"""The organism's training configuration: architecture, data mix, positions and optimisation in one dataclass
(recorded in ``training.json``)."""

from __future__ import annotations

from dataclasses import dataclass

POS_INITS = ("random", "sinusoidal", "gpt2", "none")


@dataclass
class MiniConfig:
    """Architecture, data mix and optimisation of a mini GPT-2 run (recorded in ``training.json``)."""

    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    n_ctx: int = 256
    vocab_size: int = 4096
    steps: int = 5000
    batch_size: int = 16
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.1
    val_fraction: float = 0.05
    seed: int = 0
    # data mix (defaults: the shipped organism's recipe, gpt2_posheads/data/mini-gpt2/README.md)
    synthetic_steps: int = 1400  # phase 1: synthetic windows only
    synthetic_vocab: int = 4096  # phase-1 synthetic token ids are drawn from [1, synthetic_vocab)
    synthetic_fraction: float = 0.125  # phase 2: share of windows still synthetic (segment pairs)
    skip_text_fraction: float = 0.0  # phase 2: share of windows from the skip-bigram language (it keeps asking for the
    # exact previous token while the model learns text)
    repeat_fraction: float = 0.5  # phase 2: share of text windows with a span of their own text repeated
    seg_min: int = 4  # repeated segment lengths (capped at a quarter / half of a short window)
    seg_max: int = 32
    synthetic_ctx: int = 16  # phase-1 window length at step 0 (0: n_ctx); shorter windows, same tokens per step
    ctx_double_every: int = 400  # phase 1: the window length doubles every this many steps (0: never), up to n_ctx
    skip_fraction: float = 0.25  # share of synthetic windows from the skip-bigram language t+1 = pi(t-1)
    skip_only_steps: int = 200  # the first steps use that language alone (the previous-token head forms first)
    skip_vocab: int = 4096  # its tokens: ids 1..skip_vocab-1
    skip_noise: float = 0.2  # chance that a token of that language is uniform instead of pi(t-1)
    skip_rule: str = "copy"  # pi: "permutation" (random) or "copy" (identity: t+1 = t-1, any vocabulary size)
    # synthetic repeats: "pairs" (s s s' s' ... tiled) or "span" (random tokens, one span copied once)
    repeat_kind: str = "pairs"
    position_offsets: bool = (
        True  # short synthetic windows start at a random absolute position (every W_pos row trains)
    )
    pos_init: str = "random"  # "random" (GPT-2's N(0, 0.02)), "sinusoidal", "gpt2" (GPT-2's own W_pos rows
    # projected onto their top d_model principal components) or "none" (no W_pos)
    pos_rms: float = 0.0  # RMS of a "sinusoidal" / "gpt2" W_pos (0: the initializer range, 0.02)
    pos_lr: float = 1.0  # W_pos learning rate as a multiple of lr (0: frozen)
    pos_smooth: float = 0.0  # weight of the roughness penalty on W_pos (see :func:`pos_roughness`)
    pos_avg_prob: float = 0.0  # chance that a step sees W_pos averaged in groups (training augmentation)
    pos_avg_max: int = 20  # ... of a random size 2..pos_avg_max, at a random offset
    pos_avg_start: int = 0  # ... from this step on (a circuit learned first, then made robust)
    # bookkeeping
    checkpoint_minutes: float = 5.0
    probe_every: int = 100
    bf16: bool = False  # bfloat16 autocast for forward/backward (weights and AdamW stay float32)
