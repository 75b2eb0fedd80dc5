"""Averaging extended positional embeddings in groups of 10 hurts early previous-token heads much more
than the aggregator (GPT-2 post: L4H11 aggregates earlier heads' signals rather than reading positions).

    gpt2-posheads ext_pos_averaging --model mini-gpt2
    gpt2-posheads ext_pos_averaging --heads L2H2,L4H11          # the post's pair

For each head, the extended positional embeddings at the head's own layer (measured after BOS, as the prompts
start with it; the BOS row is left alone) are group-averaged just before it, and its attention is compared with
the clean run. The post's claim has two parts, both tested: "tremendous damage" to the early head (its pattern
moves) and "minimal damage" to the aggregator (it keeps its previous-token attention). Default heads on a model
other than GPT-2 small: the sharpest clear previous-token head below the aggregator, then the aggregator (its
sharpest previous-token head). Not testable unless both are clear previous-token heads and the first sits below
the second.
"""

from gpt2_posheads.analysis.interventions import average_ext_pos_embed
from gpt2_posheads.analysis.measures import compare_head_patterns
from gpt2_posheads.claims.gpt2_post import judge_claim, prev_head_precondition
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.cli import (
    HeadDefault,
    add_heads_arg,
    add_prompt_args,
    add_submatrix_args,
    experiment_parser,
    positive,
    setup,
    submatrix,
)
from gpt2_posheads.report.plotting import attention_panels

HEADS = HeadDefault(
    ("L2H2", "L4H11"),
    "aggregator+early",
    what="an early head and the aggregator (each averaged just before its own layer)",
)


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=256)
    add_heads_arg(p, HEADS)
    p.add_argument("--group-size", type=int, default=10, help="rows averaged together")
    p.add_argument("--ext-prompts", type=int, default=16, help="repeated-token prompts for the extended embeddings")
    add_submatrix_args(p)
    args = p.parse_args(argv)
    positive("--group-size", args.group_size, 2)
    positive("--ext-prompts", args.ext_prompts)
    exp = setup(args, __file__, heads=HEADS)
    model, prompts, out = exp.model, exp.prompts, exp.out
    positive("--group-size", args.group_size, 2, model.cfg.n_ctx)
    tokens = [model.tokenizer.decode([int(t)]) for t in prompts[0]]
    results, panels, start = [], {}, 0
    for (l, h), name in zip(exp.heads, exp.head_names):
        hooks = average_ext_pos_embed(l, args.group_size, n_prompts=args.ext_prompts, seed=args.seed).hooks(model)
        cmp = compare_head_patterns(model, prompts, (l, h), hooks)
        panels[f"{name} clean"], start = submatrix(cmp.pop("clean"), args.start, args.size)
        panels[f"{name} ext. pos. averaged (g={args.group_size})"], _ = submatrix(
            cmp.pop("intervened"), args.start, args.size
        )
        results.append({"head": name, "layer": l, **cmp})
        print(
            f"{name}: previous-token mass {cmp['prev_score_clean']:.3f} -> {cmp['prev_score_intervened']:.3f}, "
            f"JS {cmp['js_divergence']:.4f}"
        )
    out.figure(
        attention_panels(
            panels,
            tokens,
            start,
            exp.label,
            "extended positional embeddings averaged just before each head",
            exp.source,
        ),
        "ext_pos_averaging",
        width=1100,
    )
    first, last = results[0], results[-1]
    keep = last["prev_score_intervened"] / last["prev_score_clean"] if last["prev_score_clean"] > 0 else float("nan")
    pre = [
        Precondition(
            "two heads: an early one and the aggregator",
            len(results) >= 2,
            f"only {results[0]['head']}: the model has no previous-token head below it",
        )
    ]
    pre += [prev_head_precondition(n, exp.diag[l, h]) for (l, h), n in zip(exp.heads, exp.head_names)]
    if len(results) >= 2:  # with one head the first line already says there is no early head
        pre.append(
            Precondition(
                "the early head sits below the aggregator",
                first["layer"] < last["layer"],
                f"{first['head']} (layer {first['layer']}) does not sit below {last['head']} (layer {last['layer']})",
            )
        )
    claims = [
        judge_claim(
            "ext_avg_hurts_early_more",
            {
                "js": {r["head"]: r["js_divergence"] for r in results},
                "prev_mass": {r["head"]: [r["prev_score_clean"], r["prev_score_intervened"]] for r in results},
            },
            value=(first["js_divergence"], last["js_divergence"], keep),
            preconditions=pre,
            head=",".join(exp.head_names),
            shown=f"JS {first['js_divergence']:.3g} ({first['head']}) vs {last['js_divergence']:.3g} ({last['head']}, "
            f"keeps {keep:.0%})"
            if len(results) >= 2
            else "",
        )
    ]
    out.summary({**exp.describe(), "group_size": args.group_size, "results": results}, claims)
    out.commit()
