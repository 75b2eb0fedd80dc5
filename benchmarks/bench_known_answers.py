"""The route conclusion scored on generated known-answer models: confusion matrix and aggregator-found rate.

    python benchmarks/bench_known_answers.py                       # 8 models, one of each kind
    python benchmarks/bench_known_answers.py --n 40 --json out.json
    python benchmarks/bench_known_answers.py --n 8 --keep models/  # keep the folders (README.md, card.json: answers)

Generates ``--n`` compiled GPT-2s (``gpt2_posheads.organism.generator.suite``: model i has kind i mod 8 and seed
1000 x seed + i), measures each model's route conclusion on 4 WikiText-2 prompts of 256 tokens (the post's claim
functions on one run: ``gpt2_posheads.posts.gpt2_prev_heads.route``), and prints the confusion matrix (true route x
concluded route), how often the toolkit's sharpest previous-token head is the card's aggregator, every model off the
diagonal with the rows that decided it, and the wall time. An accuracy benchmark, not a speed one: the time is
printed for the record (docs/known-answers.md). To score another tool, keep the folders and hand it each folder
without README.md and card.json; card.json holds the answer.
"""

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def weight_report(scored) -> str:
    """The weight route against the built truth and against the causal conclusion (each route as the weight label
    it means, :data:`~gpt2_posheads.claims.route.ROUTE_LABELS`; ambiguous models and
    undetermined conclusions apart), with the agreement and each model off the diagonal."""
    from gpt2_posheads.claims.route import LABELS, ROUTE_LABELS
    from gpt2_posheads.organism.route_bench import label_confusion

    lines = []
    for what, expected in (("built truth", lambda s: s.route), ("causal conclusion", lambda s: s.concluded)):
        pairs = [(ROUTE_LABELS[expected(s)], s.weight) for s in scored]
        judged = [(e, g) for e, g in pairs if e is not None]
        agree = sum(e == g for e, g in judged)
        m = label_confusion(judged, LABELS)
        lines += [f"weights vs {what}: {agree} of {len(judged)} agree ({len(pairs) - len(judged)} without one label)"]
        lines += ["", m.to_string(), ""]
    off = [s for s in scored if ROUTE_LABELS[s.route] not in (None, s.weight)]
    lines += [f"  {s.name} ({s.kind}): true {s.route}, weights {s.weight} ({s.weight_head})" for s in off]
    for s in scored:
        if s.route == "undetermined":
            lines.append(f"  {s.name} ({s.kind}, ambiguous by construction): weights {s.weight} ({s.weight_head})")
    causal = sum(s.causal_seconds for s in scored)
    weights = sum(s.weight_seconds for s in scored)
    lines.append(
        f"\ntime per model: causal {causal / len(scored):.1f} s, weights {weights / len(scored):.2f} s "
        f"(ratio {weights / causal:.3f})"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=8, help="number of generated models (default 8: one of each kind)")
    p.add_argument("--seed", type=int, default=0, help="suite seed (model i has seed 1000 x seed + i)")
    p.add_argument("--max-d-model", type=int, default=None, help="draw layouts with d_model <= this (default: all)")
    p.add_argument("--n-prompts", type=int, default=4, help="WikiText-2 prompts per model")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per prompt (<= 256)")
    p.add_argument("--keep", default=None, help="write the model folders here and keep them")
    p.add_argument("--json", default=None, help="write every model's card answer and conclusion here")
    args = p.parse_args(argv)
    for name, v, lo, hi in (
        ("--n", args.n, 1, 10_000),
        ("--n-prompts", args.n_prompts, 1, 64),
        ("--seq-len", args.seq_len, 32, 256),
        ("--seed", args.seed, 0, 10**6),
    ):
        if not lo <= v <= hi:
            print(f"error: {name}: {v} is out of range; allowed {lo}..{hi}", file=sys.stderr)
            return 2

    from gpt2_posheads.organism.generator import member
    from gpt2_posheads.organism.route_bench import report, score
    from gpt2_posheads.posts.gpt2_prev_heads.route import route_records
    from gpt2_posheads.posts.gpt2_prev_heads.weight_route import measure as weight_measure

    weigh = lambda model: weight_measure(model)["record"]  # noqa: E731

    start = time.perf_counter()
    scored = []
    with tempfile.TemporaryDirectory(prefix="known-answers-") as tmp:
        work = Path(args.keep) if args.keep else Path(tmp)
        for i in range(args.n):
            g = member(i, args.seed, args.max_d_model)
            s = score(g, work, args.n_prompts, args.seq_len, keep=bool(args.keep), measure=route_records, weigh=weigh)
            scored.append(s)
            mark = "ok" if s.right and s.aggregator_right else "OFF"
            print(
                f"{s.name} {s.kind:>11}: true {s.route:>12}, concluded {s.concluded:>12}; aggregator "
                f"{s.aggregator} found {s.found} [{mark}]; weights: {s.weight} ({s.weight_head}) "
                f"({s.seconds:.1f} s; causal {s.causal_seconds:.1f} s, weights {s.weight_seconds:.1f} s)",
                flush=True,
            )
    total = time.perf_counter() - start
    print()
    print(report(scored))
    print()
    print(weight_report(scored))
    print(f"\n{args.n} models in {total:.0f} s wall ({total / args.n:.1f} s per model: build, write, load, measure)")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"seconds": total, "models": [s.as_dict() for s in scored]}, indent=2) + "\n", encoding="utf-8"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
