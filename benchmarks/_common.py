"""Helpers shared by the benchmarks: a GPT-2-small-shaped random model and timing."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GPT2_SHAPE = dict(n_layers=12, n_heads=12, d_model=768)


def gpt2_shaped_dir(n_ctx: int = 1024, tokenizer_dir: str | None = None) -> Path:
    """A random 12-layer, 12-head, d_model-768 GPT-2 directory, built once per machine in the temp dir.

    Uses the mini model's tokenizer (the shipped mini-gpt2) when present, else GPT-2's from shared/; the
    vocabulary size does not enter what the benchmarks time except through the unembedding.
    """
    from gpt2_posheads import gpt2_tokenizer, make_random_model_dir
    from gpt2_posheads.model.paths import ORGANISM_DIR, shared_dir

    out = Path(tempfile.gettempdir()) / f"gpt2_posheads_bench_gpt2shape_{n_ctx}"
    if (out / "model.safetensors").exists():
        return out
    mini = ORGANISM_DIR
    if shared_dir() is not None:
        tok = gpt2_tokenizer()  # the real 50k vocabulary: the unembedding costs what GPT-2's does
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(mini)
    return make_random_model_dir(out, n_ctx=n_ctx, tokenizer=tok, **GPT2_SHAPE)


def best_time(fn, repeats: int = 3) -> float:
    """Best wall time of ``repeats`` calls (after one warm-up call)."""
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_worker(script: str, args: list[str]) -> dict:
    """Run ``script --worker ...`` in a fresh process (so peak memory is its own) and parse its JSON."""
    out = subprocess.run(
        [sys.executable, script, "--worker", *args],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TQDM_DISABLE": "1"},
    )
    return json.loads(out.stdout.strip().splitlines()[-1])
