"""Comparing two results folders: what moved is found, what did not is not, NaN equals NaN."""

import json

import pytest

from gpt2_posheads.claims.record import summary_from_dict
from gpt2_posheads.report.compare import compare_claims as _compare_claims
from gpt2_posheads.report.compare import flatten

from conftest import EXPERIMENTS, run_script


def summary(ratio, verdict="held", masses=(0.9, float("nan"))):
    record = {"post": "p", "rule": "r", "why": "w"}
    return {
        "script": "rank_prev_heads",
        "claims": [
            {"key": "sharp_prev_head", "claim": "c", "measured": {"head": "L0H1", "ratio": ratio}, "verdict": verdict}
            | record,
            {"key": "mask", "claim": "m", "measured": {"prev_mass": list(masses)}, "verdict": "not testable"} | record,
        ],
    }


def compare_claims(before: dict, after: dict):
    return _compare_claims(summary_from_dict(before), summary_from_dict(after))


def test_flatten_paths():
    assert flatten({"a": {"b": [1, {"c": 2}]}, "d": 3}) == {"a.b[0]": 1, "a.b[1].c": 2, "d": 3}


def test_only_what_moved_is_reported():
    df = compare_claims(summary(0.0011), summary(0.0011)).set_index("key")
    assert (df.n_moved == 0).all() and (df.verdict_before == df.verdict_after).all()  # NaN == NaN here
    assert df.loc["sharp_prev_head", "n_numbers"] == 2
    df = compare_claims(summary(0.0011), summary(0.0011 * (1 + 1e-9))).set_index("key")
    assert (df.n_moved == 0).all()  # float noise within rtol
    df = compare_claims(summary(0.0011), summary(0.2, "not held", masses=(0.9, 0.5))).set_index("key")
    assert df.loc["sharp_prev_head", "n_moved"] == 1 and df.loc["sharp_prev_head", "verdict_after"] == "not held"
    assert df.loc["sharp_prev_head", "moved"] == "ratio: 0.0011 -> 0.2"
    assert df.loc["mask", "moved"] == "prev_mass[1]: nan -> 0.5"


def test_a_field_one_side_records_is_listed_apart_not_moved():
    after = summary(0.0011)
    after["claims"][0]["measured"]["heads"] = 16  # a field a newer version records
    before = summary(0.0011)
    before["claims"][0]["measured"]["ratio"] = None  # NaN on disk: a number both record, so a move when it changes
    df = compare_claims(summary(0.0011), after).set_index("key")
    assert df.loc["sharp_prev_head", "n_moved"] == 0 and df.loc["sharp_prev_head", "added"] == "+heads"
    df = compare_claims(before, summary(0.0011)).set_index("key")
    assert df.loc["sharp_prev_head", "moved"] == "ratio: None -> 0.0011" and df.loc["sharp_prev_head", "n_added"] == 0


def test_script_exit_status_says_whether_anything_moved(tmp_path, capsys):
    for name, ratio in (("a", 0.001), ("b", 0.001), ("c", 0.5)):
        d = tmp_path / name / "rank_prev_heads" / "m"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(summary(ratio)))
    assert run_script(EXPERIMENTS / "compare_results.py", [str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert "(nothing moved)" in capsys.readouterr().out
    assert run_script(EXPERIMENTS / "compare_results.py", [str(tmp_path / "a"), str(tmp_path / "c")]) == 1
    assert "ratio: 0.001 -> 0.5" in capsys.readouterr().out


def test_claims_markdown_has_a_column_per_model(tmp_path):
    from gpt2_posheads.report.index import claims_markdown

    for model, ratio, verdict in (("mini-a", 0.00112, "held"), ("mini-b", 0.5, "not held")):
        d = tmp_path / "rank_prev_heads" / model
        d.mkdir(parents=True)
        s = summary(ratio, verdict)
        s["model"] = f"data/{model}"
        s["claims"][0].update(head="L0H1", post="L4H11: ratio 0.01", claim="a sharp head")
        s["claims"][1].update(why="not testable here: L0H1 sits in layer 0", post="disrupted")
        (d / "summary.json").write_text(json.dumps(s))
    md = claims_markdown(tmp_path, "004").splitlines()
    assert md[0] == "| claim | the post | data/mini-a | data/mini-b |"
    assert md[2] == (
        "| a sharp head | L4H11: ratio 0.01 | **held** on L0H1: head L0H1; ratio 0.00112 "
        "| **not held** on L0H1: head L0H1; ratio 0.500 |"
    )
    untestable = "**not testable**: L0H1 sits in layer 0"
    assert md[3] == f"| m | disrupted | {untestable} | {untestable} |"


def test_a_summary_without_claims_is_refused():
    from gpt2_posheads.claims.record import SummaryError

    with pytest.raises(SummaryError, match="has no 'claims'"):
        summary_from_dict({"model": "m", "ratio": 0.5}, "x/summary.json")
