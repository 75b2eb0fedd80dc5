"""Raw attention scores: early previous-token heads suppress the current token, the aggregator boosts the previous one
(GPT-2 post, "Early previous-token heads: how do they work?").

    gpt2-posheads raw_scores_taxonomy --model mini-gpt2

Figures: 50x50 raw-score submatrices (before the causal mask, so the upper triangle shows the scores the mask removes)
of the chosen heads, and every head's score profile summarised as dip (the current key below the trend of older keys: a
dark main diagonal) vs spike (the previous key above that trend: a bright previous diagonal), in logits. CSV: the
classification of all heads. Post: six self-suppressing early heads, L4H11 prev-boosting. The aggregator is the model's
sharpest previous-token head; "early" heads are the clear previous-token heads (ratio <= 0.6) in layers below it.
"""

from __future__ import annotations

import math
from functools import partial

import pandas as pd
import plotly.express as px

from ...analysis.diagonals import CLEAR_PREV_RATIO, choose_aggregator, early_prev_heads
from ...analysis.heads import HeadDefault
from ...analysis.scores import LABEL_THRESHOLD, attention_scores, classify_prev_heads, score_profile
from ...claims.catalogue import Option
from ...claims.gpt2_post import ROUTE, post_claim
from ...claims.route import EarlyLabels
from ...claims.verdicts import Claim, Precondition, predicate
from ...model.validation import NothingMeasuredError, UsageError, head_name
from ...report.plotting import heatmap_grid, submatrix
from ..result import ClaimResult
from ._run import HeadsArg, ModelRun, claim_script, prompted_run

POST_HEADS = ("L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2", "L4H11")  # the six early heads and the aggregator
HEADS = HeadDefault(POST_HEADS, "top", n=4, what="heads whose raw scores are shown")


@partial(
    predicate,
    f"held if at least two, and at least half, of the clear previous-token heads (ratio <= {CLEAR_PREV_RATIO:g}) below "
    "the aggregator are labelled self-suppressing by their raw-score profile",
)
def _early_self_suppressing(v) -> tuple[bool, str]:
    n_self, n = v
    ok = n_self >= 2 and 2 * n_self >= n
    return ok, f"{n_self} of {n} early clear previous-token heads are self-suppressing (needs >= 2, and >= half)"


@partial(predicate, "held if the sharpest previous-token head is labelled prev-boosting")
def _prev_boosting(v) -> tuple[bool, str]:
    name, got = v
    return got == "prev_boosting", f"{name} is labelled {str(got).replace('_', '-')}"


SPECS = SELF_SUPPRESSING, PREV_BOOSTING = (
    post_claim(
        "early_self_suppressing",
        "early previous-token heads suppress attention to the current token",
        "all six (L1H0, L2H2, L3H3, L2H4, L3H7, L3H2)",
        _early_self_suppressing,
        ROUTE,
        "tells self-suppressing early heads from early heads that boost p-1 (it says how the early heads work, "
        "not whether the aggregator reads them)",
    ),
    post_claim(
        "aggregator_prev_boosting",
        "the sharp head boosts the previous token instead",
        "L4H11: bright p-1 line",
        _prev_boosting,
        why_kind="a head reading a shifted W_pos also shows a bright p-1 line",
    ),
)

PROMPTS = dict(n_prompts=16, seq_len=256)  # the natural-text prompts it measures on by default
COLUMNS = ["name", "trend", "spike", "dip", "lead", "label"]  # the numbers summary.json records per head


def measure(run: ModelRun, window: int, threshold: float, progress: bool = False) -> pd.DataFrame:
    """One row per head: its label, the features it rests on (``trend``, ``spike``, ``dip``, ``lead``, logits), its
    profile ``s(-w)``..``s(+w)`` (the mean centred raw score before the causal mask at key offsets ``-window..+window``)
    and ``clear_prev_token`` (top offset 1, ratio <= 0.6). The post's early heads score more advanced keys higher and
    push their own token down (a dip: a dark main diagonal), so with the future masked the previous key wins; L4H11 has
    a bright previous diagonal instead (a spike)."""
    profile = score_profile(run.model, run.prompts, window=window, progress=progress)  # [layers, heads, 2w+1]
    df = classify_prev_heads(profile, threshold=threshold)
    for i, o in enumerate(range(-window, window + 1)):
        df[f"s({o:+d})"] = profile.flatten(0, 1)[:, i].numpy()
    rank = run.ranking
    clear = set(rank[rank.is_prev_token & (rank.ratio <= CLEAR_PREV_RATIO)].name)
    df["clear_prev_token"] = df.name.isin(clear)
    return df


