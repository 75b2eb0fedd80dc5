"""Which upstream heads make a head previous-token, and through query or key? (GPT-2 post: L4H11 aggregates L1H0, L2H2,
L3H3, L2H4, L3H7, L3H2; early heads like L2H2 compute position themselves.)

    gpt2-posheads prev_head_sources --model route-gpt2    # its aggregator and an early head
    gpt2-posheads prev_head_sources --heads L4H11,L2H2              # GPT-2 small (the default there)

For each target head: Q/K/V composition scores of every upstream head against a random baseline, and direct-path
ablation: one upstream head's output (mean-ablated by default) removed only from the target's query input or only from
its key input, and W_pos averaged in groups of 10 on that input alone; the drop in the target's previous-token mass, one
row per (source, side). For the aggregator also, from both inputs at once: everything the layers below write (is it
built from earlier layers?), the early clear previous-token heads together (does it aggregate them?) and random groups
of as many heads from below (chance). Figures: layer x head maps of the drop, query and key side by side. Default heads
off GPT-2 small: the aggregator (its sharpest previous-token head) and the sharpest clear previous-token head below it.
A head in layer 0 has nothing upstream: given with --heads it is an error; as the model's aggregator, it is built from
the embeddings alone.
"""

from __future__ import annotations

import math
from functools import partial

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...analysis import sources as upstream
from ...analysis.diagonals import early_prev_heads
from ...analysis.heads import HeadDefault
from ...claims.catalogue import Option
from ...claims.gpt2_post import HALF, KEEP, POS_GROUP, ROUTE, built_from_below, layer_above, post_claim
from ...claims.route import LayersBelowRemoved
from ...claims.verdicts import Claim, Precondition, finite, predicate
from ...model.loading import is_gpt2_small
from ...model.validation import UsageError, head_name, note, positive
from ..result import ClaimResult
from ._run import HeadsArg, ModelRun, claim_script, prompted_run

HEADS = HeadDefault(("L4H11", "L2H2"), "aggregator+early", what="target heads (layer >= 1; the aggregator first)")
POST_SOURCES = ("L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2")  # the early heads the post says L4H11 aggregates


@partial(
    predicate,
    "held if removing the clear previous-token heads below the aggregator together (mean-ablated, from its query and "
    f"key inputs) lowers its previous-token mass by >= {HALF:.0%}, and by >= 2x the median drop of random groups of as "
    "many heads from the layers below (chance)",
)
def _pools_early_heads(v) -> tuple[bool, str]:  # v: analysis.sources.upstream_summary
    g, chance = v["group_drop"], v["chance"]
    if not finite(g):
        return False, "the group drop is not a finite number"
    ok = g >= HALF and (not finite(chance) or g >= 2 * chance)
    chance_txt = "no other heads below to compare with"
    if finite(chance):
        chance_txt = f"{chance:.0%} for {v['n_groups']} random groups of {v['n_early']} heads from below (needs >= 2x)"
    return ok, (
        f"the {v['n_early']} early previous-token heads removed together lower its previous-token mass {g:.0%} "
        f"(needs >= {HALF:.0%}); chance: {chance_txt}; largest single head: {v.get('top_single', '-')}"
    )


SPECS = FROM_BELOW, UPSTREAM, NAMED = (
    post_claim(
        "aggregator_above_layer0",
        "the sharp head is built from earlier layers, not from the embeddings alone",
        "L4H11 sits in layer 4 and reads what earlier layers wrote",
        predicate(
            "held if the sharpest previous-token head sits in a layer >= 1, removing what the layers below "
            "write (mean-ablated, from its query and key inputs together) lowers its previous-token mass by >= "
            f"{HALF:.0%}, and feeding the layers below W_pos averaged in groups of 10 (their writes patched into "
            f"its inputs, its own W_pos left alone) lowers it by <= {1 - KEEP:.0%}: the layers below compute, "
            "they do not relay W_pos",
            lambda v: built_from_below(*v[:3], v[3] if len(v) > 3 else math.nan),  # name, layer, drops
        ),
        ROUTE,
        "a head above layer 0 that reads W_pos loses nothing when the layers below are removed; one that reads "
        "W_pos relayed by them loses it when they are fed averaged W_pos",
    ),
    post_claim(
        "sources_upstream",
        "the aggregator reads earlier previous-token heads",
        "L4H11 aggregates six early heads",
        _pools_early_heads,
        ROUTE,
        "a head that reads W_pos loses nothing when the early heads are removed",
    ),
    post_claim(
        "sources_named_heads",
        "the post's six named heads feed L4H11",
        ", ".join(POST_SOURCES),
        predicate(
            "held if at least 4 of the post's six named heads are among L4H11's 10 largest upstream sources",
            lambda v: (len(v) >= 4, f"{len(v)} of 6 named heads in the top 10: {', '.join(v) or 'none'}"),
        ),
        why_kind="GPT-2 small's head names",
    ),
)

