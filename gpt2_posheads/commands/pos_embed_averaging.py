"""Averaging W_pos rows in groups barely matters (GPT-2 post, first section).

    gpt2-posheads pos_embed_averaging --model mini-gpt2

For each group size: KL(clean || averaged) of next-token distributions over a corpus, the probability of
the right first word of the reply on the repeat-string prompt (" apple orange" and the swapped " orange
apple"; a word that is several tokens in the model's vocabulary is replaced by a single-token noun, and
said), and the previous-token mass (offset-1 diagonal) of the tracked heads.
Post: output unchanged up to groups of ~20, breaks down around 50-100; L2H2, L3H3, L4H11 unaffected.
A claim whose reference group size (10 or 20) was not measured is not testable; the output claims are not
testable on a model that does not copy the clean prompt (or whose context cannot hold it).
"""

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpt2_posheads.analysis.diagonals import diagonal_attention
from gpt2_posheads.analysis.interventions import average_pos_embed
from gpt2_posheads.analysis.measures import kl_divergence, next_token_probs
from gpt2_posheads.analysis.repeat_prompt import repeat_string_prompt
from gpt2_posheads.claims.gpt2_post import judge_claim, model_copies, prev_head_precondition
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.cli import (
    HeadDefault,
    add_heads_arg,
    add_prompt_args,
    experiment_parser,
    int_list,
    note,
    setup,
)
from gpt2_posheads.cli.experiment import not_applicable, one_token_targets, wpos_reason
from gpt2_posheads.model.validation import UsageError, head_name

HEADS = HeadDefault(("L2H2", "L3H3", "L4H11"), "aggregator+early", what="heads whose previous-token mass is tracked")
CLAIMS = ["avg_output_unchanged", "avg_breaks_down", "avg_prev_heads_unaffected"]


