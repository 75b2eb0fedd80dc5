"""Averaging W_pos rows in groups barely matters (GPT-2 post, first section).

    python experiments/pos_embed_averaging.py --model-dir data/mini-gpt2

For each group size: KL(clean || averaged) of next-token distributions over a corpus, the
probability of the right first word of the reply on the repeat-string prompt (" apple orange" and the
swapped " orange apple"; words that are several tokens in the model's vocabulary are replaced by single-token
nouns), and the previous-token mass (offset-1 diagonal) of the tracked heads.
Post: output unchanged up to ~20, breaks down around 50-100; L2H2, L3H3, L4H11 unaffected.
The copy claims are not testable on a model that does not copy the clean prompt.
"""
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpt2_posheads.claims.gpt2_post import judge_claim, model_copies, prev_head_precondition
from gpt2_posheads.cli.common import (add_heads_arg, add_prompt_args, experiment_parser, gpt2_experiment, int_list,
                               main_entry, model_label)
from gpt2_posheads.analysis.diagonals import diagonal_attention
from gpt2_posheads.analysis.interventions import average_pos_embed
from gpt2_posheads.analysis.measures import kl_divergence, next_token_probs
from gpt2_posheads.analysis.repeat_prompt import repeat_string_prompt, single_token_target
from gpt2_posheads.model.validation import UsageError, head_name


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, "L2H2,L3H3,L4H11", "heads whose previous-token mass is tracked")
    p.add_argument("--group-sizes", default="1,5,10,20,50,100", help="W_pos group sizes (1 = clean)")
    p.add_argument("--targets", default=" apple orange, orange apple", help="comma-separated repeat-string targets")
    args = p.parse_args(argv)
    groups = sorted(set(int_list("--group-sizes", args.group_sizes, 1) + [1]))
    if not [t for t in args.targets.split(",") if t.strip()]:
        raise UsageError("--targets", "is empty", "comma-separated targets like ' apple orange, orange apple'")
    out, model, prompts, source, heads = gpt2_experiment(args, __file__)
    targets = single_token_target(model.tokenizer, [t if t.startswith(" ") else " " + t
                                                     for t in args.targets.split(",") if t.strip()])
    reps = [repeat_string_prompt(model.tokenizer, t, n_given=0, seed=args.seed, max_len=model.cfg.n_ctx) for t in targets]

    rows, clean_diag = [], {}
    for g in groups:
        hooks = average_pos_embed(g).hooks(model) if g > 1 else []
        kl = kl_divergence(model, prompts, hooks) if hooks else 0.0
        diag = diagonal_attention(model, prompts, max_offset=16, fwd_hooks=hooks, progress=False)
        row = {"group_size": g, "kl": kl}
        for r in reps:
            probs = next_token_probs(model, r.tokens, hooks)[0]
            row[f"P({r.next_word.strip()} first | {''.join(r.words).strip()})"] = float(probs[r.next_token_id(model.tokenizer)])
        for l, h in heads:
            row[f"prev_mass {head_name(l, h)}"] = float(diag[l, h, 1])
            if g == 1:
                clean_diag[head_name(l, h)] = diag[l, h]
        rows.append(row)
        print(f"group {g:>4}: KL {kl:.4f} | " + " | ".join(f"{k} {v:.3f}" for k, v in row.items()
                                                         if k.startswith(("P(", "prev_mass"))))

    fig = make_subplots(rows=1, cols=3, subplot_titles=["KL(clean || averaged), nats", "P(right continuation)",
                                                        "previous-token mass"])
    gs = [r["group_size"] for r in rows]
    fig.add_trace(go.Scatter(x=gs, y=[r["kl"] for r in rows], name="KL", mode="lines+markers"), 1, 1)
    for key in rows[0]:
        if key.startswith("P("):
            fig.add_trace(go.Scatter(x=gs, y=[r[key] for r in rows], name=key, mode="lines+markers"), 1, 2)
        if key.startswith("prev_mass"):
            fig.add_trace(go.Scatter(x=gs, y=[r[key] for r in rows], name=key[10:], mode="lines+markers"), 1, 3)
    fig.update_xaxes(type="log", title="group size")
    fig.update_yaxes(range=[0, 1], tickformat=".2f", row=1, col=2)
    fig.update_yaxes(range=[0, 1], tickformat=".2f", row=1, col=3)
    fig.update_layout(title=f"{model_label(args)}: averaging W_pos rows in groups", height=450)
    out.figure(fig, "pos_embed_averaging", width=1400)

    by_g = {r["group_size"]: r for r in rows}
    clean = by_g[1]
    pkeys = [k for k in clean if k.startswith("P(")]
    copies = model_copies({k: clean[k] for k in pkeys})
    claims = []
    g20 = by_g.get(20) or by_g[max(g for g in groups if g <= 20)]
    keep = {k: (clean[k], g20[k]) for k in pkeys}
    claims.append(judge_claim("avg_output_unchanged", {f"{k} clean -> g{g20['group_size']}": v for k, v in keep.items()},
                              value=keep, preconditions=[copies]))
    gmax = max(groups)
    claims.append(judge_claim("avg_breaks_down", {"kl_g20": g20["kl"], f"kl_g{gmax}": by_g[gmax]["kl"]},
                              value=(by_g[gmax]["kl"], g20["kl"])))
    g10 = by_g.get(10) or g20
    names = [head_name(l, h) for l, h in heads]
    kept = {n: (clean[f"prev_mass {n}"], g10[f"prev_mass {n}"]) for n in names}
    claims.append(judge_claim("avg_prev_heads_unaffected", {f"{n} clean -> g{g10['group_size']}": v for n, v in kept.items()},
                              value=kept, preconditions=[prev_head_precondition(n, clean_diag[n]) for n in names]))
    out.csv(pd.DataFrame(rows), "pos_embed_averaging")
    out.summary({"model": model_label(args), "prompt_source": source, "n_prompts": len(prompts),
                 "seq_len": prompts.shape[1], "heads": names, "targets": targets, "rows": rows}, claims)
    out.report()


if __name__ == "__main__":
    main_entry(main)
