"""Verdict rules on made-up numbers: every outcome of every rule, preconditions and --quick."""

import numpy as np
import pytest
import torch

from gpt2_posheads.claims.catalogue import claims, script
from gpt2_posheads.claims.gpt2_post import (
    CLAIMS,
    is_prev_token_head,
    layer_above,
    model_copies,
    post_claim,
)
from gpt2_posheads.claims.verdicts import (
    HELD,
    NOT_HELD,
    NOT_TESTABLE,
    QUICK_WHY,
    VERDICT_COLOURS,
    VERDICTS,
    Precondition,
    at_least,
    at_most,
    claims_table,
    fmt,
    judge,
    monotone,
    not_testable,
    predicate,
    ratio_at_least,
    verdict_counts,
    within,
)


@pytest.mark.parametrize(
    "rule, value, held",
    [
        (at_most(0.1, "x"), 0.05, True),
        (at_most(0.1, "x"), 0.1, True),
        (at_most(0.1, "x"), 0.2, False),
        (at_most(0.1, "x"), float("inf"), False),
        (at_most(0.1, "x"), float("nan"), False),
        (at_least(0.4, "x"), 0.5, True),
        (at_least(0.4, "x"), 0.39, False),
        (within(0.3, 0.65, "x"), 0.48, True),
        (within(0.3, 0.65, "x"), 0.2, False),
        (within(0.3, 0.65, "x"), 0.7, False),
        (ratio_at_least(2, "a", "b"), (3.0, 1.0), True),
        (ratio_at_least(2, "a", "b"), (1.5, 1.0), False),
        (monotone("up", "x"), [1, 2, 3], True),
        (monotone("up", "x"), [1, 3, 2], False),
        (monotone("down", "x"), [3, 2, 1], True),
        (monotone("up", "x", tolerance=0.1), [1, 2, 1.9], True),
        (monotone("up", "x"), [1], False),
    ],
)
def test_rule_outcomes(rule, value, held):
    ok, why = rule.decide(value)
    assert ok is held and why


def test_judge_vocabulary_and_keys():
    c = judge("c", "post", at_most(0.1, "ratio"), {"ratio": 0.05}, 0.05, head="L4H11").as_dict()
    assert set(c) == {"claim", "post", "measured", "rule", "verdict", "why", "head", "readout"}
    assert c["verdict"] == "held" and c["rule"] == "held if ratio <= 0.1"
    assert c["head"] == "L4H11" and c["readout"] == "0.0500"  # the measured number for a person, 3 digits
    assert judge("c", "p", at_most(0.1, "r"), 0.5).verdict == "not held"


@pytest.mark.parametrize(
    "x, shown",
    [
        (0.0123456, "0.0123"),
        (4.0762, "4.08"),
        (123.456, "123"),
        (69, "69"),
        (1e-19, "1.00e-19"),
        (12345678.0, "1.23e+07"),
        (float("nan"), "nan"),
    ],
)
def test_numbers_for_a_person(x, shown):
    assert fmt(x) == shown


def test_failed_precondition_is_not_testable_even_if_the_number_looks_good():
    c = judge(
        "c",
        "p",
        at_least(0.4, "score"),
        0.9,
        preconditions=[Precondition("model copies", False, "the model does not copy (P = 0.00005)")],
    )
    assert c.verdict == "not testable" and c.why == "not testable here: the model does not copy (P = 0.00005)"


def test_quick_runs_are_not_testable_unless_the_rule_allows():
    assert judge("c", "p", at_most(0.1, "r"), 0.05, quick=True).verdict == "not testable"
    assert CLAIMS["wpos_helix"].judge({}, value=[0.33, 0.32, 0.25, 0.035], quick=True).verdict == "held"  # a matrix


def test_the_l4h11_edit_on_a_model_that_does_not_copy_is_not_testable():
    # a model that does not copy: clean P(turtle) 0.00005, and P(pirate) > P(turtle) already before the edit
    c = CLAIMS["edit_moves_copy"].judge(
        {},
        value=(0.0001, 0.00005, 0.0002),
        preconditions=[model_copies({"P(turtle | ninja)": 0.00005})],
    )
    assert c.verdict == "not testable"
    held = CLAIMS["edit_moves_copy"].judge({}, value=(0.001, 0.26, 0.65), preconditions=[model_copies({"P": 0.99})])
    assert held.verdict == "held"
    # the third word must rise, not only beat a collapsed second word
    assert CLAIMS["edit_moves_copy"].judge({}, value=(0.001, 0.01, 0.05)).verdict == "not held"


UP = {"group_drop": 0.87, "chance": 0.01, "n_early": 4, "n_groups": 63, "top_single": "L1H3 (query) 10%"}


