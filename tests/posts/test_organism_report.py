"""The organism report reads the post's story from other commands' results through the claim record only: a claim
as its command judged it, and a step without a run that judged it not testable, saying why."""

import json
import math

from gpt2_posheads.claims.gpt2_post import CLAIMS
from gpt2_posheads.claims.organism import Measured, Sharpest, judge_targets
from gpt2_posheads.claims.record import read_summary, write_summary
from gpt2_posheads.claims.route import NONE, UNDETERMINED, conclude, records_from_claims
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.posts.gpt2_prev_heads.organism_report import page, story, story_steps


def test_story_reads_each_claim_as_its_command_wrote_it(tmp_path):
    judged = CLAIMS["mask_disrupts"].judge({"head": "L2H0"}, value=(0.9, 0.1), head="L2H0", readout="89% lower")
    write_summary(tmp_path / "mask_prev_attention" / "m" / "summary.json", {"script": "mask_prev_attention"}, [judged])
    write_summary(tmp_path / "l4h11_edit" / "m" / "summary.json", {"script": "l4h11_edit"}, [])  # judged nothing
    (tmp_path / "ext_pos_averaging" / "m").mkdir(parents=True)
    (tmp_path / "ext_pos_averaging" / "m" / "summary.json").write_text('{"claims": [{"claim": "cut')  # cut short
    bad = CLAIMS["wpos_helix"].judge({}, value=0.0, preconditions=[Precondition("p", False, "a reason")]).as_dict() | {
        "verdict": "maybe"
    }
    (tmp_path / "pos_embed_helix" / "m").mkdir(parents=True)
    (tmp_path / "pos_embed_helix" / "m" / "summary.json").write_text(json.dumps({"claims": [bad]}))

    rows = story(tmp_path, "m")
    assert list(rows) == [k for _, k in story_steps()]
    got = rows["mask_disrupts"]
    assert (got.verdict, got.head, got.readout, got.measured) == (judged.verdict, "L2H0", "89% lower", {"head": "L2H0"})
    assert "judged no claim edit_moves_copy" in rows["edit_moves_copy"].why
    assert "ext_pos_averaging's results cannot be read" in rows["ext_avg_hurts_early_more"].why
    assert "not one of" in rows["wpos_helix"].why and "not one of" in rows["ext_helix"].why  # a foreign verdict
    assert "rank_prev_heads has not run on this model" in rows["sharp_prev_head"].why
    untouched = [k for s, k in story_steps() if s not in {"mask_prev_attention"}]
    assert all(rows[k].verdict == "not testable" and rows[k].key == k for k in untouched)
    assert all(rows[k].rule == CLAIMS[k].rule.text for k in untouched)


def test_the_story_round_trips_through_summary_json(tmp_path):
    rows = story(tmp_path, "nothing-ran")
    write_summary(tmp_path / "summary.json", {"story": [rows[k] for _, k in story_steps()]}, [])
    again = read_summary(tmp_path / "summary.json")["story"]
    assert again == [rows[k].as_dict() for _, k in story_steps()]


def test_the_page_puts_the_story_beside_the_other_model(tmp_path):
    judged = CLAIMS["mask_disrupts"].judge({"head": "L2H0"}, value=(0.9, 0.1), head="L2H0", readout="89% lower")
    write_summary(tmp_path / "mask_prev_attention" / "other" / "summary.json", {}, [judged])
    html = page("t", [], story(tmp_path, "m"), story(tmp_path, "other"), "other-model", ["a.html"])
    assert "other-model" in html and "89% lower" in html and "(L2H0)" in html
    assert html.count("has not run on this model") == 2 * len(story_steps()) - 1
    assert html.count("(route)") == sum(CLAIMS[k].role == "route" for _, k in story_steps())


def test_the_route_conclusion_is_drawn_from_the_story(tmp_path):
    """The report leads its story with the route rule on the story's claims, as read from the results folders."""
    rows = story(tmp_path, "m")
    assert conclude(records_from_claims(rows.values())).route == UNDETERMINED  # nothing ran: not testable
    for key, row in rows.items():  # a row of a script that has not run is the claim's own record, role included
        assert (row.verdict, row.key, row.role, row.rule) == (
            "not testable",
            key,
            CLAIMS[key].role,
            CLAIMS[key].rule.text,
        )
    flat = CLAIMS["sharp_prev_head"].judge(
        {"head": None, "ratio": None}, value=math.inf, readout="no previous-token head"
    )
    write_summary(tmp_path / "rank_prev_heads" / "m" / "summary.json", {"script": "rank_prev_heads"}, [flat])
    rows = story(tmp_path, "m")
    route = conclude(records_from_claims(rows.values()))
    assert route.route == NONE
    html = page("t", [], rows, None, "other-model", [], route=route)
    assert "Route conclusion" in html and "no sharp previous-token head" in html
    assert "Route conclusion" not in page("t", [], rows, None, "other-model", [])


def test_the_targets_are_judged_from_numbers_alone():
    m = Measured(
        prev_text=Sharpest("L2H0", 0.02),
        prev_random=Sharpest(None, math.inf),
        induction_head="L3H1",
        induction_score=0.7,
        seg_len=50,
        copy_loss=(9.5, 0.4),
        copy_loss_no_bos=(9.4, 0.6),
        words=" ninja turtle pirate",
        pair="P(turtle | ninja)",
        p_copy=0.9,
        heldout_loss=4.2,
    )
    claims = {c.key: c for c in judge_targets(m, reference_loss=4.29413)}
    assert {k: c.verdict for k, c in claims.items()} == {
        "prev_text": "held",
        "prev_random": "not held",
        "induction": "held",
        "copy_loss": "held",
        "copies": "held",
        "heldout": "held",
    }
    assert claims["prev_random"].measured == {"head": "none", "ratio": math.inf}
    assert claims["prev_random"].readout == "no previous-token head"
    assert claims["copies"].measured == {"target": " ninja turtle pirate", "P(turtle | ninja)": 0.9}
    assert "perplexity 66.7 vs 73.3" in claims["heldout"].why
    assert "heldout" not in {c.key for c in judge_targets(m, reference_loss=None)}  # nothing to hold it to
