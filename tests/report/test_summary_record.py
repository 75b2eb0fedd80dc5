"""summary.json has one writer and one reader (gpt2_posheads.claims.record), and says its layout version."""

import json

import pytest

from gpt2_posheads.claims.record import SCHEMA_VERSION, SummaryError, read_summary, summary_from_dict, write_summary
from gpt2_posheads.claims.verdicts import at_most, judge, not_testable
from gpt2_posheads.report.index import collect_summaries

CLAIMS = [
    judge("a head is sharp", "L4H11: 0.01", at_most(0.1, "ratio"), {"ratio": 0.05}, 0.05, key="sharp", head="L4H11"),
    not_testable("a head is alone", "L5H6: 0.18", "held if ...", "the model does not copy", key="alone"),
]


def test_the_writer_records_its_schema_version_and_the_reader_gives_the_claims_back(tmp_path):
    path = write_summary(tmp_path / "rank_prev_heads" / "m" / "summary.json", {"script": "rank_prev_heads"}, CLAIMS)
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert SCHEMA_VERSION == 2 and raw["schema_version"] == 2 and next(iter(raw)) == "schema_version"
    assert raw["claims"][0]["readout"] == "0.0500" and "shown" not in raw["claims"][0]
    assert raw["verdicts"] == {"held": 1, "not held": 0, "not testable": 1}
    assert path.read_text(encoding="utf-8").endswith("}\n") and not list(path.parent.glob(".*tmp*"))
    s = read_summary(path)
    assert s.schema_version == 2 and s.path == path and s.script == "rank_prev_heads"
    assert "schema_version" not in s.data  # the layout's version is not one of the run's numbers
    assert [c.as_dict() for c in s.claims] == [c.as_dict() for c in CLAIMS]
    assert s.claim("alone").why == "not testable here: the model does not copy"


def test_the_version_is_the_writers_not_the_datas(tmp_path):
    path = write_summary(tmp_path / "summary.json", {"schema_version": 7, "script": "x"}, [])
    assert json.loads(path.read_text())["schema_version"] == SCHEMA_VERSION


# a claim record as version 1 wrote it (its readout named "shown", its role "tells")
V1_RECORD = {
    "claim": "a head is sharp",
    "post": "L4H11: 0.01",
    "measured": {"ratio": 0.05},
    "rule": "held if ratio <= 0.1",
    "verdict": "held",
    "why": "0.05 <= 0.1",
    "key": "sharp",
    "head": "L4H11",
    "shown": "0.0500",
    "tells": "route",
}


@pytest.mark.parametrize("version", [{}, {"schema_version": 1}])
def test_a_version_1_summary_reads_with_its_fields_renamed(tmp_path, version):
    """Results folders written by a version-1 toolkit (or before ``schema_version`` existed) read back whole: the
    claim's ``shown`` is its readout, ``tells`` its role; nothing lands in ``extra``."""
    path = tmp_path / "rank_prev_heads" / "m" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({**version, "script": "rank_prev_heads", "model": "m", "claims": [V1_RECORD]}))
    s = read_summary(path)
    (c,) = s.claims
    assert s.schema_version == 1 and s.model == "m"
    assert (c.readout, c.role, c.head, c.key, c.extra) == ("0.0500", "route", "L4H11", "sharp", {})
    assert [p for p, _ in collect_summaries(tmp_path)] == [path]


def test_a_newer_summary_is_refused_naming_the_file_the_version_and_the_way_out(tmp_path):
    path = tmp_path / "rank_prev_heads" / "m" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1, "script": "rank_prev_heads", "claims": []}))
    with pytest.raises(SummaryError) as e:
        read_summary(path)
    message = str(e.value)
    assert str(path) in message and f"schema version {SCHEMA_VERSION + 1}" in message
    assert "upgrade gpt2_posheads" in message
    # the results page and compare_results read through it: the same refusal, naming the file
    from gpt2_posheads.model.validation import UsageError

    with pytest.raises(UsageError, match="upgrade gpt2_posheads"):
        collect_summaries(tmp_path)


@pytest.mark.parametrize("version", [0, -1, "1", 1.0, True, None])
def test_a_version_that_is_not_a_whole_number_from_1_is_refused(version):
    with pytest.raises(SummaryError, match=r"x/summary.json: schema_version .* is not a summary version"):
        summary_from_dict({"schema_version": version, "claims": []}, "x/summary.json")


def test_the_writer_takes_claims_only(tmp_path):
    with pytest.raises(TypeError, match="every claim must be a Claim, got dict"):
        write_summary(tmp_path / "summary.json", {}, [CLAIMS[0].as_dict()])
    assert not (tmp_path / "summary.json").exists()


def test_a_results_folder_is_written_through_the_one_writer(tmp_path):
    """A script's output writes summary.json through write_summary: the version, the claims, the run's fields."""
    from gpt2_posheads.cli import Output

    out = Output.open(tmp_path / "rank_prev_heads" / "m", "rank_prev_heads", png=False)
    out.summary({"model": "m"}, CLAIMS)
    out.commit(quiet=True)
    raw = json.loads((tmp_path / "rank_prev_heads" / "m" / "summary.json").read_text(encoding="utf-8"))
    assert raw["schema_version"] == SCHEMA_VERSION and raw["script"] == "rank_prev_heads" and raw["model"] == "m"
    assert [c["key"] for c in raw["claims"]] == ["sharp", "alone"] and "finished_at" in raw