@pytest.mark.parametrize(
    "key, value, verdict",
    [
        ("sharp_prev_head", 0.01, "held"),
        ("sharp_prev_head", 0.6, "not held"),
        ("half_prev_heads", 69 / 144, "held"),
        ("half_prev_heads", 0.1, "not held"),
        ("sharpest_stands_alone", (0.01, 0.18), "held"),  # GPT-2: L4H11 0.01, L5H6 0.18
        ("sharpest_stands_alone", (0.01, None), "held"),  # the only previous-token head
        ("sharpest_stands_alone", (0.6, 0.8), "not held"),  # nothing sharp
        ("sharpest_stands_alone", (0.001, 0.006), "not held"),  # the next one is sharp too: no class of its own
        ("sharpest_stands_alone", (0.0, 0.0), "not held"),
        ("sharpest_stands_alone", (None, None), "not held"),  # no previous-token head at all
        ("sharpest_stands_alone", (float("nan"), None), "not testable"),  # NaN: the ratio was not measured
        ("avg_output_unchanged", {"a": (0.99, 0.98)}, "held"),
        ("avg_output_unchanged", {"a": (0.99, 0.5)}, "not held"),
        ("avg_output_unchanged", {}, "not held"),
        ("avg_breaks_down", (0.05, 1.0, 100), "held"),
        ("avg_breaks_down", (0.0008, 0.0086, 100), "not held"),  # 10x, but nothing breaks: below 0.1 nat
        ("avg_breaks_down", (0.5, 0.6, 100), "not held"),  # broken already at 20
        ("avg_breaks_down", (0.05, 1.0, 30), "not held"),  # 30 is not "around 50-100"
        ("avg_prev_heads_unaffected", {"L4H11": (0.9, 0.88)}, "held"),
        ("avg_prev_heads_unaffected", {"L4H11": (0.9, 0.3)}, "not held"),
        ("mask_disrupts", (0.9, 0.3), "held"),
        ("mask_disrupts", (0.9, 0.5), "not held"),  # 44% of the masked rows' attention lost: not half
        ("mask_disrupts", (0.0, 0.0), "not held"),
        ("early_self_suppressing", (6, 6), "held"),
        ("early_self_suppressing", (2, 4), "held"),
        ("early_self_suppressing", (1, 6), "not held"),
        ("early_self_suppressing", (1, 1), "not held"),  # one early head is not "the early heads"
        ("early_self_suppressing", (0, 0), "not held"),
        ("aggregator_prev_boosting", ("L4H11", "prev_boosting"), "held"),
        ("aggregator_prev_boosting", ("L4H11", "self_suppressing"), "not held"),
        ("ext_avg_hurts_early_more", (0.3, 0.01, 0.95), "held"),
        ("ext_avg_hurts_early_more", (0.3, 0.2, 0.95), "not held"),  # not 2x
        ("ext_avg_hurts_early_more", (0.6, 0.3, 0.4), "not held"),  # the aggregator badly hurt too
        ("ext_avg_hurts_early_more", (2e-6, 1e-6, 1.0), "not held"),  # nothing hurt: below the damage level
        ("wpos_helix", [0.334, 0.323, 0.246, 0.035], "held"),  # GPT-2's real W_pos, 1,024 rows
        ("wpos_helix", [0.500, 0.328, 0.086, 0.040], "held"),  # its first 256 rows
        ("wpos_helix", [0.553, 0.066, 0.032, 0.020], "not held"),  # one dominant direction: not a helix
        ("ext_helix", [0.923, 0.040, 0.018, 0.002], "not held"),  # a near-line, however clean its third component
        ("wpos_helix", [0.3, 0.1, 0.05, 0.04], "not held"),
        ("wpos_helix", [0.201, 0.187, 0.155, 0.116], "not held"),  # data/mini-gpt2: no low-dimensional curve
        ("ext_same_subspace", 10.0, "held"),
        ("ext_same_subspace", 80.0, "not held"),
        ("ext_sparser", 3.0, "held"),
        ("ext_sparser", 1.0, "not held"),
        ("induction", 0.5, "held"),
        ("induction", 0.01, "not held"),
        ("aggregator_above_layer0", ("L4H11", 4, 0.9, 0.05), "held"),
        ("aggregator_above_layer0", ("L4H11", 4, 0.9, None), "held"),  # no learned W_pos: nothing to relay
        ("aggregator_above_layer0", ("L1H0", 1, 0.98, 0.97), "not held"),  # the layers below relay W_pos
        ("aggregator_above_layer0", ("L4H11", 4, 0.9, 0.3), "not held"),  # partly relayed: more than 20% lost
        ("aggregator_above_layer0", ("L4H11", 4, 0.9), "not held"),  # the relay was not measured
        ("aggregator_above_layer0", ("L2H0", 2, 0.0, 0.0), "not held"),  # above layer 0, but nothing below feeds it
        ("aggregator_above_layer0", ("L0H1", 0, None, None), "not held"),  # layer 0: nothing below, by design
        ("aggregator_above_layer0", ("L2H0", 2, float("nan"), 0.0), "not testable"),  # the drop was not measured
        ("sources_named_heads", ["L1H0", "L2H2", "L3H3", "L2H4"], "held"),
        ("sources_named_heads", ["L1H0"], "not held"),
        ("sources_upstream", UP, "held"),
        ("sources_upstream", {**UP, "group_drop": 0.4}, "not held"),  # not half
        ("sources_upstream", {**UP, "chance": 0.5}, "not held"),  # no better than as many random heads
        ("sources_upstream", {**UP, "chance": None}, "held"),  # no other heads below to compare with
        ("sources_upstream", {**UP, "chance": float("nan")}, "not testable"),  # a chance level with nothing in it
    ],
)
def test_every_post_claim_rule(key, value, verdict):
    assert CLAIMS[key].judge({}, value=value).verdict == verdict


