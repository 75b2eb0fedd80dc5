"""Which upstream heads make a head previous-token, and through query or key? (GPT-2 post: L4H11 aggregates
L1H0, L2H2, L3H3, L2H4, L3H7, L3H2; early heads like L2H2 compute position themselves.)

    python experiments/prev_head_sources.py --model-dir data/mini-gpt2     # its aggregator and an early head
    python experiments/prev_head_sources.py --heads L4H11,L2H2              # GPT-2 small (the default there)

For each target head: Q/K/V composition scores of every upstream head against a random baseline, and
direct-path ablation: one upstream head's output (mean-ablated by default) removed only from the
target's query input or only from its key input, and W_pos averaged in groups of 10 on that input alone;
the drop in the target's previous-token mass, one row per (source, side). Figures: layer x head maps of
the drop, query and key side by side. Default heads on a model other than GPT-2 small: its sharpest
previous-token head and the sharpest previous-token head in a lower layer.
"""
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpt2_posheads.claims.gpt2_post import prev_head_precondition
from gpt2_posheads.cli.common import (add_heads_arg, add_prompt_args, experiment_parser, is_gpt2_small, main_entry,
                               model_label, positive, ranked_experiment)
from gpt2_posheads.analysis.diagonals import aggregator_and_early
from gpt2_posheads.analysis.sources import ABLATIONS, composition_scores, drop_grid, path_ablation, sources_summary
from gpt2_posheads.model.validation import head_name
from gpt2_posheads.claims.verdicts import Precondition, judge, predicate

SEED_SOURCES = ["L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2"]

RULE_UPSTREAM = predicate(
    "held if at least 3 of the aggregator's 5 largest upstream sources (drop in previous-token mass, either side) "
    "are previous-token heads and the largest drop is >= 10% of its clean previous-token mass",
    lambda v: (v["n_prev_token_among_top"] >= 3 and v["top_drop"] >= 0.1 * v["clean_prev_mass"],
               f"{v['n_prev_token_among_top']} of the top 5 ({', '.join(v['top_sources'])}) are previous-token heads; "
               f"largest drop {v['top_drop']:.3g} of {v['clean_prev_mass']:.3g}"))
RULE_NAMED = predicate("held if at least 4 of the post's six named heads are among L4H11's 10 largest upstream sources",
                       lambda v: (len(v) >= 4, f"{len(v)} of 6 named heads in the top 10: {', '.join(v) or 'none'}"))


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, "L4H11,L2H2", "target heads (layer >= 1)", auto_default=2)
    p.add_argument("--ablation", default="mean", choices=ABLATIONS, help="what replaces a source's output")
    p.add_argument("--pos-group", type=int, default=10, help="W_pos group size of the positional route")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per forward")
    args = p.parse_args(argv)
    positive("--pos-group", args.pos_group, 2)
    positive("--batch-size", args.batch_size)
    # the aggregator first: the sharpest previous-token head with upstream heads (layer >= 1)
    out, model, prompts, source, heads, diag, rank = ranked_experiment(
        args, __file__, pick=lambda r: aggregator_and_early(r[r.layer >= 1])[::-1])
    prev_heads = rank[rank.is_prev_token].name.tolist()
    heads = [(l, h) for l, h in heads if l >= 1] or [(max(1, heads[0][0]), heads[0][1])]
    H = model.cfg.n_heads
    claims, results = [], {}
    fig = make_subplots(rows=len(heads), cols=2, subplot_titles=[f"{head_name(l, h)}: {s} side" for l, h in heads
                                                                  for s in ("query", "key")], vertical_spacing=0.12)
    for i, (l, h) in enumerate(heads):
        name = head_name(l, h)
        print(f"\n{name}: path ablation over {l * H} upstream heads x 2 sides ({args.ablation})", flush=True)
        df = path_ablation(model, prompts, l, h, ablation=args.ablation, pos_group=args.pos_group,
                           batch_size=args.batch_size)
        comp = composition_scores(model, l, h)
        df = df.merge(comp[["source", "q_comp", "k_comp", "v_comp", "q_ratio", "k_ratio"]], on="source", how="left")
        out.csv(df, f"ablation_{name}")
        out.csv(comp, f"composition_{name}")
        summ = sources_summary(df, prev_heads)
        results[name] = {**summ, "pattern_check_max_abs_err": df.attrs.get("pattern_check_max_abs_err"),
                         "top_rows": df.head(10)[["source", "side", "drop", "relative_drop", "prev_mass"]]}
        print(df.head(10)[["source", "side", "drop", "relative_drop", "q_ratio", "k_ratio"]]
              .to_string(index=False, float_format=lambda x: f"{x:.4f}"))
        zmax = max(1e-6, float(df["drop"].abs().max()))
        for j, side in enumerate(("query", "key")):
            g = drop_grid(df, l, H, side)
            fig.add_trace(go.Heatmap(z=g.numpy(), x=list(range(H)), y=list(range(l)), zmin=-zmax, zmax=zmax, zmid=0,
                                     colorscale="RdBu_r", showscale=(i == 0 and j == 0),
                                     colorbar=dict(title="drop in prev. mass", tickformat=".2g"),
                                     hovertemplate="L%{y}H%{x}: drop %{z:.4f}<extra></extra>"), row=i + 1, col=j + 1)
            fig.update_xaxes(title_text="head", dtick=1, row=i + 1, col=j + 1)
            fig.update_yaxes(title_text="layer", dtick=1, autorange="reversed", row=i + 1, col=j + 1)
        pre = [prev_head_precondition(name, diag[l, h])]
        if i == 0:
            claims.append(judge("the aggregator reads earlier previous-token heads", "L4H11 aggregates six early heads",
                                RULE_UPSTREAM, {k: summ[k] for k in ("top_sources", "sides", "n_prev_token_among_top",
                                                                      "top_drop", "wpos_drop")}, summ,
                                preconditions=pre, key="sources_upstream"))
            gpt2 = is_gpt2_small(model)
            top10 = df[df.source.str.match(r"^L\d+H\d+$")].groupby("source")["drop"].max().nlargest(10).index
            named = [s for s in SEED_SOURCES if s in set(top10)] if gpt2 and name == "L4H11" else []
            # on another model the post's head names mean nothing: nothing is matched against them
            shown = {"named_in_top10": named} if gpt2 and name == "L4H11" else "n/a: not GPT-2 small's L4H11"
            claims.append(judge("the post's six named heads feed L4H11", "L1H0, L2H2, L3H3, L2H4, L3H7, L3H2", RULE_NAMED,
                                shown, named, key="sources_named_heads",
                                preconditions=[Precondition("the model is GPT-2 small and the target is L4H11",
                                                            gpt2 and name == "L4H11",
                                                            "the post's head names only mean something on GPT-2 small")]))
    fig.update_layout(title=f"{model_label(args)}: drop in previous-token mass when one upstream head is removed from "
                            f"the target's query or key input ({args.ablation} ablation)", height=420 * len(heads))
    out.figure(fig, "prev_head_sources", width=1200)
    out.summary({"model": model_label(args), "prompt_source": source, "n_prompts": len(prompts),
                 "ablation": args.ablation, "heads": [head_name(l, h) for l, h in heads], "results": results}, claims)
    out.report()


if __name__ == "__main__":
    main_entry(main)
