"""Masking attention to the previous position in earlier layers disrupts the aggregator (GPT-2 post).

    gpt2-posheads mask_prev_attention --model mini-gpt2
    gpt2-posheads mask_prev_attention --heads L4H11 --layers 0,1,2,3      # the post's setting

Every query p with p % every == 0 loses its attention to p-1 in every head of --layers (post-softmax);
W_pos is untouched. Default --layers: every layer below the head's own (masking the head's own layer
would test the mask, not the mechanism). The claim is judged on the masked rows, the ones the post's figure shows
disrupted (the rows in between are reported too). Side by side: the head's 50x50 pattern clean vs masked.
Not testable for a head that is not a clear previous-token head or sits in layer 0.
"""

from gpt2_posheads.analysis.interventions import mask_previous_attention, masked_queries
from gpt2_posheads.analysis.measures import compare_head_patterns
from gpt2_posheads.claims.gpt2_post import judge_claim, layer_above, prev_head_precondition
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
from gpt2_posheads.model.validation import head_name
from gpt2_posheads.report.plotting import attention_panels

HEADS = HeadDefault(("L4H11",), "aggregator", what="head(s) whose pattern is measured")


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=256)
    add_heads_arg(p, HEADS)
    p.add_argument(
        "--layers", default=None, help="comma-separated layers to mask (default: every layer below the head's)"
    )
    p.add_argument("--every", type=int, default=5, help="mask queries p with p %% every == 0")
    p.add_argument("--renormalize", action="store_true", help="renormalise masked rows to sum to 1")
    add_submatrix_args(p)
    args = p.parse_args(argv)
    positive("--every", args.every, 2)
    exp = setup(args, __file__, heads=HEADS)
    model, prompts, out = exp.model, exp.prompts, exp.out
    results, panels, claims, start = [], {}, [], 0
    tokens = [model.tokenizer.decode([int(t)]) for t in prompts[0]]
    for l, h in exp.heads:
        name = head_name(l, h)
        layers = list(exp.checked.layers) if exp.checked.layers is not None else list(range(l))
        pre = [prev_head_precondition(name, exp.diag[l, h]), layer_above(name, l, 0)]
        if l > 0:  # in layer 0 the line above already says there is nothing below
            pre.append(
                Precondition(
                    "every masked layer lies below the head's own",
                    bool(layers) and max(layers) < l,
                    f"the masked layers {', '.join(map(str, layers))} do not all lie below {name}'s layer {l}",
                )
            )
        if not layers or max(layers) >= l:
            results.append({"head": name, "masked_layers": layers})
            claims.append(
                judge_claim(
                    "mask_disrupts",
                    {"head": name, "masked_layers": layers},
                    value=(0.0, 0.0),
                    preconditions=pre,
                    head=name,
                )
            )
            continue
        iv = mask_previous_attention(args.every, layers, args.renormalize)
        rows = masked_queries(args.every, prompts.shape[1])
        cmp = compare_head_patterns(model, prompts, (l, h), iv.hooks(model), rows=rows)
        clean, start = submatrix(cmp.pop("clean"), args.start, args.size)
        masked, _ = submatrix(cmp.pop("intervened"), args.start, args.size)
        panels[f"{name} clean"] = clean
        contiguous = len(layers) > 1 and layers == list(range(layers[0], layers[-1] + 1))
        shown_layers = f"{layers[0]}-{layers[-1]}" if contiguous else ", ".join(map(str, layers))
        panels[f"{name} masked (layer{'s' if len(layers) > 1 else ''} {shown_layers}, every {args.every})"] = masked
        results.append({"head": name, "masked_layers": layers, "every": args.every, **cmp})
        claims.append(
            judge_claim(
                "mask_disrupts",
                {
                    "head": name,
                    "masked_layers": layers,
                    "prev_mass_masked_rows": [cmp["prev_rows_clean"], cmp["prev_rows_intervened"]],
                    "prev_mass_all_rows": [cmp["prev_score_clean"], cmp["prev_score_intervened"]],
                },
                value=(cmp["prev_rows_clean"], cmp["prev_rows_intervened"]),
                preconditions=pre,
                head=name,
                shown=f"{cmp['rows_relative_drop']:.0%} lower on the masked rows ({cmp['relative_drop']:.0%} on all)",
            )
        )
    if panels:
        out.figure(
            attention_panels(
                panels,
                tokens,
                start,
                exp.label,
                "attention submatrix, clean vs previous position masked below",
                exp.source,
            ),
            "mask_prev_attention",
            width=1100,
        )
    out.summary({**exp.describe(), "every": args.every, "results": results}, claims)
    out.commit()
