"""Editing the aggregator's attention and scaling its output redirects induction (GPT-2 post, last section).

    python experiments/l4h11_edit.py --model-dir data/mini-gpt2          # the model's sharpest previous-token head
    python experiments/l4h11_edit.py --heads L4H11                        # GPT-2 small (the default there)

On the repeat-string prompt ending in `Reply: " ninja`, the model should say " turtle". The edit
shifts the head's attention in the request back by one position — " turtle" attends to the token
before " ninja" and " pirate" attends to " ninja" — so an induction head looking for "the token after
ninja" finds " pirate"; the head's output is multiplied by each factor. Words that are several tokens
in the model's vocabulary are replaced by single-token nouns.
Post: P(" turtle") 99% clean; with the edit and factor 2, P(" pirate") 65% and P(" turtle") 26%.
Not testable on a model that does not copy the clean prompt, or for a head that is not a previous-token head.
"""
import plotly.graph_objects as go

from gpt2_posheads.claims.gpt2_post import judge_claim, model_copies, prev_head_precondition
from gpt2_posheads.cli.common import (add_heads_arg, add_prompt_args, experiment_parser, float_list, gpt2_experiment,
                               main_entry, model_label)
from gpt2_posheads.analysis.diagonals import diagonal_attention
from gpt2_posheads.analysis.interventions import edit_head_pattern, hooks_for, scale_head_output
from gpt2_posheads.analysis.measures import next_token_probs, top_tokens
from gpt2_posheads.analysis.repeat_prompt import repeat_string_prompt, single_token_target, split_words
from gpt2_posheads.model.validation import UsageError, head_name


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=8, seq_len=128)
    add_heads_arg(p, "L4H11", "the previous-token head to edit (the first is used)", auto_default=1)
    p.add_argument("--target", default=" ninja turtle pirate", help="three words to repeat")
    p.add_argument("--factors", default="1,2,3", help="output scale factors (the post: 2)")
    args = p.parse_args(argv)
    factors = float_list("--factors", args.factors, 0.0)
    if len(split_words(args.target)) != 3:
        raise UsageError("--target", f"{args.target!r} has {len(split_words(args.target))} word(s)",
                         "exactly three words", "e.g. ' ninja turtle pirate'")
    out, model, prompts, source, heads = gpt2_experiment(args, __file__)
    l, h = heads[0]
    name = head_name(l, h)
    tok = model.tokenizer
    target = single_token_target(tok, args.target if args.target.startswith(" ") else " " + args.target)
    rp = repeat_string_prompt(tok, target, n_given=1, seed=args.seed, max_len=model.cfg.n_ctx)
    w1, w2, w3 = rp.request_positions[:3]
    mapping = {w2[0]: w1[0] - 1, w3[0]: w1[-1]}
    ids = {w: tok(w, add_special_tokens=False)["input_ids"][0] for w in rp.words[1:3]}
    second, third = rp.words[1], rp.words[2]
    clean = next_token_probs(model, rp.tokens)[0]
    rows = [{"condition": "clean", "factor": None, **{f"P({w.strip()})": float(clean[i]) for w, i in ids.items()},
             "top5": top_tokens(model, clean)}]
    for f in factors:
        hooks = hooks_for(model, edit_head_pattern(l, h, mapping), scale_head_output(l, h, f))
        probs = next_token_probs(model, rp.tokens, hooks)[0]
        rows.append({"condition": f"edit, output x{f:g}", "factor": f,
                     **{f"P({w.strip()})": float(probs[i]) for w, i in ids.items()}, "top5": top_tokens(model, probs)})
    for r in rows:
        print(f"{r['condition']:>20}: " + "  ".join(f"{k}={v:.3f}" for k, v in r.items() if k.startswith("P(")),
              "| top:", ", ".join(f"{t!r} {p:.2f}" for t, p in r["top5"][:3]))
    fig = go.Figure()
    for w in ids:
        fig.add_trace(go.Bar(x=[r["condition"] for r in rows], y=[r[f"P({w.strip()})"] for r in rows],
                             name=f"P({w!r})", text=[f"{r[f'P({w.strip()})']:.3f}" for r in rows], textposition="outside"))
    fig.update_layout(barmode="group", title=f"{model_label(args)}: {name} edited on {target!r} (next word after "
                                             f"'Reply: \"{rp.words[0].strip()}')",
                      yaxis=dict(title="next-token probability", range=[0, 1.05], tickformat=".2f"))
    out.figure(fig, "l4h11_edit")

    diag = diagonal_attention(model, prompts, max_offset=16, progress=False)
    pre = [model_copies({f"P({second.strip()} | {rp.words[0].strip()})": rows[0][f"P({second.strip()})"]}),
           prev_head_precondition(name, diag[l, h])]
    x2 = next((r for r in rows if r["factor"] == 2.0), None)
    if x2 is None:
        raise UsageError("--factors", f"{args.factors!r} lacks 2", "include 2 (the post's factor)", "e.g. 1,2,3")
    claims = [judge_claim("edit_moves_copy", {"clean": {k: v for k, v in rows[0].items() if k.startswith("P(")},
                                              "edit_x2": {k: v for k, v in x2.items() if k.startswith("P(")}},
                          value=(rows[0][f"P({third.strip()})"], x2[f"P({second.strip()})"], x2[f"P({third.strip()})"]),
                          preconditions=pre)]
    out.summary({
        "model": model_label(args), "head": name, "target": target, "prompt": rp.text, "mapping": mapping,
        "mapping_tokens": {tok.decode([int(rp.tokens[q])]): tok.decode([int(rp.tokens[k])]) for q, k in mapping.items()},
        "rows": rows,
    }, claims)
    out.report()


if __name__ == "__main__":
    main_entry(main)
