"""The verdict every claim must get on every compiled model and on ``mini-gpt2``, from how each model is built.

Written down before any claim was measured on the models; the test ``tests/organism/test_known_answers.py`` builds
the models, runs every claim script of the GPT-2 post and the organism report, and asserts this table. Where a
verdict differs, either a rule is wrong (fix the rule) or a construction is (fix the construction); the table is
never edited to match a measurement.

Models: the five compiled ones (:mod:`~gpt2_posheads.organism.compiled`; each builder's docstring says what it is)
and ``mini-gpt2``, the trained organism: a layer-0 previous-token head that reads an alternating ``W_pos`` (the toy
post's route), induction and copying. Its geometry is not set by hand: those rows are ``None``.
"""

from __future__ import annotations

from ..claims.catalogue import claims
from ..claims.verdicts import HELD, NOT_HELD, NOT_TESTABLE

MODELS = ("route-gpt2", "lookalike-wpos", "lookalike-boost", "lookalike-decoy", "lookalike-none", "mini-gpt2")

# claim key -> {model: (verdict, reason from the construction)}; None: not set by the construction. The command that
# judges a claim is its declaration's (claims.catalogue.claims), the organism report's for its targets.
_R, _W, _B, _D, _N, _M = MODELS
KNOWN: dict[str, dict[str, tuple[str, str] | None]] = {
    "sharp_prev_head": {
        _R: (HELD, "the aggregator's match with the early heads' estimate is decisive: ratio far below 0.10"),
        _W: (HELD, "the W_pos reader's kernel peaks at p-1 only: a sharp head"),
        _B: (HELD, "the same aggregator as route-gpt2"),
        _D: (HELD, "the same W_pos reader as lookalike-wpos"),
        _N: (NOT_HELD, "no head attends to the previous token"),
        _M: (HELD, "its layer-0 head (card: ratio 0.0013)"),
    },
    "sharpest_stands_alone": {
        _R: (HELD, "the next previous-token heads are the messy early heads (ratios ~0.3-0.5)"),
        _W: (HELD, "it is the only previous-token head"),
        _B: (HELD, "the next are the messy boosting heads (ratios ~0.3-0.5)"),
        _D: (HELD, "the next are the messy decoy heads (ratios ~0.3-0.5)"),
        _N: (NOT_HELD, "there is no sharp head"),
        _M: (HELD, "card: 0.0011 against 0.139"),
    },
    "half_prev_heads": {
        _R: (HELD, "8 of 16 heads: four early heads, the aggregator and three inert copies of early heads"),
        _W: (NOT_HELD, "1 of 16: only the W_pos reader"),
        **dict.fromkeys((_B, _D), (HELD, "8 of 16, as route-gpt2")),
        _N: (NOT_HELD, "no previous-token head"),
        _M: (HELD, "6 of 16 (38%) in its documented ranking"),
    },
    "wpos_helix": {
        _R: (HELD, "W_pos is GPT-2's own helix (its first 256 rows, top eight principal components)"),
        _W: (HELD, "GPT-2's helix plus fine components too small to move the principal components"),
        _B: (HELD, "GPT-2's helix"),
        _D: (HELD, "GPT-2's helix plus small fine components"),
        _N: (HELD, "GPT-2's helix"),
        _M: (NOT_HELD, "a learned W_pos whose neighbouring rows alternate in sign: no low-dimensional curve"),
    },
    "ext_helix": {
        _R: (HELD, "at layer 2 the residual's positional part is W_pos plus a count and a position 20x smaller"),
        _W: (HELD, "nothing below layer 2 writes: the extended embeddings are W_pos"),
        **dict.fromkeys((_B, _D, _N), (HELD, "W_pos plus small position features")),
        _M: None,
    },
    "ext_same_subspace": {
        _R: (HELD, "the extended embeddings are W_pos's helix plus small features: the same subspace"),
        _W: (HELD, "the extended embeddings are W_pos"),
        **dict.fromkeys((_B, _D, _N), (HELD, "W_pos's helix plus small features")),
        _M: (NOT_TESTABLE, "its W_pos is not a helix, so there is no helix subspace to compare with"),
    },
    "ext_sparser": {
        _R: (NOT_HELD, "the extended embeddings are W_pos almost unchanged: no sparser"),
        _W: (NOT_HELD, "the extended embeddings are W_pos"),
        **dict.fromkeys((_B, _D, _N), (NOT_HELD, "W_pos almost unchanged")),
        _M: None,
    },
    "ext_token_independent": {
        _R: (HELD, "on a repeated token every head writes the same vector at every position (BOS avoided)"),
        _W: (HELD, "nothing below layer 2 writes"),
        **dict.fromkeys((_B, _D), (HELD, "as route-gpt2")),
        _N: (HELD, "its heads write nothing"),
        _M: None,
    },
    "avg_output_unchanged": {
        _R: (HELD, "nothing reads W_pos: averaging it changes nothing"),
        _W: (NOT_HELD, "copying needs the W_pos reader, which averaging destroys"),
        _B: (HELD, "nothing reads W_pos"),
        _D: (NOT_HELD, "copying needs the W_pos reader"),
        _N: (NOT_TESTABLE, "it does not copy"),
        _M: (NOT_TESTABLE, "it does not copy the reply's first word (documented: P 0.0002)"),
    },
    "avg_breaks_down": {
        _R: (NOT_HELD, "nothing reads W_pos: no group size changes the output"),
        _W: (NOT_HELD, "the output already breaks at groups of 20, not between 20 and 100"),
        _B: (NOT_HELD, "nothing reads W_pos"),
        _D: (NOT_HELD, "the output already breaks at groups of 20"),
        _N: (NOT_TESTABLE, "it does not copy"),
        _M: (NOT_TESTABLE, "it does not copy the reply's first word"),
    },
    "avg_prev_heads_unaffected": {
        _R: (HELD, "nothing reads W_pos"),
        _W: (NOT_HELD, "the sharp head reads W_pos's fine components, which groups of 10 average away"),
        _B: (HELD, "nothing reads W_pos"),
        _D: (NOT_HELD, "the sharp head reads W_pos's fine components"),
        _N: (NOT_TESTABLE, "no previous-token head"),
        _M: (NOT_HELD, "its layer-0 head reads the alternating W_pos (documented: keeps 3%)"),
    },
    "mask_disrupts": {
        _R: (HELD, "masked rows: the early heads cannot see p-1, so their estimate points elsewhere"),
        _W: (NOT_HELD, "the layers below write nothing: masking them changes nothing"),
        _B: (HELD, "masked rows: the boosting heads cannot see p-1"),
        _D: (NOT_HELD, "the sharp head ignores the masked early heads"),
        _N: (NOT_TESTABLE, "no previous-token head"),
        _M: (NOT_TESTABLE, "its sharp head sits in layer 0: nothing below to mask"),
    },
    "early_self_suppressing": {
        _R: (HELD, "all four early heads: a rising score with a dip at their own token"),
        _W: (NOT_TESTABLE, "no previous-token head below the sharp head"),
        _B: (NOT_HELD, "the early heads boost p-1 and have no dip"),
        _D: (HELD, "the decoy early heads are the route's self-suppressing heads"),
        _N: (NOT_TESTABLE, "no previous-token head"),
        _M: (NOT_TESTABLE, "its sharp head sits in layer 0: no head below it"),
    },
    "aggregator_prev_boosting": {
        _R: (HELD, "its score peaks at the key the early heads point at: p-1"),
        _W: (HELD, "its W_pos kernel peaks at p-1 (a bright line that does not tell the routes apart)"),
        _B: (HELD, "the route's aggregator"),
        _D: (HELD, "the W_pos reader's kernel peaks at p-1"),
        _N: (NOT_TESTABLE, "no previous-token head"),
        _M: (HELD, "it reads p-1 off W_pos: a bright previous diagonal"),
    },
    "ext_avg_hurts_early_more": {
        _R: (HELD, "early heads read the counted position (blurred); the aggregator matches tokens (kept)"),
        _W: (NOT_TESTABLE, "no previous-token head below the sharp head"),
        _B: (HELD, "early heads read the counted position; the aggregator matches tokens"),
        _D: (NOT_HELD, "the sharp head reads W_pos, which the extended embeddings contain: averaging blurs it"),
        _N: (NOT_TESTABLE, "no previous-token head"),
        _M: (NOT_TESTABLE, "its sharp head sits in layer 0: no head below it"),
    },
    "edit_moves_copy": {
        _R: (HELD, "the induction head reads only the aggregator's write"),
        _W: (HELD, "the induction head reads only the sharp head's write (the edit does not tell routes apart)"),
        _B: (HELD, "as route-gpt2"),
        _D: (HELD, "as lookalike-wpos"),
        _N: (NOT_TESTABLE, "it does not copy"),
        _M: None,
    },
    "aggregator_above_layer0": {
        _R: (HELD, "without what layers 0-1 write (estimate, position) the aggregator loses p-1"),
        _W: (NOT_HELD, "layers 0-1 write nothing: the sharp head is built from the embeddings alone"),
        _B: (HELD, "without the early heads' estimate the aggregator loses p-1"),
        _D: (NOT_HELD, "the sharp head reads only W_pos: removing what layers 0-1 write changes nothing"),
        _N: (NOT_TESTABLE, "no previous-token head"),
        _M: (NOT_HELD, "its sharp head sits in layer 0"),
    },
    "sources_upstream": {
        _R: (HELD, "the four early heads together are the aggregator's whole estimate"),
        _W: (NOT_TESTABLE, "no previous-token head below the sharp head"),
        _B: (HELD, "the four boosting heads are the aggregator's estimate"),
        _D: (NOT_HELD, "the sharp head ignores the early heads"),
        _N: (NOT_TESTABLE, "no previous-token head"),
        _M: (NOT_TESTABLE, "its sharp head sits in layer 0"),
    },
    "sources_named_heads": dict.fromkeys(
        MODELS, (NOT_TESTABLE, "the post's head names mean something only on GPT-2 small")
    ),
    "weight_route_built": {
        _R: (HELD, "the aggregator's query reads the early heads' copy of the previous token, nothing reads W_pos"),
        _W: (NOT_HELD, "the sharp head's query-key circuit reads W_pos's fine components directly"),
        _B: (HELD, "the same aggregator as route-gpt2"),
        _D: (NOT_HELD, "the same W_pos reader as lookalike-wpos"),
        _N: (NOT_TESTABLE, "no sharp previous-token head"),
        _M: None,
    },
    "prev_text": {
        _R: (HELD, "the aggregator (as sharp_prev_head)"),
        _W: (HELD, "the W_pos reader"),
        _B: (HELD, "the aggregator"),
        _D: (HELD, "the W_pos reader"),
        _N: (NOT_HELD, "no previous-token head"),
        _M: (HELD, "card: 0.0013"),
    },
    "prev_random": {
        _R: (HELD, "the aggregator matches tokens whatever they are"),
        _W: (HELD, "the W_pos reader ignores tokens"),
        _B: (HELD, "the aggregator matches tokens whatever they are"),
        _D: (HELD, "the W_pos reader ignores tokens"),
        _N: (NOT_HELD, "no previous-token head"),
        _M: (HELD, "card: 0.0023"),
    },
    "induction": {
        _R: (HELD, "a layer-3 induction head reads the aggregator's write"),
        **dict.fromkeys((_W, _B, _D), (HELD, "a layer-3 induction head")),
        _N: (NOT_HELD, "no induction head"),
        _M: (HELD, "card: 0.84"),
    },
    "copy_loss": {
        _R: (HELD, "the induction head copies the second copy; nothing predicts the first"),
        **dict.fromkeys((_W, _B, _D), (HELD, "as route-gpt2")),
        _N: (NOT_HELD, "nothing copies"),
        _M: (HELD, "card: 0.18 nats on the second copy"),
    },
    "copies": {
        _R: (HELD, "the induction head finds the word after the first word"),
        **dict.fromkeys((_W, _B, _D), (HELD, "as route-gpt2")),
        _N: (NOT_HELD, "nothing copies"),
        _M: (HELD, "card: P 0.92"),
    },
    "heldout": {
        _R: (NOT_HELD, "a compiled model predicts only copies; it does not model text"),
        **dict.fromkeys((_W, _B, _D, _N), (NOT_HELD, "does not model text")),
        _M: (HELD, "card: 4.076 against the reference's 4.294 nats"),
    },
}


