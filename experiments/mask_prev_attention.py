"""Masking attention to the previous position in early layers disrupts L4H11 (GPT-2 post).

    python experiments/mask_prev_attention.py --model-dir data/mini-gpt2 --heads auto:1 --layers 0,1

Every query p with p % every == 0 loses its attention to p-1 in every head of --layers (post-softmax);
the W_pos matrix is untouched. Side by side: the head's 50x50 pattern submatrix clean vs masked.
"""
from gpt2_posheads.cli import (add_heads_arg, add_prompt_args, add_submatrix_args, experiment_parser, gpt2_experiment,
                               model_label, submatrix)
from gpt2_posheads.interventions import mask_previous_attention
from gpt2_posheads.measures import compare_head_patterns
from gpt2_posheads.plotting import heatmap_grid
from gpt2_posheads.validation import head_name


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=256)
    add_heads_arg(p, "L4H11", "head(s) whose pattern is shown")
    p.add_argument("--layers", default=None, help="layers to mask (default: every layer below the head's)")
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--renormalize", action="store_true")
    add_submatrix_args(p)
    args = p.parse_args(argv)
    out, model, prompts, source, heads = gpt2_experiment(args, __file__)
    results, panels = [], {}
    for l, h in heads:
        layers = [int(x) for x in args.layers.split(",")] if args.layers else list(range(l))
        if not layers:
            raise SystemExit(f"{head_name(l, h)} is in layer 0: there is no earlier layer to mask (pass --layers)")
        cmp = compare_head_patterns(model, prompts, (l, h), mask_previous_attention(args.every, layers, args.renormalize).hooks(model))
        panels[f"{head_name(l, h)} clean"] = submatrix(cmp.pop("clean"), args)
        panels[f"{head_name(l, h)} masked (layers {layers}, every {args.every})"] = submatrix(cmp.pop("intervened"), args)
        res = {"head": head_name(l, h), "masked_layers": layers, "every": args.every, **cmp}
        res["held"] = res["prev_score_intervened"] < 0.8 * res["prev_score_clean"]
        results.append(res)
        print(res)
    out.figure(heatmap_grid(panels, cols=2, title=f"{model_label(args)}: attention submatrix, clean vs masked",
                            x0=args.start, y0=args.start), "mask_prev_attention", width=1100)
    out.summary({"model": model_label(args), "prompt_source": source, "n_prompts": len(prompts),
                 "submatrix": [args.start, args.start + args.size], "results": results,
                 "post": "L4H11's pattern visibly disrupted; held = previous-token score drops by more than 20%"})
    out.report()


if __name__ == "__main__":
    main()
