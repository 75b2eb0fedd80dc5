"""The route conclusion as a pure function of claim records: every branch of the rule, from records written the way
the scripts write them (``summary.json``'s claims, the measurements through the typed records of ``claims.gpt2_post``),
the typed records themselves, and the relay-aware rule of ``aggregator_above_layer0``."""

import json
import math

import pytest

from gpt2_posheads.claims.gpt2_post import CLAIMS, built_from_below
from gpt2_posheads.claims.record import summary_from_dict
from gpt2_posheads.claims.route import (
    BOOST,
    NONE,
    POST,
    RELAY,
    ROUTES,
    UNDETERMINED,
    WPOS,
    EarlyLabels,
    LayersBelowRemoved,
    PrevMassAveraged,
    conclude,
    kept_under_wpos_averaging,
    route_conclusion_from_summaries,
)


def rec(verdict, measured=None, head="L2H0", readout=""):
    return {"verdict": verdict, "measured": measured if measured is not None else {}, "head": head, "readout": readout}


def records(
    kept=1.0,
    layer=2,
    below=0.98,
    relayed=0.0,
    sources="held",
    mask="held",
    early="held",
    n_self=4,
    n_boost=0,
    n_early=4,
    sharp="held",
):
    """The records of route-gpt2 (the post's route) by default; each argument moves one number or verdict."""
    above_held, _ = built_from_below("L2H0", layer, below, relayed) if layer is not None else (False, "")
    early_names = [f"L1H{i}" for i in range(n_early)]
    above = LayersBelowRemoved("L2H0", layer, below, relayed).measured() if layer is not None else {"head": "L2H0"}
    early_labels = EarlyLabels("L2H0", early_names, early_names[:n_self], early_names[n_self : n_self + n_boost])
    return json.loads(  # as summary.json gives them back
        json.dumps(
            {
                "sharp_prev_head": rec(sharp, {"head": "L2H0", "ratio": 0.014}),
                "avg_prev_heads_unaffected": rec(
                    "held" if kept >= 0.8 else "not held",
                    PrevMassAveraged({"L1H3": (0.4, 0.4), "L2H0": (0.9, 0.9 * kept)}).measured(),
                ),
                "aggregator_above_layer0": rec("held" if above_held else "not held", above),
                "sources_upstream": rec(sources),
                "mask_disrupts": rec(mask),
                "early_self_suppressing": rec(early, early_labels.measured()),
            }
        )
    )


def test_the_shipped_models_records_give_their_routes():
    assert conclude(records()).route == POST  # route-gpt2
    assert conclude(records(early="not held", n_self=0, n_boost=4)).route == BOOST  # lookalike-boost
    # lookalike-wpos: keeps 19% under averaging, nothing lost without the layers below
    assert conclude(records(kept=0.19, below=0.0, sources="not testable", mask="not held")).route == WPOS
    assert conclude(records(kept=0.19, below=0.0, sources="not held", mask="not held")).route == WPOS  # decoy
    assert conclude(records(sharp="not held")).route == NONE  # lookalike-none
    c = conclude(records(kept=0.03, layer=0, below=math.nan, relayed=math.nan))  # mini-gpt2: layer 0, reads W_pos
    assert c.route == WPOS and "layer 0" in c.why


def test_a_relay_is_told_from_the_post_and_from_a_direct_reader():
    c = conclude(records(kept=0.1, below=0.98, relayed=0.97, sources="not testable", mask="not held"))
    assert c.route == RELAY
    assert [r.key for r in c.rows] == ["sharp_prev_head", "avg_prev_heads_unaffected", "aggregator_above_layer0"]
    assert c.rows[2].verdict == "not held" and "97% lower with W_pos averaged" in c.rows[2].evidence
    # it needs W_pos and the layers below, but not W_pos through them: no single route
    assert conclude(records(kept=0.1, below=0.98, relayed=0.05)).route == UNDETERMINED


@pytest.mark.parametrize(
    "change, named",
    [
        (dict(kept=0.6), "partly from W_pos"),  # between 50% and 80%: neither route
        (dict(below=0.1), "aggregator_above_layer0 is not held"),  # keeps W_pos, and loses nothing below
        (dict(relayed=0.3), "aggregator_above_layer0 is not held"),  # 30% relayed: more than the 20% allowed
        (dict(sources="not held"), "sources_upstream is not held"),  # built from below, not from the early heads
        (dict(mask="not held"), "mask_disrupts is not held"),
        (dict(sources="not testable"), "sources_upstream is not testable"),
        (dict(early="not held", n_self=1, n_boost=1), "neither mostly self-suppressing nor mostly prev-boosting"),
        (dict(early="held", n_self=2, n_boost=2), "neither mostly"),  # as many of each: no single kind of early head
        (dict(sharp="not testable"), "not testable"),
        (dict(kept=0.1, layer=None), "not measured"),
    ],
)
def test_disagreeing_evidence_is_undetermined_and_names_the_rows(change, named):
    c = conclude(records(**change))
    assert c.route == UNDETERMINED, c.line()
    assert named in c.why, c.why