def judge(run: ModelRun, df: pd.DataFrame) -> tuple[list[Claim], dict]:
    """The two claims on the classification ``df``, and what they rest on (``aggregator``, ``early_prev_heads``)."""
    agg_l, agg_h = choose_aggregator(run.ranking)
    agg = head_name(agg_l, agg_h)
    early = df[df.name.isin(early_prev_heads(run.ranking, agg_l).name.tolist())]
    named = {label: tuple(early[early.label == label].name) for label in ("self_suppressing", "prev_boosting")}
    n_self, agg_label = len(named["self_suppressing"]), df.set_index("name").loc[agg, "label"]
    pre_agg = [run.prev_head((agg_l, agg_h))]
    none = f"no clear previous-token head sits below {agg} (layer {agg_l})"
    below = Precondition("there are clear previous-token heads below the aggregator", len(early) > 0, none)
    labels = EarlyLabels(agg, tuple(early.name), *named.values()).measured()  # what the route conclusion reads
    shown, boosting = f"{n_self} of {len(early)} self-suppressing", {"head": agg, "label": agg_label}
    claims = [
        SELF_SUPPRESSING.judge(
            labels, (n_self, len(early)), pre_agg + [below], head=",".join(early.name), readout=shown
        ),
        PREV_BOOSTING.judge(boosting, (agg, agg_label), pre_agg, head=agg, readout=str(agg_label).replace("_", "-")),
    ]
    return claims, {"aggregator": agg, "early_prev_heads": early[COLUMNS]}


def _prepare(model, kwargs: dict, args) -> None:
    if model is None:
        return
    fits = (min(args.seq_len, model.cfg.n_ctx) - 9) // 2  # the widest window the prompts hold
    if fits >= 3 and kwargs["window"] > fits:  # no window fits at all: the claims are not testable, and say why
        raise UsageError("--window", f"{kwargs['window']} is out of range", f"allowed 3..{fits}")


