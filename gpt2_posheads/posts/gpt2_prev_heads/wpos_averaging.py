"""Averaging W_pos rows in groups barely matters (GPT-2 post, first section).

    gpt2-posheads pos_embed_averaging --model mini-gpt2

For each group size: KL(clean || averaged) of next-token distributions over a corpus, the probability of the right first
word of the reply on the repeat-string prompt (" apple orange" and the swapped " orange apple"; a word that is several
tokens in the model's vocabulary is replaced by a single-token noun, and said), and the previous-token mass (offset-1
diagonal) of the tracked heads. Post: output unchanged up to groups of ~20, breaks down around 50-100; L2H2, L3H3, L4H11
unaffected. A claim whose reference group size (10 or 20) was not measured is not testable; the output claims are not
testable on a model that does not copy the clean prompt (or whose context cannot hold it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

import pandas as pd
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from ...analysis.diagonals import diagonal_attention
from ...analysis.heads import HeadDefault
from ...analysis.interventions import average_pos_embed
from ...analysis.measures import kl_divergence, next_token_probs
from ...analysis.repeat_prompt import RepeatPrompt
from ...claims.catalogue import Option
from ...claims.gpt2_post import BREAK_KL, KEEP, POS_GROUP, ROUTE, model_copies, post_claim
from ...claims.route import PrevMassAveraged
from ...claims.verdicts import Claim, Precondition, finite, predicate
from ...model.loading import wpos_reason
from ...model.validation import UsageError, head_name, note
from ..result import ClaimResult
from ._run import HeadsArg, ModelRun, claim_script, prompted_run, repeat_prompts

HEADS = HeadDefault(("L2H2", "L3H3", "L4H11"), "aggregator+early", what="heads whose previous-token mass is tracked")


def _keeps_each(v) -> tuple[bool, str]:  # v: {name: (clean, intervened)}
    if not v:
        return False, "nothing measured"
    parts = [f"{k}: {a:.3g} -> {b:.3g}" + (f" ({b / a:.0%} kept)" if a > 0 else "") for k, (a, b) in v.items()]
    return all(a > 0 and b >= KEEP * a for a, b in v.values()), "; ".join(parts) + f" (each needs >= {KEEP:.0%})"


@partial(
    predicate,
    f"held if, at the largest group size (>= 50), KL(clean || averaged) >= {BREAK_KL:g} nats per token and >= 2x the "
    "KL at groups of 20",
)
def _breaks_down(v) -> tuple[bool, str]:
    kl20, kl_max, g = v
    if not (finite(kl20) and finite(kl_max)):
        return False, f"KL {kl20} at 20, {kl_max} at {g}: not finite"
    ok = g >= 50 and kl_max >= BREAK_KL and kl_max >= 2 * kl20
    return ok, (
        f"KL {kl_max:.3g} nats at groups of {g} (needs >= {BREAK_KL:g}) against {kl20:.3g} at 20 "
        f"({kl_max / kl20 if kl20 > 0 else math.inf:.3g}x; needs >= 2x)"
    )


SPECS = OUTPUT_UNCHANGED, BREAKS_DOWN, HEADS_UNAFFECTED = (
    post_claim(
        "avg_output_unchanged",
        "averaging W_pos in groups of up to 20 leaves the output unchanged",
        "99%+ on the right continuation",
        predicate(
            f"held if, under groups of 20, the right continuation keeps >= {KEEP:.0%} of its clean probability on "
            "every repeat-string prompt",
            _keeps_each,
        ),
        ROUTE,
        "a model that copies through a head reading W_pos loses the copy",
    ),
    post_claim(
        "avg_breaks_down",
        "performance breaks down around groups of 50-100",
        "breaks around 50-100",
        _breaks_down,
        why_kind="how much the model still uses W_pos coarsely; the route does not need it",
    ),
    post_claim(
        "avg_prev_heads_unaffected",
        "previous-token heads are unaffected by W_pos averaging (groups of 10)",
        "L2H2, L3H3, L4H11 unaffected",
        predicate(
            f"held if every tracked previous-token head keeps >= {KEEP:.0%} of its previous-token mass under "
            "groups of 10",
            _keeps_each,
        ),
        ROUTE,
        "a head that reads the previous position off W_pos loses it",
    ),
)

PROMPTS = dict(n_prompts=16, seq_len=256)  # the natural-text prompts it measures on by default
GROUP_SIZES = (1, 5, 10, 20, 50, 100)
TARGETS = (" apple orange", " orange apple")


def group_sizes_for(model, asked: Sequence[int], param: str = "group_sizes") -> list[int]:
    """``asked`` and 1 (clean), sorted, distinct, a size above the model's context capped at it (one group then holds
    every position; said, naming ``param``)."""
    n_ctx = model.cfg.n_ctx
    if max(asked) > n_ctx:
        capped = ", ".join(str(g) for g in asked if g > n_ctx)
        note(f"{param}: {capped} capped at the model's context, {n_ctx} (one group holds every position)")
    return sorted({min(g, n_ctx) for g in asked} | {1})


def measure(run: ModelRun, heads: list[tuple[int, int]], groups: list[int], reps: list[RepeatPrompt]) -> list[dict]:
    """Each row of ``W_pos`` replaced by the mean of its group of consecutive positions; per group size ``kl`` (nats,
    mean over the prompts' positions), ``P(<word> first | <target>)`` per prompt, ``prev_mass <head>`` per head (the
    offset-1 diagonal; at size 1 the run's ranking diagonals)."""
    model, rows = run.model, []
    for g in groups:
        edits = [average_pos_embed(g)] if g > 1 else []
        kl = kl_divergence(model, run.prompts, edits) if edits else 0.0
        diag = run.ranked().diag if g == 1 else diagonal_attention(model, run.prompts, edits=edits, progress=False)
        row = {"group_size": g, "kl": kl}
        for r in reps:
            probs = next_token_probs(model, r.tokens, edits)[0]
            key = f"P({r.next_word.strip()} first | {r.sep.join(r.words).strip()})"
            row[key] = float(probs[r.next_token_id(model.tokenizer)])
        for l, h in heads:
            row[f"prev_mass {head_name(l, h)}"] = float(diag[l, h, 1])
        rows.append(row)
    return rows


def judge(rows: list[dict], groups: list[int], heads: list, run: ModelRun, copies: Precondition) -> list[Claim]:
    """The output at groups of 20 against clean, the KL at 20 against the largest size (>= 50), each head's
    previous-token mass at groups of 10 against clean (unaffected: the heads do not read the exact position off
    ``W_pos``)."""
    by_g, gmax, names = {r["group_size"]: r for r in rows}, max(groups), [head_name(l, h) for l, h in heads]
    clean = by_g[1]
    keep = {k: (clean[k], by_g[20][k]) for k in clean if k.startswith("P(")} if 20 in by_g else {}
    kept = {n: (clean[f"prev_mass {n}"], by_g[10][f"prev_mass {n}"]) for n in names} if 10 in by_g else {}
    big, no_large = gmax >= 50 and 20 in by_g, f"no group size of 50 or more was measured (largest {gmax})"
    large = Precondition("a group size of 50 or more was measured", gmax >= 50, no_large)
    unmeasured = f"were not measured (--group-sizes {','.join(map(str, groups))})"
    g10, g20 = (
        Precondition(f"groups of {g} were measured", g in groups, f"groups of {g} {unmeasured}") for g in (10, 20)
    )
    kls = {"kl_g20": by_g.get(20, {}).get("kl"), f"kl_g{gmax}": by_g[gmax]["kl"]}
    kl_value = (by_g[20]["kl"], by_g[gmax]["kl"], gmax) if big else (float("nan"), float("nan"), gmax)
    kl_shown = f"KL {by_g[20]['kl']:.3g} nats at 20, {by_g[gmax]['kl']:.3g} at {gmax}" if big else ""
    kept_shown = ", ".join(f"{n} keeps {b / a:.0%}" for n, (a, b) in kept.items() if a > 0)
    pairs = PrevMassAveraged(kept, group=POS_GROUP).measured()  # the pairs the route conclusion reads
    keep_shown = ", ".join(f"{k.split(' first')[0]} keeps {b / a:.0%}" for k, (a, b) in keep.items() if a > 0)
    prev_heads, probs = [g10] + [run.prev_head(x) for x in heads], {f"{k} clean -> g20": v for k, v in keep.items()}
    return [
        OUTPUT_UNCHANGED.judge(probs, keep, [g20, copies], readout=keep_shown),
        BREAKS_DOWN.judge(kls, kl_value, [g20, large, copies], readout=kl_shown),
        HEADS_UNAFFECTED.judge(pairs, kept, prev_heads, head=",".join(names), readout=kept_shown),
    ]


def figure(rows: list[dict], copies: bool, label: str) -> go.Figure:
    """KL, P(right continuation) and previous-token masses against the group size (log axis); when the model does not
    copy even clean, the probability panel says so (a flat line at zero would read as "averaging kills copying")."""
    titles = ["KL(clean || averaged), nats", "P(right continuation)", "previous-token mass"]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles)
    gs = [r["group_size"] for r in rows]
    series = {"kl": ("KL", 1)} | {k: (k, 2) for k in rows[0] if k.startswith("P(")}  # key: (name, panel)
    series |= {k: (k[10:], 3) for k in rows[0] if k.startswith("prev_mass")}
    for key, (name, col) in series.items():
        fig.add_trace(go.Scatter(x=gs, y=[r[key] for r in rows], name=name, mode="lines+markers"), 1, col)
    if not copies:
        where = dict(row=1, col=2, x=0.5, y=0.5, xref="x2 domain", yref="y2 domain", showarrow=False)
        style = dict(font=dict(size=13, color="#6e7781"), bgcolor="rgba(255,255,255,0.85)")
        fig.add_annotation(text="not testable: the model does not copy<br>these prompts even clean", **where, **style)
    fig.update_xaxes(type="log", title="group size", tickvals=gs, ticktext=[str(g) for g in gs])
    fig.update_yaxes(range=[0, 1], tickformat=".2f", row=1, col=2)
    fig.update_yaxes(range=[0, 1], tickformat=".2f", row=1, col=3)
    fig.update_layout(
        title=f"{label}: averaging W_pos rows in groups", height=450, legend=dict(orientation="h", y=-0.25)
    )
    return fig