PROMPTS = dict(n_prompts=16, seq_len=256)  # the natural-text prompts it measures on by default
HEAD_SOURCE = r"^L\d+H\d+$"  # a source that is one head (not W_pos, a group or the layers below)
COMPOSITION = ["q_comp", "k_comp", "v_comp", "q_ratio", "k_ratio"]


def aggregator_first(model, heads: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The role's heads (``[early, aggregator]`` off GPT-2 small; the post's order L4H11, L2H2 on it) with the
    aggregator first: the claims are about it."""
    return heads if is_gpt2_small(model) else heads[::-1]


def head_sources(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of one upstream head on one side (query or key), largest drop first."""
    return df[df.side.isin(["query", "key"]) & df.source.str.match(HEAD_SOURCE)]


def judge(run: ModelRun, agg: tuple[int, int], df, early: list, pos_group: int) -> tuple[list[Claim], dict]:
    """The three claims on the aggregator's ablation table ``df`` (``None``: it sits in layer 0, nothing upstream), and
    what the summary records beside them."""
    name = head_name(*agg)
    pre_agg = [run.prev_head(agg), layer_above(name, agg[0], 0)]
    is_l4h11, why = is_gpt2_small(run.model) and name == "L4H11", "the post's head names only mean something on"
    named_pre = Precondition("the model is GPT-2 small and the target is L4H11", is_l4h11, f"{why} GPT-2 small's L4H11")
    if df is None:  # in layer 0 nothing below was removed: absent by design, not NaN
        below = LayersBelowRemoved(name, agg[0]).measured()
        return [
            FROM_BELOW.judge(below, (name, agg[0], None, None), pre_agg[:1], head=name, readout=f"layer {agg[0]}"),
            UPSTREAM.judge({"head": name}, {}, pre_agg, head=name),
            NAMED.judge({"head": name}, [], [named_pre] + pre_agg, head=name),
        ], {}
    rel = df.set_index(["source", "side"])["relative_drop"]
    below_drop = float(rel[(upstream.BELOW, "both")])
    relay_key = (upstream.below_relayed(pos_group), "both")
    relayed = float(rel[relay_key]) if relay_key in rel.index else None  # None: no learned W_pos to relay
    up = upstream.upstream_summary(df, early)
    top10 = set(head_sources(df).groupby("source")["drop"].max().nlargest(10).index)
    named = [s for s in POST_SOURCES if s in top10]
    none = f"no clear previous-token head sits below {name} (layer {agg[0]})"
    none_below = Precondition("clear previous-token heads sit below the aggregator", bool(early), none)
    fed = f", {relayed:.0%} with them fed averaged W_pos" if relayed is not None else ""
    chance = f"{up['group_drop']:.0%} lower without the early heads (chance {up['chance']:.0%})" if early else ""
    below = LayersBelowRemoved(name, agg[0], below_drop, relayed).measured()  # what the route conclusion reads
    shown = f"layer {agg[0]}; {below_drop:.0%} lower without the layers below{fed}"
    named_in = {"named_in_top10": named} if named_pre.ok else "n/a: not GPT-2 small's L4H11"
    claims = [
        FROM_BELOW.judge(below, (name, agg[0], below_drop, relayed), pre_agg[:1], head=name, readout=shown),
        UPSTREAM.judge(up, up, pre_agg + [none_below], head=name, readout=chance),
        NAMED.judge(named_in, named, [named_pre], head=name, readout=f"{len(named)} of 6"),
    ]
    return claims, {"below_relative_drop": below_drop, "upstream": up}