@claim_script(
    "raw_scores_taxonomy",
    takes=("progress",),
    order=6,
    claims=SPECS,
    **PROMPTS,
    heads=HEADS,
    options=(
        Option("--window", 3, "offsets -w..+w in the score profile (>= 3: the trend needs two older keys)", int, 3, 32),
        Option(
            "--threshold",
            LABEL_THRESHOLD,
            "logits a spike or dip needs to label a head (default ln 2: attention odds changed 2x)",
            float,
            low=0,
        ),
    ),
    submatrix=True,
    prepare=_prepare,
    console=lambda result, _: print(
        result.numbers["chosen_heads"].to_string(index=False, float_format="{:.2f}".format)
    ),
)
def raw_scores_taxonomy(
    model=None,
    prompts=None,
    heads: HeadsArg = None,
    *,
    window: int = 3,
    threshold: float = LABEL_THRESHOLD,
    start: int = 60,
    size: int = 50,
    progress: bool = False,
    run: ModelRun | None = None,
) -> ClaimResult:
    """Classify every head from its raw attention scores and judge the post's two claims about them.

    ``heads``: those whose raw-score submatrices are drawn (every head is classified). ``window``: key offsets
    ``-window..+window`` in the profile (``3 <= window <= (pos - 9) // 2``: the trend needs two keys older than the
    previous one). ``threshold``: logits a spike or dip needs to label a head (>= 0). ``numbers``: ``early_prev_heads``
    and ``chosen_heads`` as DataFrames of :data:`COLUMNS`, ...; ``tables``: the ``classification`` of every head.
    """
    if not (isinstance(threshold, (int, float)) and math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold: {threshold!r} is out of range; allowed a number >= 0 (logits)")
    run = prompted_run(model, prompts, run, **PROMPTS)
    # every query of the profile has w keys on each side, after the first 8 positions
    high = (run.prompts.shape[1] - 9) // 2
    if high < 3:  # not a mistake of the caller's: the model's context (or the prompts) leaves no window
        raise NothingMeasuredError(
            f"prompts of {run.prompts.shape[1]} tokens leave no score profile: offsets -3..+3 and the trend's older "
            f"keys need 15 tokens (the model's context is {run.model.cfg.n_ctx})"
        )
    if not (isinstance(window, int) and 3 <= window <= high):
        raise UsageError("window", f"{window!r} is out of range", f"allowed 3..{high} for prompts of this length")
    chosen, how = run.ranked().heads(heads, HEADS)
    result = ClaimResult("raw_scores_taxonomy", run.label)
    result.figure(raw_scores_figure(run, chosen, start, size), "raw_scores", width=1500)
    df = measure(run, window, threshold, progress)
    result.table(df, "classification")
    result.figure(taxonomy_figure(df, threshold, run), "taxonomy")
    result.claims, judged = judge(run, df)
    result.numbers.update(
        heads_chosen=how,
        window=window,
        threshold=threshold,
        label_counts=df.label.value_counts().to_dict(),
        **judged,
        chosen_heads=df[df.name.isin([head_name(l, h) for l, h in chosen])][COLUMNS],
    )
    return result


def raw_scores_figure(run: ModelRun, heads: list[tuple[int, int]], start: int, size: int):
    """The heads' ``[size, size]`` raw scores from ``start`` on prompt 0, the masked upper triangle included."""
    panels, first = {}, 0
    for l, h in heads:
        raw = attention_scores(run.model, run.prompts[0], l, h)["raw"]
        panels[head_name(l, h)], first = submatrix(raw, start, size)
    title = f"{run.label}: raw attention scores before the causal mask<br><sup>prompt 0 ({run.source}); dotted: "
    style = dict(cols=4, colorscale="Greys_r", shared_scale=False, colorbar_title="raw score", height_per_row=330)
    return heatmap_grid(
        panels, x0=first, tokens=run.tokens(), mark_offset=1, title=title + "previous token</sup>", **style
    )


def taxonomy_figure(df: pd.DataFrame, threshold: float, run: ModelRun):
    """Every head as dip (x) vs spike (y), coloured by its label; the clear previous-token heads named."""
    shown = df.assign(
        kind=df.label.map({"self_suppressing": "self-suppressing", "prev_boosting": "prev-boosting"}).fillna("neither"),
        head_kind=df.clear_prev_token.map({True: "clear previous-token head", False: "other head"}),
    )
    hover = {"trend": ":.2f", "lead": ":.2f", "dip": ":.2f", "spike": ":.2f", "kind": False, "head_kind": False}
    title = (
        f"{run.label}: raw-score profile of every head<br><sup>dip: the current key below the trend of older keys (a "
        "dark main diagonal); spike: the previous key above it (a bright previous diagonal); logits; dotted: the "
        "threshold ln 2</sup>"
    )
    labels, axes = {"kind": "label", "head_kind": "head"}, dict(x="dip", y="spike", color="kind", symbol="head_kind")
    fig = px.scatter(
        shown, **axes, hover_name="name", hover_data=hover, text=cluster_labels(shown), labels=labels, title=title
    )
    fig.update_traces(textposition="top center", textfont_size=9)
    fig.add_vline(threshold, line_dash="dot", line_color="grey")
    fig.add_hline(threshold, line_dash="dot", line_color="grey")
    fig.update_layout(xaxis_title="dip at the current key (logits)", yaxis_title="spike at the previous key (logits)")
    return fig


def cluster_labels(df: pd.DataFrame) -> list[str]:
    """One label per cluster of clear previous-token heads drawn at the same spot (within 2% of the axes' span): every
    name of the cluster on its first point, so overlapping labels never hide each other."""
    span = max(float(df.dip.max() - df.dip.min()), float(df.spike.max() - df.spike.min()), 1e-9)
    spots: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(df.itertuples()):
        if r.clear_prev_token:
            spots.setdefault((round(r.dip / (0.02 * span)), round(r.spike / (0.02 * span))), []).append(i)
    labels = [""] * len(df)
    for members in spots.values():
        labels[members[0]] = ", ".join(df.name.iloc[i] for i in members)
    return labels
