"""The GPT-2 post's (``004``) claims as rules, written down before anything is measured.

Each entry of :data:`CLAIMS` is the post's sentence, the post's number, and the :class:`Rule` that
decides it; scripts call :func:`judge_claim` with their measurement and the preconditions that make
the claim testable on the model at hand (the model copies; the head is a previous-token head; ...).
The thresholds follow the post's words:

* "attends almost exclusively to the previous token" — ratio (second-greatest diagonal / previous
  diagonal) <= 0.10 (L4H11: 0.01; the next head, L5H6, already 0.18);
* "output still pretty much unchanged" — the right continuation keeps >= 80% of its clean probability;
* "starts to break down around 50 or 100" — KL at the largest group >= 2x KL at groups of 20;
* "unaffected" / "nearly identical" — a head keeps >= 80% of its previous-token mass;
* "interferes" — the head loses >= 20% of its previous-token mass;
* "tremendous damage ... minimal damage" — the early head's pattern moves >= 2x as far (Jensen-Shannon);
* "the next token is pirate" — after the edit with output x2, P(third) > P(second) and rose >= 0.2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.diagonals import prev_token_stats
from .verdicts import Claim, Precondition, Rule, at_least, at_most, judge, predicate, ratio_at_least, within

# model-level preconditions, shared by several scripts
COPY_THRESHOLD = 0.5  # P(right continuation) on the repeat-string prompt for "the model copies"


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    claim: str
    post: str
    rule: Rule


def _edit_moves_copy(v) -> tuple[bool, str]:
    clean_third, p_second, p_third = v
    ok = p_third > p_second and p_third >= clean_third + 0.2
    return ok, (
        f"with the edit and output x2: P(third) = {p_third:.3g} {'>' if p_third > p_second else '<='} "
        f"P(second) = {p_second:.3g}; P(third) rose from {clean_third:.3g} by {p_third - clean_third:+.3g} "
        "(needs >= +0.2)"
    )


def _keeps_each(v) -> tuple[bool, str]:
    """``v``: ``{name: (clean, intervened)}``; held if every one keeps >= 80%."""
    parts = [
        f"{k}: {a:.3g} -> {b:.3g} ({b / a:.0%})" if a > 0 else f"{k}: {a:.3g} -> {b:.3g}" for k, (a, b) in v.items()
    ]
    return all(b >= 0.8 * a for a, b in v.values()), "; ".join(parts)


def _drops(v) -> tuple[bool, str]:
    clean, new = v
    drop = 1 - new / clean if clean > 0 else 0.0
    return drop >= 0.2, f"previous-token mass {clean:.3g} -> {new:.3g}: {drop:.0%} lower (needs >= 20%)"


def _majority_self_suppressing(v) -> tuple[bool, str]:
    n_self, n = v
    return n_self * 2 >= n and n > 0, f"{n_self} of {n} early previous-token heads are self-suppressing (needs >= half)"


def _is_label(label: str):
    def decide(v):
        name, got = v
        return got == label, f"{name} is labelled {got}"

    return decide


POST_SOURCES = ("L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2")  # the early heads the post says L4H11 aggregates


def _upstream(v) -> tuple[bool, str]:
    return (
        v["n_prev_token_among_top"] >= 3 and v["top_drop"] >= 0.1 * v["clean_prev_mass"],
        f"{v['n_prev_token_among_top']} of the top 5 ({', '.join(v['top_sources'])}) are previous-token heads; "
        f"largest drop {v['top_drop']:.3g} of {v['clean_prev_mass']:.3g}",
    )


_HELIX_RULE = (
    "held if the top-3 principal components of {what} explain >= 60% of its variance and the third "
    "explains >= 1/4 of the first (a curve in three dimensions, not a line)"
)


def _helix(evr) -> tuple[bool, str]:
    """``evr``: the top-3 explained-variance ratios."""
    e = [float(x) for x in evr]
    ok = sum(e) >= 0.60 and e[2] >= 0.25 * e[0]
    return (
        ok,
        f"top-3 PCs explain {', '.join(f'{x:.1%}' for x in e)} (sum {sum(e):.1%}; third / first {e[2] / e[0]:.2f})",
    )


CLAIMS: dict[str, ClaimSpec] = {
    c.key: c
    for c in [
        ClaimSpec(
            "sharp_prev_head",
            "a head attends almost only to the previous token",
            "L4H11: ratio 0.01",
            at_most(0.10, "ratio of the sharpest previous-token head"),
        ),
        ClaimSpec(
            "sharpest_stands_alone",
            "the sharpest head is in a class of its own",
            "0.01 vs next 0.18",
            ratio_at_least(5, "second-sharpest ratio", "sharpest ratio"),
        ),
        ClaimSpec(
            "aggregator_above_layer0",
            "the sharp head is built from earlier layers, not from the embeddings alone",
            "L4H11 sits in layer 4",
            predicate(
                "held if the sharpest previous-token head sits in a layer >= 1 (a layer-0 head can only read the "
                "token and positional embeddings)",
                lambda v: (v[1] >= 1, f"{v[0]} sits in layer {v[1]}"),
            ),
        ),
        ClaimSpec(
            "half_prev_heads",
            "about half the heads have the previous diagonal greatest",
            "69 of 144 (48%)",
            within(0.30, 0.65, "fraction of heads whose greatest diagonal is the previous one"),
        ),
        ClaimSpec(
            "wpos_helix",
            "W_pos lies on a low-dimensional helix",
            "top-3 PCs: 33%, 32%, 25%",
            Rule(_HELIX_RULE.format(what="centred W_pos"), _helix, allow_quick=True),
        ),
        ClaimSpec(
            "ext_helix",
            "the extended positional embeddings also form a low-dimensional helix",
            "a helix at layer 2",
            Rule(_HELIX_RULE.format(what="the extended embeddings"), _helix),
        ),
        ClaimSpec(
            "ext_same_subspace",
            "extended embeddings at layer 2 span nearly W_pos's top-3 subspace",
            "angles 8°, 9°, 10°",
            at_most(20.0, "largest principal angle at layer 2 (degrees)"),
        ),
        ClaimSpec(
            "ext_sparser",
            "extended embeddings past layer 0 are sparser than W_pos",
            "about 3x fewer large entries",
            at_least(1.5, "layer-0 large-entry fraction / mean over later layers"),
        ),
        ClaimSpec(
            "ext_token_independent",
            "extended embeddings barely depend on the repeated token",
            "almost the same",
            at_most(0.25, "relative spread of the extended embeddings across repeated tokens (layer 2)"),
        ),
        ClaimSpec(
            "avg_output_unchanged",
            "averaging W_pos in groups of up to 20 leaves the output unchanged",
            "99%+ on the right continuation",
            predicate(
                "held if, under groups of 20, the right continuation keeps >= 80% of its clean probability on every "
                "repeat-string prompt",
                lambda v: _keeps_each(v),
            ),
        ),
        ClaimSpec(
            "avg_breaks_down",
            "performance breaks down around groups of 50-100",
            "breaks around 50-100",
            ratio_at_least(2, "KL at the largest group", "KL at groups of 20"),
        ),
        ClaimSpec(
            "avg_prev_heads_unaffected",
            "previous-token heads are unaffected by W_pos averaging (groups of 10)",
            "L2H2, L3H3, L4H11 unaffected",
            predicate(
                "held if every tracked previous-token head keeps >= 80% of its previous-token mass under groups of 10",
                lambda v: _keeps_each(v),
            ),
        ),
        ClaimSpec(
            "mask_disrupts",
            "masking attention to p-1 every 5th position in the layers below disrupts the head",
            "L4H11 visibly disrupted",
            predicate(
                "held if the head's previous-token mass falls by >= 20% when layers below it cannot see p-1 at every "
                "5th query",
                _drops,
            ),
        ),
        ClaimSpec(
            "early_self_suppressing",
            "early previous-token heads suppress attention to the current token",
            "all six (L1H0, L2H2, L3H3, L2H4, L3H7, L3H2)",
            predicate(
                "held if at least half of the previous-token heads below the aggregator's layer are labelled "
                "self-suppressing by their raw-score profile",
                _majority_self_suppressing,
            ),
        ),
        ClaimSpec(
            "aggregator_prev_boosting",
            "the sharp head boosts the previous token instead",
            "L4H11: bright p-1 line",
            predicate("held if the sharpest previous-token head is labelled prev_boosting", _is_label("prev_boosting")),
        ),
        ClaimSpec(
            "ext_avg_hurts_early_more",
            "averaging extended embeddings hurts early heads far more than the aggregator",
            "L2H2 badly, L4H11 barely",
            ratio_at_least(2, "early head's pattern change (JS)", "aggregator's (JS)"),
        ),
        ClaimSpec(
            "edit_moves_copy",
            "editing the aggregator's pattern with output x2 moves the copy to the third word",
            "P(pirate) 65%, P(turtle) 26%",
            predicate(
                "held if, with the edit and output x2, P(third word) > P(second word) and P(third) rose by >= 0.2",
                _edit_moves_copy,
            ),
        ),
        ClaimSpec(
            "sources_upstream",
            "the aggregator reads earlier previous-token heads",
            "L4H11 aggregates six early heads",
            predicate(
                "held if at least 3 of the aggregator's 5 largest upstream sources (drop in previous-token mass, "
                "either side) are previous-token heads and the largest drop is >= 10% of its clean previous-token "
                "mass",
                _upstream,
            ),
        ),
        ClaimSpec(
            "sources_named_heads",
            "the post's six named heads feed L4H11",
            ", ".join(POST_SOURCES),
            predicate(
                "held if at least 4 of the post's six named heads are among L4H11's 10 largest upstream sources",
                lambda v: (len(v) >= 4, f"{len(v)} of 6 named heads in the top 10: {', '.join(v) or 'none'}"),
            ),
        ),
        ClaimSpec(
            "induction_heads_exist",
            "induction heads read the previous-token heads' output",
            "L5H1, L6H9, ...",
            at_least(0.4, "best induction score"),
        ),
    ]
}


def judge_claim(
    key: str,
    measured,
    value=None,
    preconditions: Sequence[Precondition] = (),
    quick: bool = False,
    post: str | None = None,
    head: str = "",
    shown: str = "",
) -> Claim:
    """Judge the post's claim ``key`` (see :data:`CLAIMS`) on a measurement.

    ``post`` overrides the post's number (scripts pass ``"(GPT-2 small only)"`` style text when the
    post's per-head figure would be misread next to another model's head of the same name); ``head`` names
    the head the claim was measured on, ``shown`` the measured number for a person.
    """
    spec = CLAIMS[key]
    return judge(
        spec.claim,
        spec.post if post is None else post,
        spec.rule,
        measured,
        value,
        preconditions,
        quick,
        key=key,
        head=head,
        shown=shown,
    )


# --- preconditions -----------------------------------------------------------------------------------


def model_copies(p_clean: dict[str, float]) -> Precondition:
    """The model continues the repeat-string prompt correctly (P >= 0.5 on every prompt)."""
    worst = min(p_clean.values()) if p_clean else 0.0
    shown = ", ".join(f"{k} = {v:.3g}" for k, v in p_clean.items())
    return Precondition(
        f"the model copies on the repeat-string prompt (P(right continuation) >= {COPY_THRESHOLD})",
        worst >= COPY_THRESHOLD,
        f"the model does not copy these repeat-string prompts ({shown}; needs >= {COPY_THRESHOLD})",
    )


PREV_HEAD_MAX_RATIO = 0.5  # the post's heads under test have ratios 0.01 (L4H11) to 0.33 (L2H2, L3H3)


def is_prev_token_head(name: str, top_offset: int, ratio: float | None = None) -> Precondition:
    """The head's greatest diagonal is the previous one and (when ``ratio`` is given) it is clearly so:
    second-greatest / greatest <= 0.5. A weak head 'unaffected' by an intervention tells nothing."""
    text = f"{name} is a previous-token head (greatest diagonal offset 1" + (
        f", ratio <= {PREV_HEAD_MAX_RATIO})" if ratio is not None else ")"
    )
    if top_offset != 1:
        return Precondition(
            text, False, f"{name} is not a previous-token head (its greatest diagonal is offset {top_offset}, not 1)"
        )
    if ratio is not None and not ratio <= PREV_HEAD_MAX_RATIO:
        return Precondition(
            text, False, f"{name} is not a clear previous-token head (ratio {ratio:.2f} > {PREV_HEAD_MAX_RATIO})"
        )
    return Precondition(text, True)


def prev_head_precondition(name: str, diag_row) -> Precondition:
    """:func:`is_prev_token_head` from a head's per-diagonal masses ``[n_offsets]`` (the one ratio:
    :func:`~gpt2_posheads.analysis.diagonals.prev_token_stats`)."""
    import torch

    st = prev_token_stats(torch.as_tensor(diag_row))
    return is_prev_token_head(name, int(st["top_offset"]), float(st["ratio"]))


def layer_above(name: str, layer: int, low: int) -> Precondition:
    return Precondition(
        f"{name} sits above layer {low}",
        layer > low,
        f"{name} sits in layer {layer}: there is no layer below it"
        if layer == 0
        else f"{name} sits in layer {layer}, not above layer {low}",
    )
