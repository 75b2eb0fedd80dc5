"""Ranking all heads of a GPT-2-small-shaped model: ours vs TransformerLens's head detector.

    python benchmarks/bench_rank_heads.py [--n-prompts 16] [--seq-len 256] [--full] [--verdicts]

Both read the same 16 prompts of 256 tokens on a random 12x12, d_model-768 model. The baseline is
``head_detector.detect_head(model, prompts, "previous_token_head")`` (one ``run_with_cache`` per
prompt). Each variant runs in its own process so peak memory is measured per variant; ours also runs
with 4x the prompts to show its peak memory does not grow with the number of prompts.

The default run times the baseline, our hook-free fast path in float32 (and in bfloat16 where the CPU has
native bfloat16 units) and the floor: only the float32 weight matmuls any exact method must do (the weights'
FLOPs for 16 x 256 tokens). ``--full`` adds our pass through TransformerLens hooks and a run with 4x the
prompts (peak memory must not grow). The ratio to the floor is printed against the floor's fastest call.

``--verdicts`` (on a CPU with native bfloat16 units: AMX or AVX512-BF16) shows what ``--bf16`` changes: the ranking
claim of every shipped model on the main job's prompts (64 x 256 tokens), in float32 and in bfloat16 — each claim's
verdict both ways (for bfloat16, what the rules say of its masses: the claim itself reports them not testable), the
largest difference of a head's diagonal masses, whether the eleven first heads keep their order, and the two times.
Figures, one column per machine: docs/benchmarks.md.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import torch  # noqa: E402
from _common import GPT2_SHAPE, gpt2_shaped_dir, matmul_floor, pattern_work, peak_rss_mb, run_worker  # noqa: E402


def prompts_text(model, n, seq_len, seed=0):
    from gpt2_posheads.analysis.prompts import make_prompts

    toks = make_prompts(model.tokenizer, n, seq_len, source="wikitext", seed=seed, prepend_bos=False)
    return [model.tokenizer.decode(t) for t in toks]


def worker(which: str, n_prompts: int, seq_len: int):
    from gpt2_posheads import load_model, prev_token_ranking

    torch.set_num_threads(2)
    d, L, H = GPT2_SHAPE["d_model"], GPT2_SHAPE["n_layers"], GPT2_SHAPE["n_heads"]
    if which == "floor":  # needs the shape only: no model to load

        def job():
            matmul_floor(d, L, n_prompts * seq_len, rows=n_prompts * seq_len)

        return _time_job(which, n_prompts, job, calls=FLOOR_CALLS, base_rss=peak_rss_mb())
    if which == "pattern":  # the attention, GELU and diagonal sums beside the floor, in the ranking's batches

        def job():
            pattern_work(d, L, H, n_prompts, seq_len, batch=RANKING_BATCH, n_offsets=MAX_OFFSET + 1)

        return _time_job(which, n_prompts, job, calls=FLOOR_CALLS, base_rss=peak_rss_mb())
    model = load_model(gpt2_shaped_dir(), device="cpu")
    texts = prompts_text(model, n_prompts, seq_len)
    toks = [model.to_tokens(t)[0][:seq_len] for t in texts]
    base_rss = peak_rss_mb()
    if which.startswith("ours"):
        _, engine, precision = which.split("-")

        def job():
            bf16 = precision == "bf16"
            kw = dict(max_offset=MAX_OFFSET, batch_size=RANKING_BATCH, progress=False, engine=engine)
            prev_token_ranking(model, toks, bf16=bf16, **kw)
    else:
        from transformer_lens.head_detector import detect_head

        def job():
            with torch.inference_mode():
                detect_head(model, texts, "previous_token_head")

    # the baseline keeps no state between calls (its two calls measured 15.2 and 16.0 s), so one call
    # stands for both columns and saves a quarter of the run
    return _time_job(which, n_prompts, job, calls=1 if which == "baseline" else CALLS, base_rss=base_rss)


# Single calls of the same work vary by +-10% on a shared 2-core VM (four in-process calls of the fast
# path: 5.10-6.87 s; first calls in three fresh processes 5.89-7.17 s), more than the one-time set-up
# being measured (0.26-0.32 s: weights gathered, self-check). So the fast path runs in PROCESSES fresh
# processes of CALLS calls each, the floor in one of FLOOR_CALLS, and every figure is the best of its
# kind: cold = the fastest first call, warm = the fastest later call, floor = its fastest call.
CALLS, PROCESSES, FLOOR_CALLS = 2, 2, 3
RANKING_BATCH, MAX_OFFSET = 4, 32  # prompts per forward pass of the ranking; the diagonals it reads: offsets 0..32


def _time_job(which: str, n_prompts: int, job, calls: int, base_rss: float) -> None:
    """Print the worker's JSON line. cold: the first call in a fresh process (one-time set-up such as the
    fast path's check included); warm: the fastest later call (the cold time when ``calls`` is 1)."""
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        job()
        times.append(time.perf_counter() - t)
    print(
        json.dumps(
            {
                "which": which,
                "n_prompts": n_prompts,
                "seconds": times[0],
                "warm_seconds": min(times[1:] or times),
                "peak_rss_mb": peak_rss_mb(),
                "rss_after_load_mb": base_rss,
            }
        )
    )