def test_the_conclusion_says_which_rows_decided_it():
    c = conclude(records())
    assert c.head == "L2H0" and c.words == ROUTES[POST]
    assert [r.key for r in c.rows] == [
        "sharp_prev_head",
        "avg_prev_heads_unaffected",
        "aggregator_above_layer0",
        "sources_upstream",
        "mask_disrupts",
        "early_self_suppressing",
    ]
    assert "keeps 100%" in c.rows[1].evidence
    d = c.as_dict()
    assert d["route"] == POST and d["rows"][0]["key"] == "sharp_prev_head" and "rows:" in c.line()
    none = conclude(records(sharp="not held"))
    assert none.head == "" and [r.key for r in none.rows] == ["sharp_prev_head"]


def test_missing_or_malformed_records_never_give_a_route():
    assert conclude({}).route == UNDETERMINED
    r = records()
    del r["avg_prev_heads_unaffected"]
    assert conclude(r).route == UNDETERMINED
    r = records()
    r["avg_prev_heads_unaffected"]["measured"] = "n/a: not testable"
    assert kept_under_wpos_averaging(r, "L2H0") is None and conclude(r).route == UNDETERMINED
    r = records()
    r["avg_prev_heads_unaffected"]["measured"] = PrevMassAveraged({"L2H0": (0.0, 0.0)}).measured()  # nothing to keep
    assert conclude(r).route == UNDETERMINED


def test_the_measurements_the_route_reads_keep_their_form_on_disk():
    """The records the scripts write and the route reads back: the form summary.json files hold (the pages read
    files written before), read back after a trip through JSON."""
    averaged = PrevMassAveraged({"L2H0": (0.9, 0.45), "L1H3": (0.4, 0.4)})
    assert averaged.measured() == {"L2H0 clean -> g10": (0.9, 0.45), "L1H3 clean -> g10": (0.4, 0.4)}
    back = PrevMassAveraged.read(json.loads(json.dumps(averaged.measured())))
    assert back.kept("L2H0") == 0.5 and back.kept("L1H3") == 1.0 and back.kept("L9H9") is None
    assert PrevMassAveraged.read({"L2H0 clean -> g20": [0.9, 0.1], "L2H0 clean -> g10": [0.9, None]}).masses == {}
    assert PrevMassAveraged.read("n/a: not testable").masses == {}

    above = LayersBelowRemoved("L2H0", 2, 0.98, None)
    assert above.measured() == {
        "head": "L2H0",
        "layer": 2,
        "relative_drop_without_layers_below": 0.98,
        "relative_drop_wpos_averaged_below": None,  # no learned W_pos: nothing to relay
    }
    assert LayersBelowRemoved.read(json.loads(json.dumps(above.measured()))) == above
    layer0 = LayersBelowRemoved.read(LayersBelowRemoved("L0H1", 0).measured())
    assert (layer0.layer, math.isnan(layer0.below), math.isnan(layer0.relayed)) == (0, True, True)  # not measured
    assert LayersBelowRemoved.read({"head": "L2H0"}) is None

    labels = EarlyLabels("L2H0", ("L1H0", "L1H1"), ("L1H0",), ())
    assert labels.measured() == {
        "aggregator": "L2H0",
        "early_prev_heads": ["L1H0", "L1H1"],
        "self_suppressing": ["L1H0"],
        "prev_boosting": [],
    }
    assert EarlyLabels.read(json.loads(json.dumps(labels.measured()))) == labels
    assert EarlyLabels.read(None) == EarlyLabels("", (), (), ())


def test_from_summaries_reads_every_scripts_claims():
    r = records()
    full = {"claim": "c", "post": "p", "rule": "r", "why": "w"}  # the fields every record on disk has
    summaries = [
        summary_from_dict(s)
        for s in (
            {"script": "rank_prev_heads", "claims": [full | {"key": "sharp_prev_head", **r["sharp_prev_head"]}]},
            {"script": "other", "claims": [full | {"key": k, **v} for k, v in r.items() if k != "sharp_prev_head"]},
        )
    ]
    assert route_conclusion_from_summaries(summaries).route == POST


@pytest.mark.parametrize(
    "layer, below, relayed, held, says",
    [
        (2, 0.98, 0.0, True, "falls 0%"),
        (2, 0.98, 0.2, True, "falls 20%"),  # at the limit
        (2, 0.98, 0.21, False, "relay W_pos"),
        (1, 0.98, 0.97, False, "relay W_pos"),  # the relay look-alike
        (2, 0.3, 0.0, False, "needs >= 50%"),
        (0, None, None, False, "layer 0"),  # nothing below a layer-0 head: absent by design
        (2, 0.98, None, True, "no learned W_pos"),
        (2, 0.98, math.nan, False, "not a finite number"),
    ],
)
def test_the_relay_aware_rule(layer, below, relayed, held, says):
    ok, why = built_from_below("L2H0", layer, below, relayed)
    assert ok is held and says in why, why
    verdict = CLAIMS["aggregator_above_layer0"].judge({}, value=("L2H0", layer, below, relayed)).verdict
    unmeasured = any(isinstance(x, float) and math.isnan(x) for x in (below, relayed))
    assert verdict == ("not testable" if unmeasured else "held" if held else "not held")  # a NaN is never judged
