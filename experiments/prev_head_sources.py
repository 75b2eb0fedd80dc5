"""Which upstream heads make a head previous-token, and through query or key? (GPT-2 post: L4H11 aggregates
L1H0, L2H2, L3H3, L2H4, L3H7, L3H2; early heads like L2H2 compute position themselves.)

    python experiments/prev_head_sources.py --model-dir data/route-gpt2    # its aggregator and an early head
    python experiments/prev_head_sources.py --heads L4H11,L2H2              # GPT-2 small (the default there)

For each target head: Q/K/V composition scores of every upstream head against a random baseline, and
direct-path ablation: one upstream head's output (mean-ablated by default) removed only from the
target's query input or only from its key input, and W_pos averaged in groups of 10 on that input alone;
the drop in the target's previous-token mass, one row per (source, side). For the aggregator also, from both
inputs at once: everything the layers below write (is it built from earlier layers?), the early clear
previous-token heads together (does it aggregate them?) and random groups of as many heads from below (chance).
Figures: layer x head maps of the drop, query and key side by side. Default heads on a model other than GPT-2
small: its sharpest previous-token head (the aggregator) and the sharpest clear previous-token head below it. A head
in layer 0 has nothing upstream: given with --heads it is an error; as the model's aggregator, it is built from the
embeddings alone.
"""

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpt2_posheads.analysis.diagonals import early_prev_heads
from gpt2_posheads.analysis.sources import (
    ABLATIONS,
    BELOW,
    below_relayed,
    composition_scores,
    drop_grid,
    early_and_chance_groups,
    path_ablation,
    sources_summary,
    upstream_summary,
)
from gpt2_posheads.claims.gpt2_post import POST_SOURCES, judge_claim, layer_above, prev_head_precondition
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.cli import (
    HeadDefault,
    add_heads_arg,
    add_prompt_args,
    experiment_parser,
    main_entry,
    note,
    positive,
    setup,
)
from gpt2_posheads.model.identity import is_gpt2_small
from gpt2_posheads.model.validation import UsageError, head_name

HEADS = HeadDefault(("L4H11", "L2H2"), "aggregator+early", what="target heads (layer >= 1; the aggregator first)")


