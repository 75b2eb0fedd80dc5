"""Averaging extended positional embeddings in groups of 10 hurts L2H2 much more than L4H11
(GPT-2 post: L4H11 aggregates earlier heads' signals rather than reading positions itself).

    python experiments/ext_pos_averaging.py --model-dir data/mini-gpt2 --heads auto:2

For each head, the extended positional embeddings at the head's own layer are group-averaged just
before it, and its attention is compared with the clean run.
"""
from gpt2_posheads.cli import (Output, add_heads_arg, add_prompt_args, corpus_prompts, experiment_parser,
                               model_from_args, model_label, resolve_heads)
from gpt2_posheads.interventions import average_ext_pos_embed
from gpt2_posheads.measures import head_patterns, pattern_distance, prev_token_score
from gpt2_posheads.plotting import heatmap_grid
from gpt2_posheads.validation import head_name


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=256)
    add_heads_arg(p, "L2H2,L4H11", "heads to compare (each averaged just before its own layer)")
    p.add_argument("--group-size", type=int, default=10)
    p.add_argument("--ext-prompts", type=int, default=16, help="repeated-token prompts for the extended embeddings")
    p.add_argument("--start", type=int, default=60)
    p.add_argument("--size", type=int, default=50)
    args = p.parse_args(argv)
    out = Output.from_args(args, __file__)
    model = model_from_args(args)
    prompts, source = corpus_prompts(model, args)
    heads = resolve_heads(model, args.heads, prompts)
    results, panels = [], {}
    for l, h in heads:
        hooks = average_ext_pos_embed(l, args.group_size, n_prompts=args.ext_prompts, seed=args.seed).hooks(model)
        cs, ms, ds = [], [], []
        for i, prompt in enumerate(prompts):
            clean = head_patterns(model, prompt, [(l, h)])[(l, h)]
            avg = head_patterns(model, prompt, [(l, h)], hooks)[(l, h)]
            cs.append(prev_token_score(clean))
            ms.append(prev_token_score(avg))
            ds.append(pattern_distance(clean, avg))
            if i == 0:
                s, e = args.start, min(args.start + args.size, clean.shape[0])
                panels[f"{head_name(l, h)} clean"] = clean[s:e, s:e]
                panels[f"{head_name(l, h)} ext. pos. averaged (g={args.group_size})"] = avg[s:e, s:e]
        n = len(prompts)
        res = {"head": head_name(l, h), "layer": l, "prev_score_clean": sum(cs) / n, "prev_score_averaged": sum(ms) / n,
               "js_divergence": sum(d["js_divergence"] for d in ds) / n,
               "mean_abs_diff": sum(d["mean_abs_diff"] for d in ds) / n}
        res["relative_drop"] = 1 - res["prev_score_averaged"] / max(res["prev_score_clean"], 1e-12)
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
