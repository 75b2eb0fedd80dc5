"""Editing the aggregator's attention and scaling its output redirects induction (GPT-2 post, last section).

    gpt2-posheads l4h11_edit --model mini-gpt2          # the model's aggregator
    gpt2-posheads l4h11_edit --heads L4H11                        # GPT-2 small (the default there)

On the repeat-string prompt ending in `Reply: " ninja`, the model should say " turtle". The edit shifts
the head's attention in the request back by one position — " turtle" attends to the token before " ninja"
and " pirate" attends to " ninja" — so an induction head looking for "the token after ninja" finds
" pirate"; the head's output is multiplied by each factor. A word that is several tokens in the model's
vocabulary is replaced by a single-token noun, and said.
Post: P(" turtle") 99% clean; with the edit and factor 2, P(" pirate") 65% and P(" turtle") 26%.
Not testable on a model that does not copy the clean prompt, or for a head that is not a previous-token head.
"""

import plotly.graph_objects as go

from gpt2_posheads.analysis.interventions import edit_head_pattern, hooks_for, scale_head_output
from gpt2_posheads.analysis.measures import next_token_probs, top_tokens
from gpt2_posheads.analysis.repeat_prompt import edit_mapping, repeat_string_prompt, split_words
from gpt2_posheads.claims.gpt2_post import judge_claim, model_copies, prev_head_precondition
from gpt2_posheads.cli import (
    HeadDefault,
    add_heads_arg,
    add_prompt_args,
    experiment_parser,
    float_list,
    setup,
)
from gpt2_posheads.cli.experiment import one_token_targets
from gpt2_posheads.model.validation import UsageError

HEADS = HeadDefault(("L4H11",), "aggregator", what="the previous-token head to edit (the first is used)")


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=128)
    add_heads_arg(p, HEADS)
    p.add_argument("--target", default=" ninja turtle pirate", help="three words to repeat")
    p.add_argument("--factors", default="1,2,3", help="output scale factors (must include 2, the post's)")
    args = p.parse_args(argv)
    factors = float_list("--factors", args.factors, 0.0)
    if 2.0 not in factors:
        raise UsageError("--factors", f"{args.factors!r} lacks 2", "include 2 (the post's factor)", "e.g. 1,2,3")
    if len(split_words(args.target)) != 3:
        raise UsageError(
            "--target",
            f"{args.target!r} has {len(split_words(args.target))} word(s)",
            "exactly three words",
            "e.g. ' ninja turtle pirate'",
        )
    exp = setup(args, __file__, heads=HEADS)
    model, out, tok = exp.model, exp.out, exp.model.tokenizer
    l, h = exp.heads[0]
    name = exp.head_names[0]
    target = one_token_targets(tok, [args.target if args.target.startswith(" ") else " " + args.target])[0]
    rp = repeat_string_prompt(tok, target, n_given=1, seed=args.seed, max_len=model.cfg.n_ctx)
    mapping = edit_mapping(rp)
    second, third = rp.words[1], rp.words[2]
    ids = {w: tok(w, add_special_tokens=False)["input_ids"][0] for w in (second, third)}
    clean = next_token_probs(model, rp.tokens)[0]
    rows = [
        {
            "condition": "clean",
            "factor": None,
            **{f"P({w.strip()})": float(clean[i]) for w, i in ids.items()},
            "top5": top_tokens(model, clean),
        }
    ]
    for f in factors:
        hooks = hooks_for(model, edit_head_pattern(l, h, mapping), scale_head_output(l, h, f))
        probs = next_token_probs(model, rp.tokens, hooks)[0]
        rows.append(
            {
                "condition": f"edit, output x{f:g}",
                "factor": f,
                **{f"P({w.strip()})": float(probs[i]) for w, i in ids.items()},
                "top5": top_tokens(model, probs),
            }
        )
    for r in rows:
        print(
            f"{r['condition']:>20}: " + "  ".join(f"{k}={v:.3f}" for k, v in r.items() if k.startswith("P(")),
            "| top:",
            ", ".join(f"{t!r} {p:.2f}" for t, p in r["top5"][:3]),
        )
    fig = go.Figure()
    for w in ids:
        fig.add_trace(
            go.Bar(
                x=[r["condition"] for r in rows],
                y=[r[f"P({w.strip()})"] for r in rows],
                name=f"P({w!r})",
                text=[f"{r[f'P({w.strip()})']:.3f}" for r in rows],
                textposition="outside",
            )
        )
    fig.update_layout(
        barmode="group",
        title=f"{exp.label}: {name} edited on {target!r}<br><sup>next word after "
        f"'Reply: \"{rp.words[0].strip()}'</sup>",
        yaxis=dict(title="next-token probability", range=[0, 1.1], tickformat=".2f"),
    )
    out.figure(fig, "l4h11_edit")

    s, t = second.strip(), third.strip()
    x2 = next(r for r in rows if r["factor"] == 2.0)
    pre = [
        model_copies({f"P({s} | {rp.words[0].strip()})": rows[0][f"P({s})"]}),
        prev_head_precondition(name, exp.diag[l, h]),
    ]
    claims = [
        judge_claim(
            "edit_moves_copy",
            {
                "clean": {k: v for k, v in rows[0].items() if k.startswith("P(")},
                "edit_x2": {k: v for k, v in x2.items() if k.startswith("P(")},
            },
            value=(rows[0][f"P({t})"], x2[f"P({s})"], x2[f"P({t})"]),
            preconditions=pre,
            head=name,
            shown=f"P({t}) {rows[0][f'P({t})']:.3g} -> {x2[f'P({t})']:.3g}, P({s}) {x2[f'P({s})']:.3g}",
        )
    ]
    out.summary(
        {
            **exp.describe(),
            "target": target,
            "prompt": rp.text,
            "mapping": mapping,
            "mapping_tokens": {
                tok.decode([int(rp.tokens[q])]): tok.decode([int(rp.tokens[k])]) for q, k in mapping.items()
            },
            "rows": rows,
        },
        claims,
    )
    out.commit()