def measured(g: int, groups: list[int]) -> Precondition:
    return Precondition(
        f"groups of {g} were measured",
        g in groups,
        f"groups of {g} were not measured (--group-sizes {','.join(map(str, groups))})",
    )


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, HEADS)
    p.add_argument(
        "--group-sizes",
        default="1,5,10,20,50,100",
        help="W_pos group sizes (1 = clean; sizes above the model's context are capped at it, and said)",
    )
    p.add_argument("--targets", default=" apple orange, orange apple", help="comma-separated repeat-string targets")
    args = p.parse_args(argv)
    asked = int_list("--group-sizes", args.group_sizes, 1)
    targets = [t if t.startswith(" ") else " " + t for t in args.targets.split(",") if t.strip()]
    if not targets:
        raise UsageError("--targets", "is empty", "comma-separated targets like ' apple orange, orange apple'")
    exp = setup(args, __file__, heads=HEADS)
    model, prompts, out = exp.model, exp.prompts, exp.out
    reason = wpos_reason(model, exp.label)
    if reason:
        return not_applicable(exp, reason, CLAIMS)
    n_ctx = model.cfg.n_ctx
    if max(asked) > n_ctx:
        note(
            f"--group-sizes: {', '.join(str(g) for g in asked if g > n_ctx)} capped at the model's context, {n_ctx} "
            f"(one group holds every position)"
        )
    groups = sorted({min(g, n_ctx) for g in asked} | {1})
    targets = one_token_targets(model.tokenizer, targets, "--targets")
    try:
        reps = [repeat_string_prompt(model.tokenizer, t, n_given=0, seed=args.seed, max_len=n_ctx) for t in targets]
        no_prompt = ""
    except ValueError as e:  # the context cannot hold even one demonstration: the output claims cannot be tested
        reps, no_prompt = [], str(e)
        note(f"the repeat-string prompt does not fit: {e}; the output claims are not testable")

    rows = []
    for g in groups:
        hooks = average_pos_embed(g).hooks(model) if g > 1 else []
        kl = kl_divergence(model, prompts, hooks) if hooks else 0.0
        diag = exp.diag if g == 1 else diagonal_attention(model, prompts, fwd_hooks=hooks, progress=False)
        row = {"group_size": g, "kl": kl}
        for r in reps:
            probs = next_token_probs(model, r.tokens, hooks)[0]
            row[f"P({r.next_word.strip()} first | {''.join(r.words).strip()})"] = float(
                probs[r.next_token_id(model.tokenizer)]
            )
        for l, h in exp.heads:
            row[f"prev_mass {head_name(l, h)}"] = float(diag[l, h, 1])
        rows.append(row)
        print(
            f"group {g:>4}: KL {kl:.4f} | "
            + " | ".join(f"{k} {v:.3f}" for k, v in row.items() if k.startswith(("P(", "prev_mass")))
        )
    by_g = {r["group_size"]: r for r in rows}
    clean = by_g[1]
    pkeys = [k for k in clean if k.startswith("P(")]
    copies = (
        model_copies({k: clean[k] for k in pkeys})
        if reps
        else Precondition("the repeat-string prompt fits the context", False, f"not testable here: {no_prompt}")
    )

    fig = make_subplots(
        rows=1, cols=3, subplot_titles=["KL(clean || averaged), nats", "P(right continuation)", "previous-token mass"]
    )
    gs = [r["group_size"] for r in rows]
    fig.add_trace(go.Scatter(x=gs, y=[r["kl"] for r in rows], name="KL", mode="lines+markers"), 1, 1)
    for key in rows[0]:
        if key.startswith("P("):
            fig.add_trace(go.Scatter(x=gs, y=[r[key] for r in rows], name=key, mode="lines+markers"), 1, 2)
        if key.startswith("prev_mass"):
            fig.add_trace(go.Scatter(x=gs, y=[r[key] for r in rows], name=key[10:], mode="lines+markers"), 1, 3)
    if not copies.ok:  # a flat line at zero would read as "averaging kills copying": say why it is flat
        fig.add_annotation(
            text="not testable: the model does not copy<br>these prompts even clean",
            row=1,
            col=2,
            x=0.5,
            y=0.5,
            xref="x2 domain",
            yref="y2 domain",
            showarrow=False,
            font=dict(size=13, color="#6e7781"),
            bgcolor="rgba(255,255,255,0.85)",
        )
    fig.update_xaxes(type="log", title="group size", tickvals=gs, ticktext=[str(g) for g in gs])
    fig.update_yaxes(range=[0, 1], tickformat=".2f", row=1, col=2)
    fig.update_yaxes(range=[0, 1], tickformat=".2f", row=1, col=3)
    fig.update_layout(
        title=f"{exp.label}: averaging W_pos rows in groups", height=450, legend=dict(orientation="h", y=-0.25)
    )
    out.figure(fig, "pos_embed_averaging", width=1400)

    names = exp.head_names
    claims = []
    keep = {k: (clean[k], by_g[20][k]) for k in pkeys} if 20 in by_g else {}
    claims.append(
        judge_claim(
            "avg_output_unchanged",
            {f"{k} clean -> g20": v for k, v in keep.items()},
            value=keep,
            preconditions=[measured(20, groups), copies],
            shown=", ".join(f"{k.split(' first')[0]} keeps {b / a:.0%}" for k, (a, b) in keep.items() if a > 0),
        )
    )
    gmax = max(groups)
    big = gmax >= 50 and 20 in by_g
    claims.append(
        judge_claim(
            "avg_breaks_down",
            {"kl_g20": by_g.get(20, {}).get("kl"), f"kl_g{gmax}": by_g[gmax]["kl"]},
            value=(by_g[20]["kl"], by_g[gmax]["kl"], gmax) if big else (float("nan"), float("nan"), gmax),
            preconditions=[
                measured(20, groups),
                Precondition(
                    "a group size of 50 or more was measured",
                    gmax >= 50,
                    f"no group size of 50 or more was measured (largest {gmax})",
                ),
                copies,
            ],
            shown=f"KL {by_g[20]['kl']:.3g} nats at 20, {by_g[gmax]['kl']:.3g} at {gmax}" if big else "",
        )
    )
    kept = {n: (clean[f"prev_mass {n}"], by_g[10][f"prev_mass {n}"]) for n in names} if 10 in by_g else {}
    claims.append(
        judge_claim(
            "avg_prev_heads_unaffected",
            {f"{n} clean -> g10": v for n, v in kept.items()},
            value=kept,
            head=",".join(names),
            preconditions=[measured(10, groups)]
            + [prev_head_precondition(n, exp.diag[l, h]) for n, (l, h) in zip(names, exp.heads)],
            shown=", ".join(f"{n} keeps {b / a:.0%}" for n, (a, b) in kept.items() if a > 0),
        )
    )
    out.csv(pd.DataFrame(rows), "pos_embed_averaging")
    out.summary({**exp.describe(), "targets": targets, "group_sizes": groups, "rows": rows}, claims)
    out.commit()
