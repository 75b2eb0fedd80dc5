"""The GPT-2 post's (``004``) claims: how one is declared, judged and made testable, and the thresholds its rules share.

Each claim is declared beside its measurement (``posts/gpt2_prev_heads/<script>.py``: its ``SPECS``, the claims it
judges, declared before anything is measured) with :func:`post_claim`: the post's sentence and number, its
:class:`Rule`, and its role: a *route* claim says whether the sharp head is built the post's way (from early heads that
read extended positions) rather than another way with the same behaviour (reading the previous position straight off
``W_pos``); a *description* says what a head or a matrix looks like, and holds on either route. The rules other code
reads too live here (:data:`SHARPEST_RULE`, :data:`INDUCTION_RULE`, :func:`built_from_below`, :func:`helix_evr_rule`),
with the preconditions that make a claim testable.

Every threshold has a stated reason (the post's words and numbers, a chance level, or a level random models stay below;
beside each constant below, and in each rule's text), and where the post's claim has two parts ("tremendous damage" to
early heads, "minimal damage" to L4H11; "uses information put in the residual stream by previous layers" but not
``W_pos`` relayed; "an aggregator of the earlier previous-token heads" beyond chance) the rule tests both.
"""

from __future__ import annotations

import math

from ..analysis.diagonals import CLEAR_PREV_RATIO, is_clear_prev, prev_token_stats
from .verdicts import CLAIMS as CLAIMS  # the post's modules read these four here
from .verdicts import ROUTE as ROUTE
from .verdicts import ClaimSpec as ClaimSpec
from .verdicts import Precondition, Rule, at_least, at_most, declare_claim, finite, predicate
from .verdicts import register_claim as register_claim

# model-level preconditions, shared by several scripts
COPY_THRESHOLD = 0.5  # P(right continuation) on the repeat-string prompt for "the model copies"
SHARP_RATIO = 0.10  # "almost exclusively the previous token": L4H11 0.01, while the next head (L5H6) is at 0.18
KEEP = 0.80  # "unaffected", "pretty much unchanged": at least 80% kept
POS_GROUP = 10  # the post's group size of W_pos (and extended-embedding) averaging, which the route conclusion reads
HALF = 0.50  # "disrupted", "relies on": at least half of the previous-token attention gone
BREAK_KL = 0.1  # nats per token: "performance breaks down" (random models move < 0.01 at groups of 100)
DAMAGE_JS = 0.05  # nats of Jensen-Shannon per row: about 15% of a row's attention moved (visible in the figure)

post_claim = declare_claim  # the post's claims are declared as every post's are


# what an infinite sharpest ratio means (analysis.diagonals.sharpest_prev_ratio): every head was ranked, none tops at
# the previous token; said as such, not as a number that is not finite
NO_PREV_HEAD = "no previous-token head: no head's greatest diagonal is the previous token (offset 1)"
_SHARPEST = at_most(SHARP_RATIO, "ratio of the sharpest previous-token head")


# "attends almost exclusively to the previous token" (``sharp_prev_head``), also an organism's first target; the value:
# the sharpest previous-token ratio, ``inf`` where the model has no previous-token head
SHARPEST_RULE = predicate(_SHARPEST.text, lambda v: (False, NO_PREV_HEAD) if v == math.inf else _SHARPEST.decide(v))
# the post's "induction heads" (best induction score >= 0.4): the organism's induction target (claims.organism)
INDUCTION_RULE = at_least(0.4, "best induction score")


def built_from_below(name: str, layer: int, drop_below: float, relayed: float | None) -> tuple[bool, str]:
    """The relay-aware rule of ``aggregator_above_layer0``: held if the head sits in layer >= 1, removing what the
    layers below write lowers its previous-token mass by >= half (``drop_below``), and feeding the layers below
    ``W_pos`` averaged in groups of 10 (their writes patched into the head's inputs) lowers it by at most 20%
    (``relayed``): what they give it is computed, not ``W_pos`` passed on. ``relayed=None``: no learned ``W_pos``."""
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


def helix_evr_rule(what: str, allow_quick: bool = True) -> Rule:
    """A low-dimensional helix: the top three principal components explain >= 60% of the variance (low-dimensional), and
    the third carries >= 5% of it and >= twice the fourth (a curve that leaves the plane of its first two components,
    not a line or a flat arc with noise around it; past the third is what is left over). GPT-2's W_pos: third 24.6% of
    its 1,024 rows (fourth 3.5%), 8.6% of its first 256 (fourth 4.0%). ``value``: the top-4 explained-variance
    ratios."""

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


def model_copies(p_clean: dict[str, float]) -> Precondition:
    """The model continues the repeat-string prompt (P >= 0.5 on every prompt)."""
    worst = min(p_clean.values()) if p_clean else 0.0
    shown = ", ".join(f"{k} = {v:.3g}" for k, v in p_clean.items())
    return Precondition(
        f"the model copies on the repeat-string prompt (P(right continuation) >= {COPY_THRESHOLD})",
        worst >= COPY_THRESHOLD,
        f"the model does not copy these repeat-string prompts ({shown}; needs >= {COPY_THRESHOLD})",
    )


def is_prev_token_head(name: str, top_offset: int, ratio: float | None = None) -> Precondition:
    """The head's greatest diagonal is the previous one, and clearly (ratio <= ``CLEAR_PREV_RATIO``) when ``ratio`` is
    given: a weak head 'unaffected' by an intervention tells nothing."""
    clear = f", ratio <= {CLEAR_PREV_RATIO})" if ratio is not None else ")"
    text = f"{name} is a previous-token head (greatest diagonal offset 1{clear}"
    if top_offset != 1:
        why = f"{name} is not a previous-token head (its greatest diagonal is offset {top_offset}, not 1)"
    elif ratio is not None and not is_clear_prev(top_offset, ratio):
        why = f"{name} is not a clear previous-token head (ratio {ratio:.2f} > {CLEAR_PREV_RATIO})"
    else:
        return Precondition(text, True)
    return Precondition(text, False, why)


def prev_head_precondition(name: str, diag_row) -> Precondition:
    """:func:`is_prev_token_head` from a head's per-diagonal masses ``[n_offsets]``."""
    import torch

    st = prev_token_stats(torch.as_tensor(diag_row))
    return is_prev_token_head(name, int(st["top_offset"]), float(st["ratio"]))


def helix_precondition(evr, what: str) -> Precondition:
    """``what`` is a low-dimensional helix by :func:`helix_evr_rule` (comparing subspaces only means something then)."""
    ok, why = helix_evr_rule(what).decide(evr)
    return Precondition(f"{what}: a low-dimensional helix", ok, f"not a low-dimensional helix: {what} ({why})")


def layer_above(name: str, layer: int, low: int) -> Precondition:
    why = f"{name} sits in layer {layer}" + (
        ": there is no layer below it" if layer == 0 else f", not above layer {low}"
    )
    return Precondition(f"{name} sits above layer {low}", layer > low, why)
