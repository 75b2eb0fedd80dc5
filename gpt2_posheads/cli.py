"""Command-line pieces every experiment script shares: model options, output folder, summaries."""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from ._paths import REPO_ROOT
from .loading import ModelLoadError, load_model
from .plotting import save_figure


def experiment_parser(description: str, model: bool = True, default_out: str | None = None) -> argparse.ArgumentParser:
    """An ``argparse`` parser with the options every experiment takes."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    if model:
        p.add_argument("--model", default="gpt2", help="Hugging Face hub name of the model")
        p.add_argument("--model-dir", default=None, help="local Hugging Face-format model directory (overrides --model); "
                       "e.g. data/mini-gpt2 offline")
        p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--out", default=default_out, help="output folder (default: results/<script name>)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--no-png", action="store_true", help="write HTML figures only (skip kaleido/Chromium)")
    return p


def model_from_args(args):
    """Load ``--model-dir`` or ``--model``; a load failure exits with the loader's message, not a traceback."""
    try:
        return load_model(args.model_dir or args.model, device=args.device)
    except (ModelLoadError, FileNotFoundError) as e:
        sys.exit(f"error: {e}")


def model_label(args) -> str:
    return str(args.model_dir or args.model)


def _jsonable(x):
    if isinstance(x, torch.Tensor):
        return _jsonable(x.detach().cpu().tolist())
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, pd.DataFrame):
        return _jsonable(x.to_dict(orient="records"))
    if isinstance(x, Path):
        return str(x)
    return x


def write_json(path: str | Path, obj) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_jsonable(obj), indent=2) + "\n")
    return path


def read_json(path: str | Path):
    return json.loads(Path(path).read_text())


@dataclass
class Output:
    """An experiment's output folder: figures (HTML+PNG), CSV tables and the JSON summary."""

    out_dir: Path
    png: bool = True
    written: list[Path] = field(default_factory=list)
    started: float = field(default_factory=time.time)

    @classmethod
    def from_args(cls, args, script_file: str) -> "Output":
        out = Path(args.out) if args.out else REPO_ROOT / "results" / Path(script_file).stem
        out.mkdir(parents=True, exist_ok=True)
        return cls(out, png=not args.no_png)

    def figure(self, fig, stem: str, **kw) -> None:
        self.written += save_figure(fig, self.out_dir, stem, png=self.png, **kw)

    def csv(self, df: pd.DataFrame, stem: str) -> None:
        p = self.out_dir / f"{stem}.csv"
        df.to_csv(p, index=False)
        self.written.append(p)

    def summary(self, obj: dict, stem: str = "summary") -> Path:
        obj = dict(obj)
        obj.setdefault("elapsed_s", round(time.time() - self.started, 2))
        p = write_json(self.out_dir / f"{stem}.json", obj)
        self.written.append(p)
        return p

    def report(self) -> None:
        print(f"\nwrote {len(self.written)} files to {self.out_dir}:")
        for p in self.written:
            print(f"  {p.name}")


def add_prompt_args(p: argparse.ArgumentParser, n_prompts: int = 16, seq_len: int = 256) -> None:
    p.add_argument("--prompts", default="auto", help="auto | openwebtext | wikitext | path to .txt/.jsonl")
    p.add_argument("--n-prompts", type=int, default=n_prompts, help="natural-text prompts")
    p.add_argument("--seq-len", type=int, default=seq_len, help="tokens per prompt, BOS included (capped at n_ctx)")


def corpus_prompts(model, args) -> tuple[torch.Tensor, str]:
    """``[n_prompts, seq_len]`` natural-text prompts for ``args`` and a description of their source."""
    from .prompts import documents, make_prompts

    docs, source = documents(args.prompts)
    seq_len = min(args.seq_len, model.cfg.n_ctx)
    return make_prompts(model.tokenizer, args.n_prompts, seq_len, seed=args.seed, docs=docs), source


def add_heads_arg(p: argparse.ArgumentParser, default: str, help: str = "heads") -> None:
    p.add_argument("--heads", default=default,
                   help=f"{help}: comma-separated names like L4H11, or 'auto:N' for the model's N most "
                        f"previous-token-like heads (by the diagonal ranking)")


def resolve_heads(model, spec: str, prompts: torch.Tensor | None = None) -> list[tuple[int, int]]:
    """Head names → ``[(layer, head)]``, checked against the model; ``auto:N`` ranks the model's heads."""
    from .validation import parse_head

    if spec.startswith("auto"):
        from .diagonals import rank_prev_heads

        n = int(spec.split(":")[1]) if ":" in spec else 3
        if prompts is None:
            raise ValueError("--heads auto needs prompts to rank heads on")
        df = rank_prev_heads(model, prompts[: min(8, len(prompts))], max_offset=16, progress=False)
        return [(int(r.layer), int(r.head)) for r in df.head(n).itertuples()]
    try:
        return [parse_head(s, model) for s in spec.split(",") if s.strip()]
    except ValueError as e:
        sys.exit(f"error: --heads: {e}")


def add_submatrix_args(p: argparse.ArgumentParser, start: int = 60, size: int = 50) -> None:
    p.add_argument("--start", type=int, default=start, help="first position of the submatrix shown")
    p.add_argument("--size", type=int, default=size, help="side of the submatrix shown (the post: 50)")


def submatrix(m: torch.Tensor, args) -> torch.Tensor:
    e = min(args.start + args.size, m.shape[0])
    return m[args.start : e, args.start : e]


def gpt2_experiment(args, script_file: str):
    """The set-up of a GPT-2 experiment: ``(output, model, prompts, prompt source, heads)``."""
    out = Output.from_args(args, script_file)
    model = model_from_args(args)
    prompts, source = corpus_prompts(model, args)
    return out, model, prompts, source, resolve_heads(model, args.heads, prompts)