# model -> (the route conclusion it must get, gpt2_posheads.claims.route.conclude, and why, from the construction)
ROUTE_CONCLUSIONS: dict[str, tuple[str, str]] = {
    _R: ("post", "the aggregator reads the early heads' estimate; they self-suppress; nothing reads W_pos"),
    _W: ("wpos", "the sharp head reads W_pos's fine components; the layers below write nothing"),
    _B: ("boost", "route-gpt2 with early heads that boost p-1"),
    _D: ("wpos", "the sharp head reads W_pos and ignores the early heads"),
    _N: ("none", "no previous-token head"),
    _M: ("wpos", "its sharp head sits in layer 0 and reads its alternating W_pos (keeps 3% under averaging)"),
}


# The GPT-2-small stand-in (gpt2_posheads.organism.standin): the route of route-gpt2 at the post's heads, in GPT-2
# small's shape, taken for GPT-2 small by is_gpt2_small. Where its answer differs from route-gpt2's, the reason.
_STANDIN_DIFFERS: dict[str, tuple[str, str]] = {
    "half_prev_heads": (
        NOT_HELD,
        "7 of 144 heads: the six early heads and the aggregator; the rest are inert, unrelated or induction",
    ),
    "sources_named_heads": (
        HELD,
        "the six early heads sit at the post's names and together are L4H11's whole estimate",
    ),
}
# which heads each script measures with its defaults: the post's names, chosen because is_gpt2_small is true
STANDIN_HEADS: dict[str, tuple[str, ...]] = {
    "rank_prev_heads": ("L4H11",),  # the aggregator the ranking finds
    "pos_embed_averaging": ("L2H2", "L3H3", "L4H11"),
    "mask_prev_attention": ("L4H11",),
    "raw_scores_taxonomy": ("L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2", "L4H11"),
    "ext_pos_averaging": ("L2H2", "L4H11"),
    "l4h11_edit": ("L4H11",),
    "prev_head_sources": ("L4H11", "L2H2"),
}
STANDIN_ROUTE = ("post", "route-gpt2's route at the post's heads: L4H11 reads the six self-suppressing early heads")


REPORT = "mini_gpt2_report"  # the command that judges the organism's targets (claims.organism)


def script_of(key: str) -> str:
    """The command that judges claim ``key``: its declaration's, else the organism report (a behaviour target)."""
    declared = claims().get(key)
    return declared.script if declared else REPORT


def standin_expected() -> dict[tuple[str, str], tuple[str, str]]:
    """``{(script, claim key): (verdict, reason)}`` for the stand-in: route-gpt2's answers (the same route) for the
    post's nine scripts, with :data:`_STANDIN_DIFFERS` where its shape or its head names change the answer (the
    organism report compares the route model with the organism and is not run on it)."""
    out = {k: v[_R] for k, v in KNOWN.items() if v.get(_R) is not None and script_of(k) != REPORT}
    out.update(_STANDIN_DIFFERS)
    return {(script_of(k), k): v for k, v in out.items()}


def expected(model: str) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(script, claim key): (verdict, reason)}`` for ``model``, leaving out what its construction does not set."""
    return {(script_of(k), k): v[model] for k, v in KNOWN.items() if v.get(model) is not None}
