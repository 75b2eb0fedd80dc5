"""Training a miniature GPT-2 (Hugging Face ``GPT2LMHeadModel``) on local text, resumably.

The result is a Hugging Face-format directory (``config.json``, ``model.safetensors``, tokenizer
files) that :func:`gpt2_posheads.load_model` boots like GPT-2, so every GPT-2 analysis can run on a
*trained* model offline.
"""
from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm

EOT = "<|endoftext|>"


@dataclass
class MiniConfig:
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    n_ctx: int = 256
    vocab_size: int = 4096
    steps: int = 1600
    batch_size: int = 16
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.1
    val_fraction: float = 0.05
    seed: int = 0
    checkpoint_every: int = 250
    eval_every: int = 500
    bf16: bool = False  # bfloat16 autocast for forward/backward (weights and AdamW stay float32)


def train_tokenizer(docs: Sequence[str], vocab_size: int):
    """A byte-level BPE tokenizer (GPT-2's scheme) trained on ``docs``, wrapped for ``transformers``."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(docs, vocab_size=vocab_size, min_frequency=2, special_tokens=[EOT], show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token=EOT, eos_token=EOT, unk_token=EOT)


def split_docs(docs: Sequence[str], val_fraction: float, seed: int) -> tuple[list[str], list[str]]:
    order = list(range(len(docs)))
    random.Random(seed).shuffle(order)
    n_val = max(1, int(round(val_fraction * len(docs))))
    return [docs[i] for i in order[n_val:]], [docs[i] for i in order[:n_val]]


def encode_stream(tok, docs: Sequence[str]) -> torch.Tensor:
    """All documents as one token stream, each preceded by ``<|endoftext|>`` as GPT-2 was trained."""
    ids: list[int] = []
    for d in docs:
        ids.append(tok.bos_token_id)
        ids += tok(d, add_special_tokens=False)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


def sample_batch(stream: torch.Tensor, batch_size: int, n_ctx: int, gen: torch.Generator) -> torch.Tensor:
    starts = torch.randint(0, len(stream) - n_ctx - 1, (batch_size,), generator=gen)
    return torch.stack([stream[s : s + n_ctx + 1] for s in starts.tolist()])


@torch.no_grad()
def evaluate(model, stream: torch.Tensor, n_ctx: int, max_windows: int = 64) -> float:
    """Mean next-token loss over non-overlapping windows of ``stream``."""
    model.eval()
    n = min(max_windows, (len(stream) - 1) // n_ctx)
    x = stream[: n * n_ctx + 1]
    inp = x[:-1].view(n, n_ctx)
    tgt = x[1:].view(n, n_ctx)
    losses = []
    for i in range(0, n, 16):
        logits = model(inp[i : i + 16]).logits
        losses.append(torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[i : i + 16].flatten(), reduction="sum"))
    model.train()
    return float(torch.stack(losses).sum() / tgt.numel())


def train_mini_gpt2(docs: Sequence[str], out_dir: str | Path, cfg: MiniConfig = MiniConfig(),
                    work_dir: str | Path | None = None, progress: bool = True) -> dict:
    """Train and save a miniature GPT-2; resumes from ``work_dir/checkpoint.pt`` if present.

    Returns the training record (losses, validation loss, timings), also saved as ``training.json``.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    out_dir = Path(out_dir)
    work = Path(work_dir) if work_dir else out_dir.with_name(out_dir.name + "-work")
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.seed)
    train_docs, val_docs = split_docs(docs, cfg.val_fraction, cfg.seed)
    tok_dir = work / "tokenizer"
    if (tok_dir / "tokenizer.json").exists():
        from transformers import PreTrainedTokenizerFast

        tok = PreTrainedTokenizerFast.from_pretrained(tok_dir)
    else:
        tok = train_tokenizer(train_docs, cfg.vocab_size)
        tok.save_pretrained(tok_dir)
    train_stream, val_stream = encode_stream(tok, train_docs), encode_stream(tok, val_docs)

    hf_cfg = GPT2Config(n_layer=cfg.n_layers, n_head=cfg.n_heads, n_embd=cfg.d_model, n_positions=cfg.n_ctx,
                        vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(hf_cfg)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    record = {"config": asdict(cfg), "train_tokens": len(train_stream), "val_tokens": len(val_stream),
              "loss": [], "val_loss": [], "seconds": 0.0}
    step = 0
    ckpt = work / "checkpoint.pt"
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        record, step = state["record"], state["step"]
        print(f"resuming from step {step}")

    def lr_at(s: int) -> float:
        if s < cfg.warmup:
            return cfg.lr * (s + 1) / cfg.warmup
        frac = (s - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
        return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))

    model.train()
    t0 = time.time() - record["seconds"]
    bar = tqdm(range(step, cfg.steps), initial=step, total=cfg.steps, desc="train mini-gpt2", disable=not progress)
    for s in bar:
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + s)  # batch depends on step only: resume is exact
        xy = sample_batch(train_stream, cfg.batch_size, cfg.n_ctx, gen)
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.bf16):
            logits = model(xy[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), xy[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        record["loss"].append([s, float(loss)])
        bar.set_postfix(loss=f"{float(loss):.3f}")
        done = s + 1
        if done % cfg.eval_every == 0 or done == cfg.steps:
            record["val_loss"].append([done, evaluate(model, val_stream, cfg.n_ctx)])
            bar.write(f"step {done}: val loss {record['val_loss'][-1][1]:.3f}")
        if done % cfg.checkpoint_every == 0 or done == cfg.steps:
            record["seconds"] = time.time() - t0
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "record": record, "step": done}, ckpt)
    record["seconds"] = time.time() - t0
    record["final_val_loss"] = record["val_loss"][-1][1] if record["val_loss"] else evaluate(model, val_stream, cfg.n_ctx)
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    (out_dir / "training.json").write_text(json.dumps({k: v for k, v in record.items() if k != "loss"}, indent=2))
    return record
