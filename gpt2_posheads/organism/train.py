"""Training a miniature GPT-2 (Hugging Face ``GPT2LMHeadModel``) that has previous-token and induction heads.

The result is a Hugging Face folder that :func:`gpt2_posheads.load_model` boots like GPT-2, so every GPT-2 analysis
runs offline on a *trained* model with the mechanism the GPT-2 post is about (the data mix, and what did not work:
``docs/organism.md``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..analysis.interventions import group_average_rows
from .data import POS_INITS, MiniConfig, encode_stream, position_ids, split_docs, train_tokenizer, training_batch
from .probe import evaluate, lens, probe
from .weights import gpt2_w_pos


def lr_at(cfg: MiniConfig, s: int) -> float:
    """Linear warm-up then cosine decay to a tenth of ``cfg.lr``."""
    if s < cfg.warmup:
        return cfg.lr * (s + 1) / cfg.warmup
    frac = (s - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


# W_pos: initialisations (random, sinusoidal, GPT-2's own helix, none), roughness, group averaging (augmentation)
def sinusoidal_positions(n_ctx: int, d_model: int, rms: float) -> torch.Tensor:
    """``[n_ctx, d_model]`` sines and cosines of geometric frequencies (Vaswani et al.), scaled to ``rms``. A shift by
    one position is a rotation in each (sin, cos) pair, so "the previous position" is a linear map of the current
    one: an initialisation from which previous-token attention is easy to learn."""
    pos = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    freq = 10_000 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    out = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    out[:, 0::2], out[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return (out / out.pow(2).mean().sqrt() * rms).float()


def gpt2_positions(n_ctx: int, d_model: int, rms: float, w_pos: torch.Tensor | None = None) -> torch.Tensor:
    """``[n_ctx, d_model]``: GPT-2 small's own positional geometry at this size: the first ``n_ctx`` rows of GPT-2's
    ``W_pos`` ``[1024, 768]`` (``w_pos``, default the shipped ``data/gpt2-small/W_pos.npy``), mean-centred and projected
    onto their top ``d_model`` principal components, scaled to ``rms``. Neighbouring rows stay almost the same vector
    (cosine ~0.99, the smooth helix), so a head cannot read "the previous position" off them as sharply as off a learned
    ``W_pos`` whose neighbours alternate in sign."""
    if w_pos is None:
        w_pos = torch.from_numpy(gpt2_w_pos())
    if n_ctx > w_pos.shape[0] or d_model > min(n_ctx, w_pos.shape[1]):
        raise ValueError(f"GPT-2's W_pos {tuple(w_pos.shape)} cannot give {n_ctx} positions x {d_model} components")
    w = w_pos[:n_ctx].double()
    w = w - w.mean(0)
    _, _, vh = torch.linalg.svd(w, full_matrices=False)
    x = w @ vh[:d_model].T
    return (x / x.pow(2).mean().sqrt() * rms).float()


def pos_roughness(w: torch.Tensor) -> torch.Tensor:
    """``mean_p |W[p+1] - W[p]|^2 / mean_p |W[p] - mean W|^2`` of ``W`` ``[n_ctx, d_model]`` (scale-free): about 2
    for independent random rows, ``2 (1 - c)`` for a curve whose neighbours have cosine ``c`` (GPT-2's helix: ~0.02),
    up to 4 for rows alternating in sign. ``pos_smooth`` adds it to the loss."""
    step = (w[1:] - w[:-1]).pow(2).sum(-1).mean()
    spread = (w - w.mean(0)).pow(2).sum(-1).mean()
    return step / spread.clamp_min(1e-12)


def pos_average_at(cfg: MiniConfig, step: int) -> tuple[int, int] | None:
    """``(group size, offset)`` when step ``step`` trains on group-averaged ``W_pos`` (from step ``pos_avg_start``
    on, chance ``pos_avg_prob``; size uniform in 2..``pos_avg_max``, offset uniform below it), else ``None``;
    seeded by the step."""
    if cfg.pos_avg_prob <= 0 or step < cfg.pos_avg_start:
        return None
    gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + step + 777_777)
    if float(torch.rand(1, generator=gen)) >= cfg.pos_avg_prob:
        return None
    g = int(torch.randint(2, cfg.pos_avg_max + 1, (1,), generator=gen))
    return g, int(torch.randint(0, g, (1,), generator=gen))


def train_mini_gpt2(
    docs: Sequence[str],
    out_dir: str | Path,
    cfg: MiniConfig | None = None,
    work_dir: str | Path | None = None,
    progress: bool = True,
    val_docs: Sequence[str] | None = None,
    tokenizer_dir: str | Path | None = None,
) -> dict:
    """Train and save a miniature GPT-2 into ``out_dir``, resuming from ``work_dir/checkpoint.pt`` (default work dir
    ``<out_dir>-work``; a checkpoint every ``checkpoint_minutes`` and at the end, each said). ``cfg`` (a
    :class:`MiniConfig`) is never changed. ``val_docs``: held-out documents (default: a seeded ``val_fraction`` of
    ``docs``). ``tokenizer_dir``: reuse its tokenizer (held-out losses compare with another model token for token)
    instead of training a BPE on ``docs``. Returns the training record, also saved as ``training.json``."""
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    cfg = cfg if cfg is not None else MiniConfig()
    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir else out_dir.with_name(out_dir.name + "-work")
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    if val_docs is None:
        train_docs, val_docs = split_docs(docs, cfg.val_fraction, cfg.seed)
    else:
        train_docs = list(docs)
    tok_dir = work / "tokenizer"  # also what lens() gives the measured copies
    if (tok_dir / "tokenizer.json").exists():
        tok = PreTrainedTokenizerFast.from_pretrained(tok_dir)
    else:
        tok = (
            PreTrainedTokenizerFast.from_pretrained(tokenizer_dir)
            if tokenizer_dir is not None
            else train_tokenizer(train_docs, cfg.vocab_size)
        )
        tok.save_pretrained(tok_dir)
    train_stream, val_stream = encode_stream(tok, train_docs), encode_stream(tok, val_docs)
    cfg = replace(cfg, synthetic_vocab=min(cfg.synthetic_vocab, len(tok)))  # a copy: the caller's stays as it was

    sizes = dict(
        n_layer=cfg.n_layers, n_head=cfg.n_heads, n_embd=cfg.d_model, n_positions=cfg.n_ctx, vocab_size=len(tok)
    )
    no_dropout = dict.fromkeys(("resid_pdrop", "embd_pdrop", "attn_pdrop"), 0.0)
    hf_cfg = GPT2Config(**sizes, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **no_dropout)
    model = GPT2LMHeadModel(hf_cfg)
    wpe = model.transformer.wpe.weight  # W_pos, set as cfg asks, trained or frozen
    rms = cfg.pos_rms or hf_cfg.initializer_range
    init = {"sinusoidal": sinusoidal_positions, "gpt2": gpt2_positions}.get(cfg.pos_init)
    with torch.no_grad():
        if init is not None:
            wpe.copy_(init(cfg.n_ctx, cfg.d_model, rms))
        elif cfg.pos_init == "none":
            wpe.zero_()
        elif cfg.pos_init != "random":
            raise ValueError(f"pos_init {cfg.pos_init!r} is not one of {POS_INITS}")
    wpe.requires_grad_(cfg.pos_lr > 0 and cfg.pos_init != "none")
    params = [p for p in model.parameters() if p.requires_grad and p is not wpe]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.weight_decay, "lr_scale": 1.0},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0, "lr_scale": 1.0},
    ]
    if wpe.requires_grad:
        groups.append({"params": [wpe], "weight_decay": cfg.weight_decay, "lr_scale": cfg.pos_lr})
    opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95))
    record = {"config": asdict(cfg), "train_tokens": len(train_stream), "val_tokens": len(val_stream)}
    record.update({k: [] for k in ("loss", "val_loss", "probes")}, seconds=0.0)
    step = 0
    ckpt = work / "checkpoint.pt"
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        record, step = state["record"], state["step"]
        record["config"] = asdict(cfg)  # a resumed run may extend steps; the record says what finished it
        print(f"resuming from step {step} ({ckpt})")

    model.train()
    t0 = time.time() - record["seconds"]
    bar = tqdm(range(step, cfg.steps), initial=step, total=cfg.steps, desc="train mini-gpt2", disable=not progress)

    last_ckpt = time.time()
    bos = tok.bos_token_id
    for s in bar:
        xy = training_batch(cfg, train_stream, s, bos, len(tok))
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, s) * g["lr_scale"]
        averaged = pos_average_at(cfg, s)
        handle = None
        if averaged is not None:  # this step sees W_pos averaged in groups (differentiably): gradients reach every row
            handle = model.transformer.wpe.register_forward_hook(
                lambda m, inputs, _, g=averaged: F.embedding(inputs[0], group_average_rows(m.weight, *g))
            )
        # The one pass on the Hugging Face module itself: the engine runs no backward pass, so the step that trains
        # (gradients, the augmentation hook on wpe, autocast) stays here; every measurement goes through lens().
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(xy[:, :-1], position_ids=position_ids(cfg, s, xy)).logits
        if handle is not None:
            handle.remove()
        loss = F.cross_entropy(logits.float().flatten(0, 1), xy[:, 1:].flatten())
        objective = loss + cfg.pos_smooth * pos_roughness(wpe) if cfg.pos_smooth else loss
        opt.zero_grad(set_to_none=True)
        objective.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        record["loss"].append([s, float(loss.detach())])
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
        done = s + 1
        if done % cfg.probe_every == 0 or done == cfg.steps:
            measured = lens(model, tok_dir)
            pr = probe(measured, val_stream, cfg.n_ctx, len(tok), seed=cfg.seed)
            pr["step"] = done
            recent = [l for _, l in record["loss"][-cfg.probe_every :]]
            pr["train_loss"] = sum(recent) / len(recent)
            pr["val_loss"] = evaluate(measured, val_stream, cfg.n_ctx, max_windows=32)
            pr["seconds"] = round(time.time() - t0, 1)
            record["probes"].append(pr)
            record["val_loss"].append([done, pr["val_loss"]])
            bar.write(
                f"step {pr['step']}: train {pr['train_loss']:.3f} val {pr['val_loss']:.3f} | sharpest previous-token "
                f"head {pr['prev_head_text']} ratio {pr['prev_ratio_text']:.2f} (keeps {pr['prev_keep_avg10']:.0%} "
                f"under W_pos/10), random {pr['prev_ratio_random']:.2f} | above L0 {pr['prev_head_above0']} "
                f"{pr['prev_ratio_above0']:.2f} (keeps {pr['prev_keep_avg10_above0']:.0%}) | induction "
                f"{pr['induction']:.2f} ({pr['induction_head']}) | copy loss {pr['loss_first']:.2f} -> "
                f"{pr['loss_second']:.2f} | {pr['seconds'] / 60:.1f} min"
            )
        if time.time() - last_ckpt >= 60 * cfg.checkpoint_minutes or done == cfg.steps:
            record["seconds"] = time.time() - t0
            tmp = ckpt.with_suffix(".tmp")
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "record": record, "step": done}, tmp)
            tmp.replace(ckpt)  # never leave a half-written checkpoint behind
            bar.write(f"checkpoint: step {done} saved to {ckpt} (rerun the same command to resume from it)")
            last_ckpt = time.time()
    record["seconds"] = time.time() - t0
    record["final_val_loss"] = evaluate(lens(model, tok_dir), val_stream, cfg.n_ctx)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    (out_dir / "training.json").write_text(json.dumps({k: v for k, v in record.items() if k != "loss"}, indent=2))
    return record