def test_every_claim_has_a_rule_in_words():
    for spec in CLAIMS.values():
        assert spec.rule.text.startswith("held if") and spec.post and spec.claim


def test_preconditions_say_what_was_found():
    p = is_prev_token_head("L2H1", 0)
    assert not p.ok and p.failure() == "L2H1 is not a previous-token head (its greatest diagonal is offset 0, not 1)"
    assert is_prev_token_head("L2H2", 1, 0.33).ok  # the post's early heads qualify
    weak = is_prev_token_head("L0H0", 1, 0.95)  # too weak for "unaffected" to mean much
    assert not weak.ok and weak.failure() == "L0H0 is not a clear previous-token head (ratio 0.95 > 0.6)"
    assert is_prev_token_head("L3H2", 1, 0.52).ok  # the last of the post's six early heads
    assert model_copies({"a": 0.6, "b": 0.7}).ok and not model_copies({"a": 0.6, "b": 0.4}).ok
    assert "does not copy" in model_copies({"P(turtle | ninja)": 0.4}).failure()
    assert layer_above("L0H1", 0, 0).failure() == "L0H1 sits in layer 0: there is no layer below it"


def test_table_and_counts():
    cs = [
        judge("a", "p", at_most(1, "x"), 0.5),
        judge("b", "p", at_most(1, "x"), 2.0),
        judge("c", "p", at_most(1, "x"), 0.5, preconditions=[Precondition("t", False)]),
    ]
    t = claims_table(cs)
    assert "held" in t and "not held" in t and "not testable" in t and "np.float64" not in t
    assert verdict_counts(cs) == {"held": 1, "not held": 1, "not testable": 1}
    rows = t.splitlines()[2::3]  # header, rule line and why line per claim: each claim's row ends in its verdict
    assert [r.rstrip()[-12:].strip() for r in rows] == ["held", "not held", "not testable"]


@pytest.mark.parametrize(
    "value, where",
    [
        (float("nan"), ""),
        ((0.9, float("nan")), " [1]"),
        ({"group_drop": float("nan"), "chance": 0.1}, " group_drop"),
        ([0.3, float("nan"), 0.2, float("nan")], " [1], [3]"),
        (torch.tensor([0.5, float("nan")]), " [1]"),
        (np.float64("nan"), ""),
    ],
)
def test_a_rule_never_sees_a_nan(value, where):
    """A NaN is the mark of an empty measurement: the claim is not testable, saying so, and the rule is never
    asked (a rule would have said "not held")."""
    asked = []

    def decide(v):
        asked.append(v)
        return False, "judged"

    c = judge("c", "p", predicate("held if ...", decide), {"m": 1}, value)
    assert c.verdict == "not testable" and c.why == f"not testable here: nothing was measured (the value{where} is NaN)"
    assert asked == [] and c.readout == ""


def test_absent_by_design_and_infinities_reach_the_rule():
    """``None`` (no other head: absent by design), an empty list (a measured "none") and an infinity (a measured
    extreme) are the rule's to judge."""
    for value in [(0.01, None), [], float("inf"), {"chance": None, "group_drop": 0.9}]:
        c = judge("c", "p", predicate("held if ...", lambda v: (False, "judged")), {}, value)
        assert c.verdict == "not held" and c.why == "judged", value
    assert judge("c", "p", at_most(0.1, "ratio"), {}, float("inf")).verdict == "not held"
    # a failing precondition still comes first, and says its own reason
    pre = [Precondition("a previous-token head", False, "L0H0 is not a previous-token head")]
    c = judge("c", "p", at_most(0.1, "ratio"), {}, float("nan"), preconditions=pre)
    assert c.verdict == "not testable" and c.why == "not testable here: L0H0 is not a previous-token head"


