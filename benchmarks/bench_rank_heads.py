"""Ranking all heads of a GPT-2-small-shaped model: ours vs TransformerLens's head detector.

    python benchmarks/bench_rank_heads.py [--n-prompts 16] [--seq-len 256]

Both read the same 16 prompts of 256 tokens on a random 12x12, d_model-768 model. The baseline is
``head_detector.detect_head(model, prompts, "previous_token_head")`` (one ``run_with_cache`` per
prompt). Each side runs in its own process so peak memory is measured per side; ours also runs with
4x the prompts to show its peak memory does not grow with the number of prompts.
"""
import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch  # noqa: E402

from _common import gpt2_shaped_dir, peak_rss_mb, run_worker  # noqa: E402


def prompts_text(model, n, seq_len, seed=0):
    from gpt2_posheads.prompts import make_prompts

    toks = make_prompts(model.tokenizer, n, seq_len, source="wikitext", seed=seed, prepend_bos=False)
    return [model.tokenizer.decode(t) for t in toks]


def worker(which: str, n_prompts: int, seq_len: int):
    from gpt2_posheads import load_model, rank_prev_heads

    torch.set_num_threads(2)
    model = load_model(gpt2_shaped_dir(), device="cpu")
    texts = prompts_text(model, n_prompts, seq_len)
    toks = [model.to_tokens(t)[0][:seq_len] for t in texts]
    base_rss = peak_rss_mb()
    t = time.perf_counter()
    if which.startswith("ours"):
        rank_prev_heads(model, toks, max_offset=32, batch_size=4, progress=False, bf16=which == "ours-bf16")
    else:
        from transformer_lens.head_detector import detect_head

        with torch.inference_mode():
            detect_head(model, texts, "previous_token_head")
    elapsed = time.perf_counter() - t
    print(json.dumps({"which": which, "n_prompts": n_prompts, "seconds": elapsed,
                      "peak_rss_mb": peak_rss_mb(), "rss_after_load_mb": base_rss}))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--worker", default=None)
    p.add_argument("--n-prompts", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=256)
    a = p.parse_args()
    if a.worker:
        return worker(a.worker, a.n_prompts, a.seq_len)
    gpt2_shaped_dir()
    args = ["--n-prompts", str(a.n_prompts), "--seq-len", str(a.seq_len)]
    ours = run_worker(__file__, ["ours", *args])
    base = run_worker(__file__, ["baseline", *args])
    ours_bf16 = run_worker(__file__, ["ours-bf16", *args])
    ours4 = run_worker(__file__, ["ours", "--n-prompts", str(4 * a.n_prompts), "--seq-len", str(a.seq_len)])
    print(f"{a.n_prompts} prompts x {a.seq_len} tokens, 12 layers x 12 heads, d_model 768, CPU threads 2")
    print(f"  head_detector baseline : {base['seconds']:7.2f} s   peak RSS {base['peak_rss_mb']:7.0f} MB")
    print(f"  rank_prev_heads (ours) : {ours['seconds']:7.2f} s   peak RSS {ours['peak_rss_mb']:7.0f} MB")
    print(f"  ours, bf16 autocast    : {ours_bf16['seconds']:7.2f} s   peak RSS {ours_bf16['peak_rss_mb']:7.0f} MB")
    print(f"  ours, {4 * a.n_prompts} prompts       : {ours4['seconds']:7.2f} s   peak RSS {ours4['peak_rss_mb']:7.0f} MB")
    print(f"speed-up vs head_detector: {base['seconds'] / ours['seconds']:.1f}x float32, "
          f"{base['seconds'] / ours_bf16['seconds']:.1f}x bf16 autocast (target >= 5x)")
    print(f"peak memory growth for 4x prompts: {ours4['peak_rss_mb'] - ours['peak_rss_mb']:+.0f} MB")


if __name__ == "__main__":
    main()
