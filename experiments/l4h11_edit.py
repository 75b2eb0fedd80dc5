"""Editing L4H11's attention and scaling its output redirects induction (GPT-2 post, last section).

    python experiments/l4h11_edit.py --model-dir data/mini-gpt2 --head auto

On the repeat-string prompt ending in `Reply: " ninja`, the model should say " turtle". The edit
shifts the head's attention in the request back by one position — " turtle" attends to the token
before " ninja" and " pirate" attends to " ninja" — so an induction head looking for "the token after
ninja" finds " pirate"; the head's output is multiplied by each factor.
Post: P(" turtle") 99% clean; with the edit and factor 2, P(" pirate") 65% and P(" turtle") 26%.
"""
import plotly.graph_objects as go

from gpt2_posheads.cli import (Output, add_heads_arg, add_prompt_args, corpus_prompts, experiment_parser,
                               model_from_args, model_label, resolve_heads)
from gpt2_posheads.interventions import edit_head_pattern, hooks_for, scale_head_output
from gpt2_posheads.measures import next_token_probs, top_tokens
from gpt2_posheads.repeat_prompt import repeat_string_prompt
from gpt2_posheads.validation import head_name


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=128)
    add_heads_arg(p, "L4H11", "the previous-token head to edit")
    p.add_argument("--target", default=" ninja turtle pirate")
    p.add_argument("--factors", default="1,2,3")
    args = p.parse_args(argv)
    out = Output.from_args(args, __file__)
    model = model_from_args(args)
    prompts = corpus_prompts(model, args)[0] if args.heads.startswith("auto") else None
    (l, h) = resolve_heads(model, args.heads, prompts)[0]
    rp = repeat_string_prompt(model.tokenizer, args.target, n_given=1, seed=args.seed, max_len=model.cfg.n_ctx)
    if len(rp.words) < 3:
        raise SystemExit("--target needs three words, e.g. ' ninja turtle pirate'")
    tok = model.tokenizer
    w1, w2, w3 = rp.request_positions[:3]
    mapping = {w2[0]: w1[0] - 1, w3[0]: w1[-1]}
    ids = {w: tok(w, add_special_tokens=False)["input_ids"][0] for w in rp.words[1:3]}
    clean = next_token_probs(model, rp.tokens)[0]
    rows = [{"condition": "clean", "factor": None, **{f"p[{w}]": float(clean[i]) for w, i in ids.items()},
             "top5": top_tokens(model, clean)}]
    for f in [float(x) for x in args.factors.split(",")]:
        hooks = hooks_for(model, edit_head_pattern(l, h, mapping), scale_head_output(l, h, f))
        probs = next_token_probs(model, rp.tokens, hooks)[0]
        rows.append({"condition": f"edit, output x{f:g}", "factor": f,
                     **{f"p[{w}]": float(probs[i]) for w, i in ids.items()}, "top5": top_tokens(model, probs)})
    for r in rows:
        print(f"{r['condition']:>20}: " + "  ".join(f"{k}={v:.3f}" for k, v in r.items() if k.startswith("p[")),
              "| top:", ", ".join(f"{t!r} {p:.2f}" for t, p in r["top5"][:3]))
    fig = go.Figure()
    for w in ids:
        fig.add_trace(go.Bar(x=[r["condition"] for r in rows], y=[r[f"p[{w}]"] for r in rows], name=f"P({w!r})"))
    fig.update_layout(barmode="group", title=f"{model_label(args)}: {head_name(l, h)} edited on {args.target!r}",
                      yaxis_title="next-token probability")
    out.figure(fig, "l4h11_edit")
    x2 = next((r for r in rows if r["factor"] == 2.0), None)
    out.summary({
        "model": model_label(args), "head": head_name(l, h), "prompt": rp.text, "mapping": mapping,
        "mapping_tokens": {tok.decode([int(rp.tokens[q])]): tok.decode([int(rp.tokens[k])]) for q, k in mapping.items()},
        "rows": rows,
        "post": {"clean_p_turtle": 0.99, "edit_x2_p_pirate": 0.65, "edit_x2_p_turtle": 0.26},
        "held": None if x2 is None else x2[f"p[{rp.words[2]}]"] > x2[f"p[{rp.words[1]}]"],
    })
    out.report()


if __name__ == "__main__":
    main()
