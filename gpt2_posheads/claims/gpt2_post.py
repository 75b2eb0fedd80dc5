"""The GPT-2 post's (``004``) claims as rules, written down before anything is measured.

Each entry of :data:`CLAIMS` is the post's sentence, the post's number, the :class:`Rule` that decides it, and what
the claim can tell apart (:attr:`ClaimSpec.tells`): a *route* claim says whether the sharp head is built the post's
way (from early heads that read extended positions) rather than another way with the same behaviour (reading the
previous position straight off ``W_pos``); a *description* says what a head or a matrix looks like, and holds on
either route. Scripts call :func:`judge_claim` with their measurement and the preconditions that make the claim
testable on the model at hand (the model copies; the head is a clear previous-token head; ...).

Every threshold has a stated reason (the post's words and numbers, a chance level, or a level random models stay
below), and where the post's claim has two parts ("tremendous damage" to early heads, "minimal damage" to L4H11)
the rule tests both:

* "attends almost exclusively to the previous token": ratio (second-greatest diagonal / greatest) <= 0.10
  (L4H11: 0.01; the next head, L5H6, already 0.18);
* "in a category all on its own": that, and the next previous-token head is not sharp (> 0.10) and >= 5x less so;
* "output still pretty much unchanged": the right continuation keeps >= 80% of its clean probability;
* "starts to break down around 50 or 100": at a group of >= 50 the output moves >= 0.1 nat per token (random models
  stay below 0.01) and >= 2x as far as at groups of 20, on a model that copies;
* "unaffected" / "nearly identical": a head keeps >= 80% of its previous-token mass;
* "interferes" / "visibly disrupted": on the masked rows, the head loses >= half its previous-token attention;
* "tremendous damage ... minimal damage": the early head's pattern moves >= 0.05 nat (JS, about 15% of each row's
  mass) and >= 2x as far as the aggregator's, which keeps >= 80% of its previous-token mass;
* "L4H11 uses information put in the residual stream by previous layers": removing what the layers below write
  lowers its previous-token mass by >= half, and what they write is not W_pos relayed (fed W_pos averaged in groups
  of 10, they leave it >= 80%); "an aggregator of the earlier previous-token heads": removing those
  heads together does so, and >= 2x as much as removing as many other heads from below (the median of random
  groups: the chance level);
* "the next token is pirate": after the edit with output x2, P(third) > P(second) and rose >= 0.2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..analysis.diagonals import CLEAR_PREV_RATIO, is_clear_prev, prev_token_stats
from ..analysis.interventions import MASK_EVERY
from .verdicts import Claim, Precondition, Rule, at_least, at_most, finite, judge, predicate, within

# model-level preconditions, shared by several scripts
COPY_THRESHOLD = 0.5  # P(right continuation) on the repeat-string prompt for "the model copies"
SHARP_RATIO = 0.10  # "almost exclusively the previous token": L4H11 0.01, while the next head (L5H6) is at 0.18
KEEP = 0.80  # "unaffected", "pretty much unchanged": at least 80% kept
POS_GROUP = 10  # the post's group size of W_pos (and extended-embedding) averaging, which the route conclusion reads
HALF = 0.50  # "disrupted", "relies on": at least half of the previous-token attention gone
BREAK_KL = 0.1  # nats per token: "performance breaks down" (random models move < 0.01 at groups of 100)
DAMAGE_JS = 0.05  # nats of Jensen-Shannon per row: about 15% of a row's attention moved (visible in the figure)

ROUTE = "route"
DESCRIBES = "describes"


@dataclass(frozen=True)
class ClaimSpec:
    key: str
    claim: str
    post: str
    rule: Rule
    tells: str = DESCRIBES  # ROUTE: tells the post's route from a head that reads W_pos; DESCRIBES: holds on both
    why_kind: str = ""  # why it is (or is not) a route claim, in a sentence


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
    if not v:
        return False, "nothing measured"
    parts = [f"{k}: {a:.3g} -> {b:.3g}" + (f" ({b / a:.0%} kept)" if a > 0 else "") for k, (a, b) in v.items()]
    return all(a > 0 and b >= KEEP * a for a, b in v.values()), "; ".join(parts) + f" (each needs >= {KEEP:.0%})"


# what an infinite sharpest ratio means (analysis.diagonals.sharpest_prev_ratio): every head was ranked, none tops at
# the previous token; said as such, not as a number that is not finite
NO_PREV_HEAD = "no previous-token head: no head's greatest diagonal is the previous token (offset 1)"
_SHARPEST = at_most(SHARP_RATIO, "ratio of the sharpest previous-token head")


def _sharp(v) -> tuple[bool, str]:
    """``v``: the sharpest previous-token ratio, ``inf`` where the model has no previous-token head."""
    if v == math.inf:
        return False, NO_PREV_HEAD
    return _SHARPEST.decide(v)


def _stands_alone(v) -> tuple[bool, str]:
    """``v``: ``(sharpest ratio, next previous-token head's ratio or None)``."""
    first, second = v
    if not finite(first):  # inf: no previous-token head (a NaN never reaches a rule)
        return False, NO_PREV_HEAD
    if first > SHARP_RATIO:
        return False, f"the sharpest ratio {first:.3g} is not sharp (> {SHARP_RATIO:g})"
    if second is None or not finite(second):
        return True, f"ratio {first:.3g}, and no other previous-token head"
    ok = second > SHARP_RATIO and second >= 5 * first
    times = f"{second / first:.3g}x" if first > 0 else "infinitely"
    return ok, (
        f"ratio {first:.3g}; the next previous-token head {second:.3g} ({times} less sharp"
        + ("" if second > SHARP_RATIO else f", itself sharp: <= {SHARP_RATIO:g}")
        + f"; needs > {SHARP_RATIO:g} and >= 5x)"
    )


def built_from_below(name: str, layer: int, drop_below: float, relayed: float | None) -> tuple[bool, str]:
    """The relay-aware rule of ``aggregator_above_layer0`` as a pure function: ``(held, why)``.

    Held if the head sits in layer >= 1, removing what the layers below write lowers its previous-token mass by >=
    half (``drop_below``), and feeding the layers below ``W_pos`` averaged in groups of 10 (their writes patched into
    the head's inputs, its own ``W_pos`` left alone) lowers it by at most 1 - 80% = 20% (``relayed``): what the
    layers below give it is computed, not ``W_pos`` passed on. ``relayed=None``: the model has no learned ``W_pos``,
    so there is nothing to relay and ``drop_below`` decides alone.
    """
    if layer == 0:
        return False, f"{name} sits in layer 0: it can only read the token and positional embeddings"
    if not finite(drop_below):
        return False, f"{name}: the drop without the layers below is {drop_below}, not a finite number"
    below = f"without what layers 0-{layer - 1} write, {name}'s previous-token mass falls {drop_below:.0%}"
    if drop_below < HALF:
        return False, f"{below} (needs >= {HALF:.0%})"
    if relayed is None:
        return True, f"{below} (needs >= {HALF:.0%}); the model has no learned W_pos, so nothing is relayed"
    if not finite(relayed):
        return False, f"{below}; the drop with W_pos averaged below is {relayed}, not a finite number"
    limit = 1 - KEEP
    relay = (
        f"with the layers below fed W_pos averaged in groups of {POS_GROUP}, it falls {relayed:.0%} (needs <= "
        f"{limit:.0%}: what they give it must not be W_pos passed on)"
    )
    if 1 - relayed < KEEP:  # it keeps less than 80%
        return False, f"{below} (needs >= {HALF:.0%}), but {relay}: the layers below relay W_pos"
    return True, f"{below} (needs >= {HALF:.0%}); {relay}"


def _built_from_below(v) -> tuple[bool, str]:
    """``v``: ``(name, layer, relative drop when everything the layers below write is removed[, relative drop when
    the layers below are fed W_pos averaged in groups of 10, None without learned W_pos])``: the relay-aware rule,
    :func:`built_from_below`."""
    name, layer, drop = v[:3]
    return built_from_below(name, layer, drop, v[3] if len(v) > 3 else math.nan)


def _drops_half(v) -> tuple[bool, str]:
    """``v``: ``(clean, intervened)`` previous-token mass on the masked rows."""
    clean, new = v
    if not (finite(clean) and finite(new)) or clean <= 0:
        return False, f"previous-token mass on the masked rows {clean} -> {new}: nothing to compare"
    drop = 1 - new / clean
    return drop >= HALF, (
        f"on the masked rows, previous-token mass {clean:.3g} -> {new:.3g}: {drop:.0%} lower (needs >= {HALF:.0%})"
    )


def _early_self_suppressing(v) -> tuple[bool, str]:
    n_self, n = v
    ok = n_self >= 2 and 2 * n_self >= n
    return ok, f"{n_self} of {n} early clear previous-token heads are self-suppressing (needs >= 2, and >= half)"


def _is_label(label: str):
    def decide(v):
        name, got = v
        return got == label, f"{name} is labelled {str(got).replace('_', '-')}"

    return decide


def _breaks_down(v) -> tuple[bool, str]:
    """``v``: ``(KL at groups of 20, KL at the largest group, largest group size)``."""
    kl20, kl_max, g = v
    if not (finite(kl20) and finite(kl_max)):
        return False, f"KL {kl20} at 20, {kl_max} at {g}: not finite"
    ok = g >= 50 and kl_max >= BREAK_KL and kl_max >= 2 * kl20
    return ok, (
        f"KL {kl_max:.3g} nats at groups of {g} (needs >= {BREAK_KL:g}) against {kl20:.3g} at 20 "
        f"({kl_max / kl20 if kl20 > 0 else math.inf:.3g}x; needs >= 2x)"
    )


def _hurts_early_more(v) -> tuple[bool, str]:
    """``v``: ``(JS of the early head, JS of the aggregator, share of the aggregator's previous-token mass kept)``."""
    js_e, js_a, keep = v
    if not all(finite(x) for x in v):
        return False, f"JS {js_e} (early), {js_a} (aggregator), kept {keep}: not finite"
    ok = js_e >= DAMAGE_JS and js_e >= 2 * js_a and keep >= KEEP
    return ok, (
        f"early head JS {js_e:.3g} nats (needs >= {DAMAGE_JS:g}: damaged), "
        f"{js_e / js_a if js_a > 0 else math.inf:.3g}x the aggregator's {js_a:.3g} (needs >= 2x); the aggregator "
        f"keeps {keep:.0%} of its previous-token mass "
        f"(needs >= {KEEP:.0%}: minimal damage)"
    )


def _pools_early_heads(v) -> tuple[bool, str]:
    """``v``: dict with ``group_drop`` (relative drop with the early heads removed together), ``chance`` (median
    relative drop of random groups of as many heads from below), ``n_early``, ``n_groups``, ``top_single``."""
    g, chance = v["group_drop"], v["chance"]
    if not finite(g):
        return False, "the group drop is not a finite number"
    ok = g >= HALF and (not finite(chance) or g >= 2 * chance)
    chance_txt = (
        f"{chance:.0%} for {v['n_groups']} random groups of {v['n_early']} heads from below (needs >= 2x)"
        if finite(chance)
        else "no other heads below to compare with"
    )
    return ok, (
        f"the {v['n_early']} early previous-token heads removed together lower its previous-token mass {g:.0%} "
        f"(needs >= {HALF:.0%}); chance: {chance_txt}; largest single head: {v.get('top_single', '-')}"
    )


def helix_evr_rule(what: str, allow_quick: bool = True) -> Rule:
    """A low-dimensional helix: the top three principal components explain >= 60% of the variance (low-dimensional),
    and the third carries >= 5% of it and >= twice the fourth (a curve that leaves the plane of its first two
    components, not a line or a flat arc with noise around it; past the third is what is left over). GPT-2's W_pos:
    third 24.6% of its 1,024 rows (fourth 3.5%), 8.6% of its first 256 (fourth 4.0%). ``value``: the top-4
    explained-variance ratios."""

    def decide(evr):
        e = [float(x) for x in evr]
        if len(e) < 4 or not all(math.isfinite(x) for x in e):
            return False, f"explained variance {e}: need four finite values"
        ok = sum(e[:3]) >= 0.60 and e[2] >= 0.05 and e[2] >= 2 * e[3]
        return ok, (
            f"top-3 PCs explain {', '.join(f'{x:.1%}' for x in e[:3])} (sum {sum(e[:3]):.1%}, needs >= 60%; the third "
            f"needs >= 5%); the third is {e[2] / e[3] if e[3] > 0 else math.inf:.3g}x the fourth ({e[3]:.1%}; needs "
            ">= 2x)"
        )

    return Rule(
        f"held if the top-3 principal components of {what} explain >= 60% of its variance, and the third carries "
        ">= 5% and >= twice the fourth (a curve in three dimensions)",
        decide,
        allow_quick=allow_quick,
    )


POST_SOURCES = ("L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2")  # the early heads the post says L4H11 aggregates

CLAIMS: dict[str, ClaimSpec] = {
    c.key: c
    for c in [
        ClaimSpec(
            "sharp_prev_head",
            "a head attends almost only to the previous token",
            "L4H11: ratio 0.01",
            predicate(_SHARPEST.text, _sharp),
            why_kind="a head reading W_pos can be as sharp",
        ),
        ClaimSpec(
            "sharpest_stands_alone",
            "the sharpest head is in a class of its own",
            "0.01 vs next 0.18",
            predicate(
                f"held if the sharpest previous-token ratio is <= {SHARP_RATIO:g} and the next previous-token head "
                f"(if any) is not sharp (> {SHARP_RATIO:g}) and >= 5x less sharp",
                _stands_alone,
            ),
            why_kind="a ranking fact, on either route",
        ),
        ClaimSpec(
            "aggregator_above_layer0",
            "the sharp head is built from earlier layers, not from the embeddings alone",
            "L4H11 sits in layer 4 and reads what earlier layers wrote",
            predicate(
                "held if the sharpest previous-token head sits in a layer >= 1, removing what the layers below "
                "write (mean-ablated, from its query and key inputs together) lowers its previous-token mass by >= "
                f"{HALF:.0%}, and feeding the layers below W_pos averaged in groups of 10 (their writes patched into "
                f"its inputs, its own W_pos left alone) lowers it by <= {1 - KEEP:.0%}: the layers below compute, "
                "they do not relay W_pos",
                _built_from_below,
            ),
            ROUTE,
            "a head above layer 0 that reads W_pos loses nothing when the layers below are removed; one that reads "
            "W_pos relayed by them loses it when they are fed averaged W_pos",
        ),
        ClaimSpec(
            "half_prev_heads",
            "about half the heads have the previous diagonal greatest",
            "69 of 144 (48%)",
            within(0.30, 0.65, "fraction of heads whose greatest diagonal is the previous one"),
            why_kind="a count over the whole model",
        ),
        ClaimSpec(
            "wpos_helix",
            "W_pos lies on a low-dimensional helix",
            "top-3 PCs: 33%, 32%, 25%",
            helix_evr_rule("centred W_pos"),
            why_kind="a property of W_pos, whoever reads it",
        ),
        ClaimSpec(
            "ext_helix",
            "the extended positional embeddings also form a low-dimensional helix",
            "a helix at layer 2",
            helix_evr_rule("the extended embeddings", allow_quick=False),
            why_kind="geometry of the residual stream",
        ),
        ClaimSpec(
            "ext_same_subspace",
            "extended embeddings at layer 2 span nearly W_pos's top-3 subspace",
            "angles 8°, 9°, 10°",
            at_most(20.0, "largest principal angle at layer 2 (degrees)"),
            why_kind="geometry of the residual stream",
        ),
        ClaimSpec(
            "ext_sparser",
            "extended embeddings past layer 0 are sparser than W_pos",
            "about 3x fewer large entries",
            at_least(1.5, "layer-0 large-entry fraction / mean over later layers"),
            why_kind="geometry of the residual stream",
        ),
        ClaimSpec(
            "ext_token_independent",
            "extended embeddings barely depend on the repeated token",
            "almost the same",
            at_most(0.25, "relative spread of the extended embeddings across repeated tokens (layer 2)"),
            why_kind="geometry of the residual stream",
        ),
        ClaimSpec(
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
        ClaimSpec(
            "avg_breaks_down",
            "performance breaks down around groups of 50-100",
            "breaks around 50-100",
            predicate(
                f"held if, at the largest group size (>= 50), KL(clean || averaged) >= {BREAK_KL:g} nats per token and "
                ">= 2x the KL at groups of 20",
                _breaks_down,
            ),
            why_kind="how much the model still uses W_pos coarsely; the route does not need it",
        ),
        ClaimSpec(
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
        ClaimSpec(
            "mask_disrupts",
            f"masking attention to p-1 every {MASK_EVERY}th position in the layers below disrupts the head",
            "L4H11 visibly disrupted",
            predicate(
                f"held if, on the masked rows (every {MASK_EVERY}th query), the head loses >= {HALF:.0%} of its "
                "previous-token attention when the layers below cannot see p-1 there",
                _drops_half,
            ),
            ROUTE,
            "a head that reads W_pos does not care what the layers below attend to",
        ),
        ClaimSpec(
            "early_self_suppressing",
            "early previous-token heads suppress attention to the current token",
            "all six (L1H0, L2H2, L3H3, L2H4, L3H7, L3H2)",
            predicate(
                f"held if at least two, and at least half, of the clear previous-token heads (ratio <= "
                f"{CLEAR_PREV_RATIO:g}) below the aggregator are labelled self-suppressing by their raw-score profile",
                _early_self_suppressing,
            ),
            ROUTE,
            "tells self-suppressing early heads from early heads that boost p-1 (it says how the early heads work, "
            "not whether the aggregator reads them)",
        ),
        ClaimSpec(
            "aggregator_prev_boosting",
            "the sharp head boosts the previous token instead",
            "L4H11: bright p-1 line",
            predicate("held if the sharpest previous-token head is labelled prev-boosting", _is_label("prev_boosting")),
            why_kind="a head reading a shifted W_pos also shows a bright p-1 line",
        ),
        ClaimSpec(
            "ext_avg_hurts_early_more",
            "averaging extended embeddings hurts early heads far more than the aggregator",
            "L2H2 badly, L4H11 barely",
            predicate(
                f"held if averaging the extended embeddings (groups of 10) just before each head's layer moves the "
                f"early head's pattern >= {DAMAGE_JS:g} nats (JS) and >= 2x as far as the aggregator's, and the "
                f"aggregator keeps >= {KEEP:.0%} of its previous-token mass",
                _hurts_early_more,
            ),
            ROUTE,
            "a sharp head that reads positions (W_pos is part of the extended embeddings) is hurt as badly",
        ),
        ClaimSpec(
            "edit_moves_copy",
            "editing the aggregator's pattern with output x2 moves the copy to the third word",
            "P(pirate) 65%, P(turtle) 26%",
            predicate(
                "held if, with the edit and output x2, P(third word) > P(second word) and P(third) rose by >= 0.2",
                _edit_moves_copy,
            ),
            why_kind="it shows the head feeds induction, whichever way the head finds p-1",
        ),
        ClaimSpec(
            "sources_upstream",
            "the aggregator reads earlier previous-token heads",
            "L4H11 aggregates six early heads",
            predicate(
                "held if removing the clear previous-token heads below the aggregator together (mean-ablated, from "
                f"its query and key inputs) lowers its previous-token mass by >= {HALF:.0%}, and by >= 2x the median "
                "drop of random groups of as many heads from the layers below (chance)",
                _pools_early_heads,
            ),
            ROUTE,
            "a head that reads W_pos loses nothing when the early heads are removed",
        ),
        ClaimSpec(
            "sources_named_heads",
            "the post's six named heads feed L4H11",
            ", ".join(POST_SOURCES),
            predicate(
                "held if at least 4 of the post's six named heads are among L4H11's 10 largest upstream sources",
                lambda v: (len(v) >= 4, f"{len(v)} of 6 named heads in the top 10: {', '.join(v) or 'none'}"),
            ),
            why_kind="GPT-2 small's head names",
        ),
        ClaimSpec(
            "induction_heads_exist",
            "induction heads read the previous-token heads' output",
            "L5H1, L6H9, ...",
            at_least(0.4, "best induction score"),
            why_kind="behaviour",
        ),
    ]
}
ROUTE_CLAIMS: tuple[str, ...] = tuple(k for k, c in CLAIMS.items() if c.tells == ROUTE)


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
    claim = judge(
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
    claim.tells = spec.tells
    return claim


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


def is_prev_token_head(name: str, top_offset: int, ratio: float | None = None) -> Precondition:
    """The head's greatest diagonal is the previous one and (when ``ratio`` is given) it is clearly so: ratio <=
    :data:`~gpt2_posheads.analysis.diagonals.CLEAR_PREV_RATIO`. A weak head 'unaffected' by an intervention tells
    nothing."""
    text = f"{name} is a previous-token head (greatest diagonal offset 1" + (
        f", ratio <= {CLEAR_PREV_RATIO})" if ratio is not None else ")"
    )
    if top_offset != 1:
        return Precondition(
            text, False, f"{name} is not a previous-token head (its greatest diagonal is offset {top_offset}, not 1)"
        )
    if ratio is not None and not is_clear_prev(top_offset, ratio):
        return Precondition(
            text, False, f"{name} is not a clear previous-token head (ratio {ratio:.2f} > {CLEAR_PREV_RATIO})"
        )
    return Precondition(text, True)


def prev_head_precondition(name: str, diag_row) -> Precondition:
    """:func:`is_prev_token_head` from a head's per-diagonal masses ``[n_offsets]`` (the one ratio:
    :func:`~gpt2_posheads.analysis.diagonals.prev_token_stats`)."""
    import torch

    st = prev_token_stats(torch.as_tensor(diag_row))
    return is_prev_token_head(name, int(st["top_offset"]), float(st["ratio"]))


def helix_precondition(evr, what: str) -> Precondition:
    """``what`` (W_pos, or the extended embeddings) is a low-dimensional helix by :func:`helix_evr_rule`: comparing
    its subspace, or asking whether it depends on the token, only means something then."""
    ok, why = helix_evr_rule(what).decide(evr)
    return Precondition(f"{what}: a low-dimensional helix", ok, f"not a low-dimensional helix: {what} ({why})")


def layer_above(name: str, layer: int, low: int) -> Precondition:
    return Precondition(
        f"{name} sits above layer {low}",
        layer > low,
        f"{name} sits in layer {layer}: there is no layer below it"
        if layer == 0
        else f"{name} sits in layer {layer}, not above layer {low}",
    )
