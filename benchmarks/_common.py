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
    return fastest(fn, repeats)


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


def matmul_floor(d: int, L: int, n_tokens: int, rows: int) -> None:
    """The float32 weight matmuls of one ranking pass on random activations, ``rows`` tokens at a time: QKV of
    every layer, W_O and the MLP of all but the last (the last layer's pattern is all the ranking reads). No exact
    float32 pass can do less matrix work."""
    import torch
    import torch.nn.functional as F

    x, h = torch.randn(rows, d), torch.randn(rows, 4 * d)
    w_qkv, w_o, w_in, w_out = torch.randn(3 * d, d), torch.randn(d, d), torch.randn(4 * d, d), torch.randn(d, 4 * d)
    with torch.inference_mode():
        for _ in range(n_tokens // rows):
            for layer in range(L):
                F.linear(x, w_qkv)
                if layer < L - 1:
                    F.linear(x, w_o), F.linear(x, w_in), F.linear(h, w_out)


def pattern_work(d: int, L: int, H: int, n_prompts: int, n: int, batch: int, n_offsets: int) -> None:
    """The float32 work besides the weight matmuls that a ranking pass cannot skip, on random activations, ``batch``
    prompts of ``n`` tokens at a time, each part as the fast path does it (the cheapest torch way we know; buffers
    reused, from ``CAUSAL_BLOCKS_FROM`` positions on blocks of query rows against the keys they see):

    * every layer: the pattern, ``softmax(q kᵀ * scale + causal mask)`` of every head (``FastGPT2._pattern``), and
      the sums of its first ``n_offsets`` diagonals (``diagonal_sums``: what the ranking reads);
    * all but the last layer: the pattern times the values (``FastGPT2._attend``), and GPT-2's tanh GELU on the MLP's
      ``[batch * n, 4 d]`` hidden activations (the fast path's sigmoid form, in cache-sized chunks of 128 rows).

    LayerNorm, residual adds, biases and head-major copies are left out, so any exact pass built from these
    primitives spends more than this."""
    import torch

    from gpt2_posheads.analysis.diagonals import diagonal_sums
    from gpt2_posheads.model.engine_fast import FastGPT2, Workspace, gelu_tanh_

    dh = d // H
    q, k, v = (torch.randn(batch * H, n, dh) for _ in range(3))
    ws = Workspace()
    # one fresh hidden activation per batch, overwritten in place by each layer's GELU as the pass overwrites its
    # own: repeated GELUs halve negative values, so one buffer through hundreds of layers would sink into
    # denormals (many times slower arithmetic) that no real pass meets
    hiddens = [torch.randn(batch * n, 4 * d) for _ in range(n_prompts // batch)]
    with torch.inference_mode():
        for hidden in hiddens:
            for layer in range(L):
                pattern = FastGPT2._pattern(q, k, dh**-0.5, ws)
                diagonal_sums(pattern.view(batch, H, n, n), n_offsets, exclude_bos=True)
                if layer < L - 1:
                    FastGPT2._attend(pattern, v)
                    for i in range(0, batch * n, 128):
                        gelu_tanh_(hidden[i : i + 128])


def fastest(fn, calls: int) -> float:
    """The fastest of ``calls`` calls of ``fn`` (seconds)."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