def _prepare(model, kwargs: dict, args) -> None:
    if model is None:
        targets = [t if t.startswith(" ") else " " + t for t in kwargs["targets"].split(",") if t.strip()]
        if not targets:
            raise UsageError("--targets", "is empty", "comma-separated targets like ' apple orange, orange apple'")
        kwargs["targets"] = targets
    elif wpos_reason(model, str(args.model_dir or args.model)) is None:
        # adjusted and said in the options' names; the function keeps them
        kwargs["group_sizes"] = group_sizes_for(model, kwargs["group_sizes"], "--group-sizes")


def _console(result: ClaimResult, options: dict) -> None:
    if "not_applicable" in result.numbers:
        print(f"not applicable: {result.numbers['not_applicable']}")
    for row in result.numbers.get("rows", []):
        shown = " | ".join(f"{k} {v:.3f}" for k, v in row.items() if k.startswith(("P(", "prev_mass")))
        print(f"group {row['group_size']:>4}: KL {row['kl']:.4f} | {shown}")


@claim_script(
    "pos_embed_averaging",
    takes=("seed",),
    order=4,
    claims=SPECS,
    **PROMPTS,
    heads=HEADS,
    options=(
        Option(
            "--group-sizes",
            "1,5,10,20,50,100",
            "W_pos group sizes (1 = clean; sizes above the model's context are capped at it, and said)",
            parse="int_list",
            low=1,
        ),
        Option("--targets", " apple orange, orange apple", "comma-separated repeat-string targets", str),
    ),
    prepare=_prepare,
    console=_console,
)
def pos_embed_averaging(
    model=None,
    prompts: torch.Tensor | None = None,
    heads: HeadsArg = None,
    *,
    group_sizes: Sequence[int] = GROUP_SIZES,
    targets: Sequence[str] = TARGETS,
    seed: int = 0,
    run: ModelRun | None = None,
) -> ClaimResult:
    """Average ``W_pos`` rows in groups of each size; measure the output and the heads' previous-token mass.

    ``prompts``: what the KL runs over. ``group_sizes``: as :func:`group_sizes_for`; the claims compare 10, 20 and the
    largest (>= 50). ``targets``: a leading space added where missing, then :func:`._run.repeat_prompts`. ``seed``: the
    demonstrations'. ``numbers``: ``targets``, ``group_sizes``, ``rows`` (also a table), or ``not_applicable``.
    """
    group_sizes = list(group_sizes)
    if not group_sizes or not all(isinstance(g, int) and g >= 1 for g in group_sizes):
        raise ValueError(f"group_sizes: {group_sizes} must be integers >= 1, at least one (e.g. 1,5,10,20,50,100)")
    targets = [t if t.startswith(" ") else " " + t for t in targets if t.strip()]
    if not targets:
        raise ValueError("targets: is empty; repeat-string targets like ' apple orange'")
    run = prompted_run(model, prompts, run, **PROMPTS).ranked()
    chosen, how = run.heads(heads, HEADS)
    result = ClaimResult("pos_embed_averaging", run.label)
    result.numbers.update(heads=[head_name(l, h) for l, h in chosen], heads_chosen=how)
    if reason := wpos_reason(run.model, run.label):  # W_pos averaging does not apply: every claim not testable
        result.numbers["not_applicable"] = reason
        result.claims = [c.untested(f"not applicable: {reason}", {"not_applicable": reason}) for c in SPECS]
        return result
    groups = group_sizes_for(run.model, group_sizes)
    reps, no_prompt = repeat_prompts(run.model, targets, n_given=0, seed=seed)
    targets = [r.sep.join(r.words) for r in reps] or targets  # as measured (single-token words)
    rows = measure(run, chosen, groups, reps)
    copies = (
        Precondition("the repeat-string prompt fits the context", False, f"not testable here: {no_prompt}")
        if no_prompt
        else model_copies({k: v for k, v in rows[0].items() if k.startswith("P(")})
    )
    result.figure(figure(rows, copies.ok, run.label), "pos_embed_averaging", width=1400)
    result.claims = judge(rows, groups, chosen, run, copies)
    result.table(pd.DataFrame(rows), "pos_embed_averaging")
    result.numbers.update(targets=targets, group_sizes=groups, rows=rows)
    return result