def group_figure(result: dict, agg: str, label: str):
    """Bars: the aggregator's previous-token mass lost when what the layers below write, the early heads together,
    and random groups of as many heads from below (median and range) are removed from its query and key inputs."""
    up = result.get("upstream") or {}
    if "below_relative_drop" not in result:
        return None
    names, values, errors = ["everything the layers below write"], [result["below_relative_drop"]], [None]
    if up.get("n_early"):
        names.append(f"the {up['n_early']} early heads together")
        values.append(up["group_drop"])
        errors.append(None)
        if up.get("n_groups"):
            chance = up["chance_range"]
            names.append(f"random groups of {up['n_early']} (median of {up['n_groups']}; bar: range)")
            values.append(up["chance"])
            errors.append((up["chance"] - chance[0], chance[1] - up["chance"]))
    fig = go.Figure(
        go.Bar(
            x=names,
            y=values,
            text=[f"{v:.0%}" for v in values],
            textposition="outside",
            error_y=dict(
                type="data",
                symmetric=False,
                array=[e[1] if e else 0 for e in errors],
                arrayminus=[e[0] if e else 0 for e in errors],
            ),
        )
    )
    fig.add_hline(y=0.5, line_dash="dot", annotation_text="half (the rules' level)")
    fig.update_layout(
        title=f"{label}: what {agg} loses when heads below it are removed together<br><sup>share of its "
        "previous-token mass lost; mean-ablated from its query and key inputs</sup>",
        yaxis=dict(
            title="share of previous-token mass lost", tickformat=".0%", range=[min(0, min(values)) - 0.05, 1.1]
        ),
        height=450,
    )
    return fig


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    add_heads_arg(p, HEADS)
    p.add_argument("--ablation", default="mean", choices=ABLATIONS, help="what replaces a source's output")
    p.add_argument("--pos-group", type=int, default=10, help="W_pos group size of the positional route")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per forward")
    args = p.parse_args(argv)
    positive("--pos-group", args.pos_group, 2)
    positive("--batch-size", args.batch_size)
    exp = setup(args, __file__, heads=HEADS, above_layer0=True)
    model, prompts, out, rank = exp.model, exp.prompts, exp.out, exp.ranking
    if exp.checked.heads is None and not is_gpt2_small(model):
        exp.heads = exp.heads[::-1]  # the aggregator first: the claims are about it
    if args.ablation == "resample" and len(prompts) < 2:
        raise UsageError("--ablation", "resample needs at least two prompts", "use mean or zero, or --n-prompts >= 2")
    prev_heads = rank[rank.is_prev_token].name.tolist()
    H = model.cfg.n_heads
    targets = [(l, h) for l, h in exp.heads if l >= 1]
    claims, results = [], {}
    agg_l, agg_h = exp.heads[0]
    agg = exp.head_names[0]
    pre_agg = [prev_head_precondition(agg, exp.diag[agg_l, agg_h]), layer_above(agg, agg_l, 0)]
    gpt2 = is_gpt2_small(model)
    named_pre = Precondition(
        "the model is GPT-2 small and the target is L4H11",
        gpt2 and agg == "L4H11",
        "the post's head names only mean something on GPT-2 small's L4H11",
    )
    if not targets:
        print(f"{agg} sits in layer 0: nothing upstream to analyse")
    fig = make_subplots(
        rows=max(1, len(targets)),
        cols=2,
        vertical_spacing=0.12,
        subplot_titles=[f"{head_name(l, h)}: {s} side" for l, h in targets for s in ("query", "key")],
    )
    early = [(int(r.layer), int(r.head)) for r in early_prev_heads(rank, agg_l).itertuples()]
    for i, (l, h) in enumerate(targets):
        name = head_name(l, h)
        is_agg = (l, h) == (agg_l, agg_h)
        groups = early_and_chance_groups(early, l, H, seed=args.seed) if is_agg else {}
        print(f"\n{name}: path ablation over {l * H} upstream heads x 2 sides ({args.ablation})", flush=True)
        df = path_ablation(
            model,
            prompts,
            l,
            h,
            ablation=args.ablation,
            pos_group=args.pos_group,
            batch_size=args.batch_size,
            groups=groups,
            below=is_agg,
        )
        try:
            comp = composition_scores(model, l, h)
        except UsageError as e:
            note(f"composition scores skipped: {e}")
            comp = None
        if comp is not None:
            df = df.merge(comp[["source", "q_comp", "k_comp", "v_comp", "q_ratio", "k_ratio"]], on="source", how="left")
            out.csv(comp, f"composition_{name}")
        out.csv(df, f"ablation_{name}")
        summ = sources_summary(df, prev_heads)
        results[name] = {
            **summ,
            "pattern_check_max_abs_err": df.attrs.get("pattern_check_max_abs_err"),
            "top_rows": df[df.side != "both"].head(10)[["source", "side", "drop", "relative_drop", "prev_mass"]],
        }
        heads_only = df[df.side.isin(["query", "key"]) & df.source.str.match(r"^L\d+H\d+$")]
        print(
            heads_only.head(10)[
                [c for c in ("source", "side", "drop", "relative_drop", "q_ratio", "k_ratio") if c in df]
            ].to_string(index=False, float_format=lambda x: f"{x:.4f}")
        )
        zmax = max(1e-6, float(heads_only["drop"].abs().max()) if len(heads_only) else 0.0)
        for j, side in enumerate(("query", "key")):
            g = drop_grid(df, l, H, side)
            fig.add_trace(
                go.Heatmap(
                    z=g.numpy(),
                    x=list(range(H)),
                    y=list(range(l)),
                    zmin=-zmax,
                    zmax=zmax,
                    zmid=0,
                    colorscale="RdBu_r",
                    showscale=(i == 0 and j == 0),
                    colorbar=dict(title="drop in prev. mass", tickformat=".2g"),
                    hovertemplate="L%{y}H%{x}: drop %{z:.4f}<extra></extra>",
                ),
                row=i + 1,
                col=j + 1,
            )
            fig.update_xaxes(title_text="head", dtick=1, row=i + 1, col=j + 1)
            fig.update_yaxes(title_text="layer", dtick=1, autorange="reversed", row=i + 1, col=j + 1)
        if is_agg:
            rel = df.set_index(["source", "side"])["relative_drop"]
            below_drop = float(rel[(BELOW, "both")])
            relay_key = (below_relayed(args.pos_group), "both")
            relayed = float(rel[relay_key]) if relay_key in rel.index else None  # None: no learned W_pos to relay
            results[name]["below_relative_drop"] = below_drop
            claims.append(
                judge_claim(
                    "aggregator_above_layer0",
                    {
                        "head": agg,
                        "layer": agg_l,
                        "relative_drop_without_layers_below": below_drop,
                        "relative_drop_wpos_averaged_below": relayed,
                    },
                    value=(agg, agg_l, below_drop, relayed),
                    preconditions=pre_agg[:1],
                    head=agg,
                    shown=f"layer {agg_l}; {below_drop:.0%} lower without the layers below"
                    + (f", {relayed:.0%} with them fed averaged W_pos" if relayed is not None else ""),
                )
            )
            upstream = upstream_summary(df, early)
            results[name]["upstream"] = upstream
            claims.append(
                judge_claim(
                    "sources_upstream",
                    upstream,
                    upstream,
                    preconditions=pre_agg
                    + [
                        Precondition(
                            "clear previous-token heads sit below the aggregator",
                            bool(early),
                            f"no clear previous-token head sits below {agg} (layer {agg_l})",
                        )
                    ],
                    head=agg,
                    shown=f"{upstream['group_drop']:.0%} lower without the early heads (chance "
                    f"{upstream['chance']:.0%})"
                    if early
                    else "",
                )
            )
            top10 = heads_only.groupby("source")["drop"].max().nlargest(10).index
            named = [s for s in POST_SOURCES if s in set(top10)]
            claims.append(
                judge_claim(
                    "sources_named_heads",
                    {"named_in_top10": named} if named_pre.ok else "n/a: not GPT-2 small's L4H11",
                    named,
                    preconditions=[named_pre],
                    head=agg,
                    shown=f"{len(named)} of 6",
                )
            )
    if not claims:  # the aggregator sits in layer 0: built from the embeddings alone; nothing upstream to read
        claims = [
            judge_claim(
                "aggregator_above_layer0",
                {"head": agg, "layer": agg_l},
                value=(agg, agg_l, float("nan")),
                preconditions=pre_agg[:1],
                head=agg,
                shown=f"layer {agg_l}",
            ),
            judge_claim("sources_upstream", {"head": agg}, {}, preconditions=pre_agg, head=agg),
            judge_claim("sources_named_heads", {"head": agg}, [], preconditions=[named_pre] + pre_agg, head=agg),
        ]
    groups_fig = group_figure(results.get(agg, {}), agg, exp.label)
    if groups_fig is not None:
        out.figure(groups_fig, "sources_groups", width=900)
    if targets:
        fig.update_layout(
            title=f"{exp.label}: drop in previous-token mass when one upstream head is removed from the "
            f"target's query or key input<br><sup>{args.ablation} ablation</sup>",
            height=420 * len(targets),
        )
        out.figure(fig, "prev_head_sources", width=1200)
    out.summary(
        {
            **exp.describe(),
            "ablation": args.ablation,
            "targets": [head_name(l, h) for l, h in targets],
            "results": results,
        },
        claims,
    )
    out.commit()


if __name__ == "__main__":
    main_entry(main)