def _prepare(model, kwargs: dict, args) -> None:
    if model is None:
        if kwargs["ablation"] == "resample" and args.n_prompts < 2:
            how = "use mean or zero, or --n-prompts >= 2"
            raise UsageError("--ablation", "resample needs at least two prompts", how)
    elif args.heads is None:  # the role's heads, the aggregator first: the claims are about it
        kwargs["heads"] = aggregator_first(model, kwargs["heads"])


@claim_script(
    "prev_head_sources",
    takes=("seed", "progress"),
    order=9,
    claims=SPECS,
    **PROMPTS,
    heads=HEADS,
    options=(
        Option("--ablation", "mean", "what replaces a source's output", str, choices=upstream.ABLATIONS),
        Option("--pos-group", POS_GROUP, "W_pos group size of the positional route", int, low=2),
        Option("--batch-size", 8, "prompts per forward", int, low=1),
    ),
    above_layer0=True,
    prepare=_prepare,
)
def prev_head_sources(
    model=None,
    prompts=None,
    heads: HeadsArg = None,
    *,
    ablation: str = "mean",
    pos_group: int = POS_GROUP,
    batch_size: int = 8,
    seed: int = 0,
    progress: bool = False,
    run: ModelRun | None = None,
) -> ClaimResult:
    """Trace each target head's previous-token attention to the upstream heads that make it (the module doc).

    ``heads``: the targets, the aggregator first. ``ablation``: ``"resample"`` needs two prompts or more; ``seed``: the
    random groups' (chance). ``numbers``: ``results`` per target; tables: ``ablation_<head>``, ``composition_<head>``.
    """
    if ablation not in upstream.ABLATIONS:
        raise UsageError("ablation", f"{ablation!r} is not an ablation", f"allowed {', '.join(upstream.ABLATIONS)}")
    positive("pos_group", pos_group, 2)  # batch_size >= 1: checked by name before the call (ARGUMENT_CHECKS)
    run = prompted_run(model, prompts, run, **PROMPTS).ranked()
    if ablation == "resample" and len(run.prompts) < 2:
        raise UsageError("ablation", "resample needs at least two prompts", "use mean or zero, or two prompts or more")
    chosen, how = run.heads(heads, HEADS)
    if heads is None:
        chosen = aggregator_first(run.model, chosen)
    result, rank = ClaimResult("prev_head_sources", run.label), run.ranking
    prev_heads = rank[rank.is_prev_token].name.tolist()
    targets = [(l, h) for l, h in chosen if l >= 1]
    results, dfs, agg = {}, {}, tuple(chosen[0])
    name = head_name(*agg)
    if not targets and progress:
        print(f"{name} sits in layer 0: nothing upstream to analyse")
    early = [(int(r.layer), int(r.head)) for r in early_prev_heads(rank, agg[0]).itertuples()]
    for l, h in targets:
        # removed together from the aggregator: the early heads, and random groups of as many heads from the layers
        # below (chance; a draw equal to the early heads left out)
        is_agg, target = (l, h) == agg, head_name(l, h)
        groups = upstream.early_and_chance_groups(early, l, run.model.cfg.n_heads, seed=seed) if is_agg else {}
        if progress:
            n = l * run.model.cfg.n_heads
            print(f"\n{target}: path ablation over {n} upstream heads x 2 sides ({ablation})", flush=True)
        options = dict(ablation=ablation, pos_group=pos_group, batch_size=batch_size, below=is_agg)
        df = upstream.path_ablation(run.model, run.prompts, l, h, groups=groups, **options)
        try:  # the sources' Q/K/V composition scores against a random baseline, where the weights give them
            comp = upstream.composition_scores(run.model, l, h)
            df = df.merge(comp[["source", *COMPOSITION]], on="source", how="left")
            result.table(comp, f"composition_{target}")
        except UsageError as e:
            note(f"composition scores skipped: {e}")
        if progress:
            cols = [c for c in ("source", "side", "drop", "relative_drop", "q_ratio", "k_ratio") if c in df]
            print(head_sources(df).head(10)[cols].to_string(index=False, float_format=lambda x: f"{x:.4f}"))
        result.table(df, f"ablation_{target}")
        dfs[(l, h)] = df
        results[target] = {
            **upstream.sources_summary(df, prev_heads),
            "pattern_check_max_abs_err": df.attrs.get("pattern_check_max_abs_err"),
            "top_rows": df[df.side != "both"].head(10)[["source", "side", "drop", "relative_drop", "prev_mass"]],
        }
    # the aggregator in layer 0 (not a target): built from the embeddings alone; nothing upstream to read
    result.claims, found = judge(run, agg, dfs.get(agg), early, pos_group)
    if found:
        results[name].update(found)
        result.figure(group_figure(results[name], name, run.label), "sources_groups", width=900)
    if targets:
        result.figure(figure(dfs, run.model.cfg.n_heads, ablation, run.label), "prev_head_sources", width=1200)
    result.numbers.update(
        heads_chosen=how, ablation=ablation, targets=[head_name(l, h) for l, h in targets], results=results
    )
    return result


