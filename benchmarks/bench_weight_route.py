"""The route read from the weights against the causal route conclusion: time per model, as a ratio, in one run.

    python benchmarks/bench_weight_route.py                            # the five compiled models
    python benchmarks/bench_weight_route.py --models route-gpt2 --generated 8

Each model is loaded once; then, on the same warm model, the weight route
(``gpt2_posheads.posts.gpt2_prev_heads.weight_route.measure``: every head's direct and composed circuit, the
sharpest head's label and its upstream contributions) and the causal route conclusion (the post's claim functions on
one run of 4 WikiText-2 prompts of 256 tokens, ``posts.gpt2_prev_heads.route.route_records``, and
``claims.route.conclude``: what ``bench_known_answers`` measures) are timed, each twice, the faster kept. Prints
each model's two times, both labels, and the ratio of the summed times (weights / causal). ``--generated N`` adds
the first N generated known-answer models (``organism.generator.member``). Figures: docs/known-answers.md.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

COMPILED = ("route-gpt2", "lookalike-wpos", "lookalike-boost", "lookalike-decoy", "lookalike-none")


def fastest(fn, *args, repeats: int = 2):
    """``(fn(*args), best wall time)`` of ``repeats`` calls."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn(*args)
        best = min(best, time.perf_counter() - t0)
    return out, best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(COMPILED), help="comma-separated model names or folders")
    p.add_argument("--generated", type=int, default=0, help="also the first N generated known-answer models")
    args = p.parse_args(argv)
    if not 0 <= args.generated <= 1000:
        print(f"error: --generated: {args.generated} is out of range; allowed 0..1000", file=sys.stderr)
        return 2

    from gpt2_posheads.claims.route import conclude
    from gpt2_posheads.model.loading import load_model
    from gpt2_posheads.organism.generator import member, write
    from gpt2_posheads.organism.route_bench import N_PATTERN_PROMPTS, prompts_for
    from gpt2_posheads.posts.gpt2_prev_heads.route import route_records
    from gpt2_posheads.posts.gpt2_prev_heads.weight_route import measure

    def weights(model):
        return measure(model)["record"]

    def causal(model, prompts):
        return conclude(route_records(model, prompts, n_pattern_prompts=N_PATTERN_PROMPTS))

    with tempfile.TemporaryDirectory(prefix="weight-route-") as tmp:
        sources = [m for m in args.models.split(",") if m]
        sources += [write(member(i), Path(tmp) / member(i).name) for i in range(args.generated)]
        t_w = t_c = 0.0
        for src in sources:
            model = load_model(src, device="cpu")
            record, tw = fastest(weights, model)
            c, tc = fastest(causal, model, prompts_for(model.tokenizer))
            t_w, t_c = t_w + tw, t_c + tc
            name = Path(str(src)).name
            print(
                f"{name:>24}: weights {tw:6.2f} s ({record['label']}, {record['head']}); causal {tc:6.1f} s ({c.route})"
            )
    n = len(sources)
    print(f"\n{n} models: weights {t_w / n:.2f} s per model, causal {t_c / n:.1f} s per model; ratio {t_w / t_c:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