def best_of(results: list[dict]) -> dict:
    """Workers' JSON lines combined: the fastest cold and warm times, the largest peak memory."""
    return {
        **results[0],
        "seconds": min(r["seconds"] for r in results),
        "warm_seconds": min(r["warm_seconds"] for r in results),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        "processes": len(results),
    }


def verdicts() -> None:
    """Every shipped model's ranking claim in float32 and in bfloat16 on the main job's prompts (``--verdicts``)."""
    from gpt2_posheads import load_model
    from gpt2_posheads.model.paths import SHIPPED_MODELS
    from gpt2_posheads.posts.gpt2_prev_heads import model_run
    from gpt2_posheads.posts.gpt2_prev_heads.ranking import judge, rank_prev_heads

    changed = 0
    for name in SHIPPED_MODELS:
        run = model_run(load_model(name, device="cpu"), n_prompts=64, seq_len=256)
        got = {}
        for bf16 in (False, True):
            started = time.perf_counter()
            got[bf16] = rank_prev_heads(run=run, bf16=bf16, progress=False)
            got[bf16].seconds = time.perf_counter() - started
        a, b = got[False], got[True]
        ra, rb = (r.tables["ranking"].set_index("name") for r in (a, b))
        cols = ["prev_mass", "top_mass", "second_mass"]
        gap = float((ra[cols] - rb.loc[ra.index, cols]).abs().max().max())
        order = list(ra.index[:11]) == list(rb.index[:11])
        print(
            f"  {name}: float32 {a.seconds:.1f} s, bfloat16 {b.seconds:.1f} s ({a.seconds / b.seconds:.1f}x); largest "
            f"difference of a head's previous, greatest or second diagonal mass {gap:.1e}; the first 11 heads in the "
            f"same order: {order}"
        )
        # the bfloat16 run's claims are not testable (the rules judge float32 masses): what the rules would say
        for ca, cb in zip(a.claims, judge(b.tables["ranking"])):
            same = ca.verdict == cb.verdict
            changed += not same
            flag = "" if same else "  <- differs"
            print(f"    {ca.key:24s} float32 {ca.verdict:12s} bfloat16 {cb.verdict:12s}{flag}")
    print(f"verdicts that differ between float32 and bfloat16: {changed}")


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--worker", default=None)
    p.add_argument("--n-prompts", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument(
        "--full",
        action="store_true",
        help="also time our pass through TransformerLens hooks and "
        "check peak memory with 4x the prompts (about twice as long)",
    )
    p.add_argument("--verdicts", action="store_true", help="what --bf16 changes on the shipped models' rankings")
    a = p.parse_args()
    if a.worker:
        return worker(a.worker, a.n_prompts, a.seq_len)
    from gpt2_posheads.model.state import bf16_native, describe_line

    started = time.perf_counter()
    print(describe_line())
    if a.verdicts:
        if not bf16_native("cpu"):
            sys.exit("--verdicts: this CPU has no native bfloat16 units (AMX or AVX512-BF16); --bf16 runs float32 here")
        return verdicts()
    gpt2_shaped_dir()
    args = ["--n-prompts", str(a.n_prompts), "--seq-len", str(a.seq_len)]
    base = run_worker(__file__, ["baseline", *args])
    variants = ["ours-auto-fp32"] + (["ours-hooks-fp32"] if a.full else [])
    if bf16_native("cpu"):
        variants.insert(1, "ours-auto-bf16")
    else:
        print(
            "  (bfloat16 variant skipped: this CPU has no native bfloat16 units, where it ran >= 85x slower; "
            "--bf16 falls back to float32 here)"
        )
    runs = {
        w: best_of([run_worker(__file__, [w, *args]) for _ in range(PROCESSES if w == "ours-auto-fp32" else 1)])
        for w in variants
    }
    floor = run_worker(__file__, ["floor", *args])
    pattern = run_worker(__file__, ["pattern", *args])
    ours4 = (
        run_worker(__file__, ["ours-auto-fp32", "--n-prompts", str(4 * a.n_prompts), "--seq-len", str(a.seq_len)])
        if a.full
        else None
    )
    print(
        f"{a.n_prompts} prompts x {a.seq_len} tokens, 12 layers x 12 heads, d_model 768, "
        f"CPU threads {torch.get_num_threads()}"
    )
    labels = {
        "ours-auto-fp32": "ours, fast path, float32",
        "ours-auto-bf16": "ours, fast path, bfloat16",
        "ours-hooks-fp32": "ours, TL hooks, float32",
    }
    print(f"  {'':28s}   cold (1st call)  warm (later call)  peak RSS   (fast path: best of {PROCESSES} processes)")

    def row(label: str, r: dict) -> str:
        return (
            f"  {label:28s}: {r['seconds']:6.2f} s {base['seconds'] / r['seconds']:5.1f}x"
            f"  {r['warm_seconds']:6.2f} s {base['warm_seconds'] / r['warm_seconds']:5.1f}x"
            f"   {r['peak_rss_mb']:6.0f} MB"
        )

    print(row("head_detector baseline", base))
    for w, r in runs.items():
        print(row(labels[w], r))
    print(row("float32 matmuls alone", floor) + "   (the float32 floor of any exact method)")
    fast = runs["ours-auto-fp32"]
    # the floor's calls differ by up to 30% on a shared 2-core machine: judge against its fastest
    best_floor = min(floor["seconds"], floor["warm_seconds"])
    print(
        f"  fast path / floor (the floor's fastest call, {best_floor:.2f} s): "
        f"{fast['seconds'] / best_floor:.2f}x cold, "
        f"{fast['warm_seconds'] / best_floor:.2f}x warm (target <= 1.10x)"
    )
    # what the floor leaves out but no pass that writes the patterns can skip: the ratio no exact pass goes below
    must = min(pattern["seconds"], pattern["warm_seconds"])
    print(
        f"  the attention (scores, causal softmax, pattern x values), GELU and diagonal sums of the same pass alone: "
        f"{must:.2f} s; floor + that = {(best_floor + must) / best_floor:.2f}x the floor (LayerNorm, biases and "
        "residual adds left out: an exact pass written with torch's primitives takes longer)"
    )
    if ours4 is not None:
        print(
            f"  {f'ours, float32, {4 * a.n_prompts} prompts':28s}: peak RSS {ours4['peak_rss_mb']:6.0f} MB   "
            f"(growth for 4x prompts: {ours4['peak_rss_mb'] - fast['peak_rss_mb']:+.0f} MB)"
        )
    print("speed-up = baseline time / time (target >= 5x)")
    print(f"whole benchmark: {time.perf_counter() - started:.0f} s (model build, loads and every process included)")


if __name__ == "__main__":
    main()