def figure(dfs: dict, n_heads: int, ablation: str, label: str):
    """Per target (a row), layer x head maps of the drop in its previous-token mass when one upstream head is removed
    from its query input (left) or its key input (right)."""
    titles = [f"{head_name(l, h)}: {s} side" for l, h in dfs for s in ("query", "key")]
    fig = make_subplots(rows=max(1, len(dfs)), cols=2, vertical_spacing=0.12, subplot_titles=titles)
    style = dict(zmid=0, colorscale="RdBu_r", colorbar=dict(title="drop in prev. mass", tickformat=".2g"))
    style["hovertemplate"] = "L%{y}H%{x}: drop %{z:.4f}<extra></extra>"
    for i, ((l, _), df) in enumerate(dfs.items()):
        heads_only = head_sources(df)
        zmax = max(1e-6, float(heads_only["drop"].abs().max()) if len(heads_only) else 0.0)
        for j, side in enumerate(("query", "key")):
            z = upstream.drop_grid(df, l, n_heads, side).numpy()
            y, first = list(range(l)), i == j == 0
            heat = go.Heatmap(z=z, x=list(range(n_heads)), y=y, zmin=-zmax, zmax=zmax, showscale=first, **style)
            fig.add_trace(heat, row=i + 1, col=j + 1)
            fig.update_xaxes(title_text="head", dtick=1, row=i + 1, col=j + 1)
            fig.update_yaxes(title_text="layer", dtick=1, autorange="reversed", row=i + 1, col=j + 1)
    fig.update_layout(
        title=f"{label}: drop in previous-token mass when one upstream head is removed from the "
        f"target's query or key input<br><sup>{ablation} ablation</sup>",
        height=420 * len(dfs),
    )
    return fig


def group_figure(result: dict, agg: str, label: str):
    """Bars: the aggregator's previous-token mass lost when what the layers below write, the early heads together, and
    random groups of as many heads from below (median and range) are removed from its query and key inputs."""
    up = result.get("upstream") or {}
    bars = [("everything the layers below write", result["below_relative_drop"], 0, 0)]  # name, value, error -, +
    if up.get("n_early"):
        bars.append((f"the {up['n_early']} early heads together", up["group_drop"], 0, 0))
        if up.get("n_groups"):
            (low, high), mid = up["chance_range"], up["chance"]
            name = f"random groups of {up['n_early']} (median of {up['n_groups']}; bar: range)"
            bars.append((name, mid, mid - low, high - mid))
    names, values, minus, plus = (list(x) for x in zip(*bars))
    errors = dict(type="data", symmetric=False, array=plus, arrayminus=minus)
    text = [f"{v:.0%}" for v in values]
    fig = go.Figure(go.Bar(x=names, y=values, text=text, textposition="outside", error_y=errors))
    fig.add_hline(y=0.5, line_dash="dot", annotation_text="half (the rules' level)")
    fig.update_layout(
        title=f"{label}: what {agg} loses when heads below it are removed together<br><sup>share of its "
        "previous-token mass lost; mean-ablated from its query and key inputs</sup>",
        yaxis=dict(title="share of previous-token mass lost", tickformat=".0%", range=[min(0, *values) - 0.05, 1.1]),
        height=450,
    )
    return fig
