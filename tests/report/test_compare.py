"""Comparing two results folders: what moved is found, what did not is not, NaN equals NaN."""

import json

import pytest

from gpt2_posheads.claims.record import summary_from_dict
from gpt2_posheads.report.compare import compare_claims as _compare_claims
from gpt2_posheads.report.compare import flatten

from conftest import EXPERIMENTS, load_script, run_script


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


# --- one model only ------------------------------------------------------------------------------------------------


def write_results(root, label, model, ratio, script="rank_prev_heads"):
    """A results folder as a script writes it (staged, manifested): ``<script>/mini-gpt2`` holding a summary of
    ``label``'s numbers, its manifest recording ``model`` (``{"label", "fingerprint"}``)."""
    from gpt2_posheads.cli import Output

    out = Output.open(root / script / "mini-gpt2", script, png=False, model=model)
    out.summary({"model": label}, summary_from_dict(summary(ratio)).claims)
    out.commit(quiet=True)


def test_compare_results_compares_one_model_only(tmp_path, tiny_dir, capsys):
    """One model given by name and by folder is compared; another model's summary under the same path is refused in
    one line (status 2, no table) unless asked, and then said first; without manifests the names tell them apart."""
    from types import SimpleNamespace

    from gpt2_posheads.cli.args import main_entry
    from gpt2_posheads.cli.experiment import model_identity
    from gpt2_posheads.model.paths import ORGANISM_DIR

    compare = load_script("compare_results")
    by_name = model_identity(SimpleNamespace(model="mini-gpt2", model_dir=None))
    by_folder = model_identity(SimpleNamespace(model="gpt2", model_dir=str(ORGANISM_DIR)))
    other = model_identity(SimpleNamespace(model="gpt2", model_dir=str(tiny_dir)))
    assert by_name["fingerprint"] == by_folder["fingerprint"] != other["fingerprint"]
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_results(a, "mini-gpt2", by_name, 0.001)
    write_results(b, str(ORGANISM_DIR), by_folder, 0.001)
    write_results(c, "route-gpt2", other, 0.5)
    capsys.readouterr()
    assert main_entry(compare.main, [str(a), str(b)]) == 0 and "(nothing moved)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main_entry(compare.main, [str(a), str(c)])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: folders: {a} and {c} hold different models in 1 summary; ")
    assert f"mini-gpt2 (weights {by_name['fingerprint']}) in {a}, route-gpt2 (weights {other['fingerprint']})" in err
    assert "--allow-different-models" in err
    assert main_entry(compare.main, [str(a), str(c), "--allow-different-models"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"note: {a} and {c} hold different models") and "compared as asked" in first
    for folder in (a, c):  # summaries without manifests: their model fields differ
        (folder / "rank_prev_heads" / "mini-gpt2" / ".gpt2_posheads.json").unlink()
    with pytest.raises(SystemExit) as e:
        main_entry(compare.main, [str(a), str(c)])
    assert e.value.code == 2 and "mini-gpt2 in " in capsys.readouterr().err


def test_the_page_shows_one_model_given_two_ways_as_one_column(tmp_path):
    """Results of `--model mini-gpt2` and of `--model-dir <its folder>` (one weights fingerprint in their manifests):
    one column headed with both names, no empty cell beside it."""
    from types import SimpleNamespace

    from gpt2_posheads.cli.experiment import model_identity
    from gpt2_posheads.model.paths import ORGANISM_DIR
    from gpt2_posheads.report.index import collect_summaries, index_html

    by_name = model_identity(SimpleNamespace(model="mini-gpt2", model_dir=None))
    by_folder = model_identity(SimpleNamespace(model="gpt2", model_dir=str(ORGANISM_DIR)))
    write_results(tmp_path, "mini-gpt2", by_name, 0.001)
    write_results(tmp_path, str(ORGANISM_DIR), by_folder, 0.001, script="mask_prev_attention")
    page = index_html(collect_summaries(tmp_path), tmp_path)
    head = page.split("004: The positional embedding")[1].split("</tr>")[0]
    assert head.count("<th>") == 3 and f"<th>mini-gpt2 (also {ORGANISM_DIR})</th>" in head
    assert '<td class="none">' not in page