# --- one verdict path, one not-testable constructor -----------------------------------------------------------


def test_the_verdict_words_and_colours_have_one_home():
    assert VERDICTS == (HELD, NOT_HELD, NOT_TESTABLE) == ("held", "not held", "not testable")
    assert VERDICT_COLOURS == {"held": "#1a7f37", "not held": "#cf222e", "not testable": "#6e7781"}


def test_not_testable_says_why_once():
    c = not_testable("c", "p", at_most(0.1, "ratio"), "the model does not copy", key="k", measured={"m": 1})
    assert c.verdict == NOT_TESTABLE and c.why == "not testable here: the model does not copy"
    assert c.rule == "held if ratio <= 0.1" and c.key == "k" and c.measured == {"m": 1} and c.readout == ""
    for given in ("not testable here: x", "not testable: x", "x"):  # a reason with a prefix of its own keeps one
        assert not_testable("c", "p", "held if ...", given).why == "not testable here: x"
    # a reason that names its own cause, as written
    assert not_testable("c", "p", "r", QUICK_WHY, here=False).why == QUICK_WHY
    c = not_testable("c", "p", "r", "w", head="L2H2", readout="0.5", role="route")
    assert c.as_dict() == {
        "claim": "c",
        "post": "p",
        "measured": None,
        "rule": "r",
        "verdict": NOT_TESTABLE,
        "why": "not testable here: w",
        "head": "L2H2",
        "readout": "0.5",
        "role": "route",
    }


def test_judge_has_one_mode_a_rule_that_decides():
    """Every post's claim is judged by its rule on the value: a rule's text alone is refused."""
    with pytest.raises(TypeError, match="rule: a Rule"):
        judge("c", "p", "held if ...", 0.5)


def test_a_rule_that_cannot_decide_is_not_testable_with_its_why():
    rule = predicate("held if a beats b", lambda v: (None, "both at the floor") if v < 1 else (True, "a beats b"))
    c = judge("c", "p", rule, {"v": 0.5}, 0.5)
    assert c.verdict == NOT_TESTABLE and c.why == "not testable here: both at the floor" and c.readout == "0.500"
    assert judge("c", "p", rule, {"v": 2}, 2).verdict == HELD


def test_what_an_untested_claim_shows():
    """A claim not tested shows no number where its number would be, on every post's row alike."""
    failed = [Precondition("it learned", False, "it did not learn")]
    rule = predicate("held if it is", lambda v: (True, "x"))
    c = judge("c", "p", rule, 1.0, preconditions=failed, readout="1.0")
    assert c.verdict == NOT_TESTABLE and c.why == "not testable here: it did not learn" and c.readout == ""
    c = judge("c", "p", rule, 1.0, quick=True, readout="1.0")
    assert c.verdict == NOT_TESTABLE and c.why == QUICK_WHY and c.readout == ""
    # the order: a failed precondition comes before the quick run
    assert judge("c", "p", rule, 1.0, preconditions=failed, quick=True).why == "not testable here: it did not learn"


def test_each_claim_is_declared_once_beside_its_script():
    """Every claim a script judges, toy or transformer, is declared once, in the ``SPECS`` its script's module
    declares it with, and ``claims()`` lists it with its post, sentence, rule text and role."""
    import sys

    listed = claims()
    for key, c in listed.items():
        module = sys.modules[script(c.script).function.__module__]
        specs = {s.key: s for s in getattr(module, "SPECS", ())}
        assert specs.get(key) is CLAIMS[key], (c.script, key)  # the registry holds the module's own declaration
        assert c.post is script(c.script).post and c.rule.startswith("held if") and c.claim
    assert set(CLAIMS) == set(listed)  # the organism report's targets too
    assert {c.post.key for c in listed.values()} == {"000", "001", "002", "003", "004"}
    assert listed["mask_disrupts"].role == "route" and listed["plateau_near_V/2"].role == ""


def test_a_claim_key_declared_twice_or_unknown_is_refused():
    spec = CLAIMS["mask_disrupts"]
    with pytest.raises(ValueError, match="'mask_disrupts' is declared twice"):
        post_claim("mask_disrupts", "another sentence", spec.post, spec.rule, spec.role)
    assert CLAIMS["mask_disrupts"] is spec
    with pytest.raises(ValueError, match="role: 'sometimes'"):
        post_claim("a_new_claim", "a sentence", "", spec.rule, "sometimes")
    assert "a_new_claim" not in CLAIMS
    with pytest.raises(KeyError, match="no_such_claim"):
        CLAIMS["no_such_claim"].judge({}, value=1.0)
