"""Averaging extended positional embeddings in groups of 10 hurts L2H2 much more than L4H11
(GPT-2 post: L4H11 aggregates earlier heads' signals rather than reading positions itself).

    python experiments/ext_pos_averaging.py --model-dir data/mini-gpt2 --heads auto:2

For each head, the extended positional embeddings at the head's own layer are group-averaged just
before it, and its attention is compared with the clean run.
"""
from gpt2_posheads.cli import (add_heads_arg, add_prompt_args, add_submatrix_args, experiment_parser, gpt2_experiment,
                               model_label, submatrix)
from gpt2_posheads.interventions import average_ext_pos_embed
from gpt2_posheads.measures import compare_head_patterns
from gpt2_posheads.plotting import heatmap_grid
from gpt2_posheads.validation import head_name


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=256)
    add_heads_arg(p, "L2H2,L4H11", "heads to compare (each averaged just before its own layer)")
    p.add_argument("--group-size", type=int, default=10)
    p.add_argument("--ext-prompts", type=int, default=16, help="repeated-token prompts for the extended embeddings")
    add_submatrix_args(p)
    args = p.parse_args(argv)
    out, model, prompts, source, heads = gpt2_experiment(args, __file__)
    results, panels = [], {}
    for l, h in heads:
        hooks = average_ext_pos_embed(l, args.group_size, n_prompts=args.ext_prompts, seed=args.seed).hooks(model)
        cmp = compare_head_patterns(model, prompts, (l, h), hooks)
        panels[f"{head_name(l, h)} clean"] = submatrix(cmp.pop("clean"), args)
        panels[f"{head_name(l, h)} ext. pos. averaged (g={args.group_size})"] = submatrix(cmp.pop("intervened"), args)
        res = {"head": head_name(l, h), "layer": l, **cmp}
        results.append(res)
        print(res)
    out.figure(heatmap_grid(panels, cols=2, title=f"{model_label(args)}: averaging extended positional embeddings",
                            x0=args.start, y0=args.start), "ext_pos_averaging", width=1100)
    claim = None
    if len(results) >= 2:
        first, last = results[0], results[-1]
        claim = {"post": f"{first['head']} damaged much more than {last['head']}",
                 "measured_js": {first["head"]: first["js_divergence"], last["head"]: last["js_divergence"]},
                 "held": first["js_divergence"] > 2 * last["js_divergence"]}
    out.summary({"model": model_label(args), "prompt_source": source, "n_prompts": len(prompts),
                 "group_size": args.group_size, "results": results, "claim": claim})
    out.report()


if __name__ == "__main__":
    main()
