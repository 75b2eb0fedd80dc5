"""The organism report reads the post's story from other commands' results through the claim record only: a claim
as its command judged it, and a step without a run that judged it not testable, saying why."""

import json

from gpt2_posheads.claims.gpt2_post import CLAIMS, judge_claim
from gpt2_posheads.claims.record import read_summary, write_summary
from gpt2_posheads.claims.verdicts import Precondition
from gpt2_posheads.posts.gpt2_prev_heads.organism_report import SCRIPTS, STORY, page, story


def test_every_story_step_is_a_claim_one_command_judges():
    from gpt2_posheads.claims.catalogue import MODEL_SCRIPTS, SCRIPT_CLAIMS

    assert set(SCRIPTS) == set(MODEL_SCRIPTS)  # every claim command of the post tells part of the story
    assert [k for _, k in STORY] == list(dict.fromkeys(k for _, k in STORY))  # each step once
    for script, key in STORY:
        assert key in SCRIPT_CLAIMS[script] and key in CLAIMS


def test_story_reads_each_claim_as_its_command_wrote_it(tmp_path):
    judged = judge_claim("mask_disrupts", {"head": "L2H0"}, value=(0.9, 0.1), head="L2H0", shown="89% lower")
    write_summary(tmp_path / "mask_prev_attention" / "m" / "summary.json", {"script": "mask_prev_attention"}, [judged])
    write_summary(tmp_path / "l4h11_edit" / "m" / "summary.json", {"script": "l4h11_edit"}, [])  # judged nothing
    (tmp_path / "ext_pos_averaging" / "m").mkdir(parents=True)
    (tmp_path / "ext_pos_averaging" / "m" / "summary.json").write_text('{"claims": [{"claim": "cut')  # cut short
    bad = judge_claim("wpos_helix", {}, value=0.0, preconditions=[Precondition("p", False, "a reason")]).as_dict() | {
        "verdict": "maybe"
    }
    (tmp_path / "pos_embed_helix" / "m").mkdir(parents=True)
    (tmp_path / "pos_embed_helix" / "m" / "summary.json").write_text(json.dumps({"claims": [bad]}))

    rows = story(tmp_path, "m")
    assert list(rows) == [k for _, k in STORY]
    got = rows["mask_disrupts"]
    assert (got.verdict, got.head, got.shown, got.measured) == (judged.verdict, "L2H0", "89% lower", {"head": "L2H0"})
    assert "judged no claim edit_moves_copy" in rows["edit_moves_copy"].why
    assert "ext_pos_averaging's results cannot be read" in rows["ext_avg_hurts_early_more"].why
    assert "not one of" in rows["wpos_helix"].why and "not one of" in rows["ext_helix"].why  # a foreign verdict
    assert "rank_prev_heads has not run on this model" in rows["sharp_prev_head"].why
    untouched = [k for s, k in STORY if s not in {"mask_prev_attention"}]
    assert all(rows[k].verdict == "not testable" and rows[k].key == k for k in untouched)
    assert all(rows[k].rule == CLAIMS[k].rule.text for k in untouched)


def test_the_story_round_trips_through_summary_json(tmp_path):
    rows = story(tmp_path, "nothing-ran")
    write_summary(tmp_path / "summary.json", {"story": [rows[k] for _, k in STORY]}, [])
    again = read_summary(tmp_path / "summary.json")["story"]
    assert again == [rows[k].as_dict() for _, k in STORY]


def test_the_page_puts_the_story_beside_the_other_model(tmp_path):
    judged = judge_claim("mask_disrupts", {"head": "L2H0"}, value=(0.9, 0.1), head="L2H0", shown="89% lower")
    write_summary(tmp_path / "mask_prev_attention" / "other" / "summary.json", {}, [judged])
    html = page("t", [], story(tmp_path, "m"), story(tmp_path, "other"), "other-model", ["a.html"])
    assert "other-model" in html and "89% lower" in html and "(L2H0)" in html
    assert html.count("has not run on this model") == 2 * len(STORY) - 1
    assert html.count("(route)") == sum(CLAIMS[k].tells == "route" for _, k in STORY)
