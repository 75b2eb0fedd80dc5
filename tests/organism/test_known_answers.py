"""Ground truth by construction: the compiled GPT-2s are rebuilt byte for byte, and every claim of the GPT-2 post's
nine scripts and of the organism report gets, on each of them and on data/mini-gpt2, the verdict its construction
implies (``gpt2_posheads.organism.known_answers``, written down before anything was measured)."""

import fnmatch
import json
import shutil
from pathlib import Path

import pytest

from gpt2_posheads import organism
from gpt2_posheads.claims.catalogue import model_scripts
from gpt2_posheads.claims.gpt2_post import CLAIMS, ROUTE
from gpt2_posheads.claims.verdicts import VERDICTS
from gpt2_posheads.cli.experiment import shared_setup
from gpt2_posheads.model.paths import ORGANISM_DIR, models_dir
from gpt2_posheads.organism.compiled import BUILDERS, Head, compile_model, weights_digest, write_folder
from gpt2_posheads.organism.known_answers import KNOWN, MODELS, ROUTE_CONCLUSIONS, expected

from conftest import load_script

COMPILED = tuple(BUILDERS)


@pytest.fixture(scope="session")
def compiled_dir(tmp_path_factory):
    """Every compiled model, built by the build script into a fresh folder."""
    out = tmp_path_factory.mktemp("compiled")
    load_script("build_compiled_models").build_all(list(COMPILED), out, measured=False)
    return out


def model_dir(name: str, compiled_dir):
    return ORGANISM_DIR if name == "mini-gpt2" else compiled_dir / name


def test_rebuild_gives_the_same_bytes(compiled_dir, tmp_path):
    """A second build writes the same weights, config and tokenizer, byte for byte, and so does any copy already in
    data/ (built on first use by the main job)."""
    build_all = load_script("build_compiled_models").build_all
    status = build_all(list(COMPILED), compiled_dir, measured=False)
    assert set(status.values()) == {"unchanged"}
    again = build_all(["route-gpt2"], tmp_path, measured=False)
    assert again == {"route-gpt2": "written"}
    assert weights_digest(tmp_path / "route-gpt2") == weights_digest(compiled_dir / "route-gpt2")
    for name in COMPILED:
        if (models_dir() / name / "model.safetensors").exists():
            assert weights_digest(models_dir() / name) == weights_digest(compiled_dir / name), name


def test_build_refuses_a_folder_it_did_not_write(tmp_path):
    from gpt2_posheads.model.validation import UsageError

    (tmp_path / "route-gpt2").mkdir()
    (tmp_path / "route-gpt2" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="was not written by this script"):
        load_script("build_compiled_models").build_all(["route-gpt2"], tmp_path, measured=False)
    assert (tmp_path / "route-gpt2" / "notes.txt").read_text() == "mine"


def test_route_claims_tell_the_route_model_from_the_wpos_lookalike():
    """Every route claim is held on the route model and on none of the look-alike that reads W_pos."""
    for key, row in KNOWN.items():
        assert set(row) == set(MODELS), key
        assert all(v is None or v[0] in VERDICTS for v in row.values()), key
        if key in CLAIMS and CLAIMS[key].role == ROUTE:
            assert row["lookalike-wpos"][0] != "held", key
            if key != "sources_named_heads":
                assert row["route-gpt2"][0] == "held", key


def test_the_table_ships_in_the_wheel():
    """known_answers.json is package data: pyproject's package-data names every data file of the organism package."""
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    line = next(l for l in pyproject.splitlines() if l.startswith('"gpt2_posheads.organism"'))
    globs = json.loads(line.split("=", 1)[1])
    data = [p.name for p in Path(organism.__file__).parent.iterdir() if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert "known_answers.json" in data
    for name in data:
        assert any(fnmatch.fnmatch(name, g) for g in globs), name


# Fewer prompts than the defaults: a verdict set by construction does not depend on how many prompts measure it.
# The main job runs the defaults, and tests/cli/test_fresh_clone.py checks route-gpt2's verdicts from them (-m slow).
FEWER = {
    "rank_prev_heads": ["--n-prompts", "16"],
    "pos_embed_averaging": ["--n-prompts", "4", "--group-sizes", "1,10,20,100"],
    "mask_prev_attention": ["--n-prompts", "4"],
    "raw_scores_taxonomy": ["--n-prompts", "8"],
    "ext_pos_averaging": ["--n-prompts", "4"],
    "prev_head_sources": ["--n-prompts", "8"],
    "mini_gpt2_report": ["--n-prompts", "16", "--skip-scripts"],
}


@pytest.fixture(scope="session")
def claim_runs(compiled_dir, tmp_path_factory):
    """Runs every claim script of the post and the organism report's targets on a model, once per session:
    ``runs(name) -> {(script, key): claim}``; outputs under ``runs.root``."""
    root = tmp_path_factory.mktemp("claims")
    done: dict[str, dict] = {}

    def runs(name: str) -> dict:
        if name not in done:
            got = {}
            with shared_setup():  # as the main job: the model loaded once, its prompts made and heads ranked once
                for script in model_scripts() + ("mini_gpt2_report",):
                    out = root / script / name
                    argv = ["--model-dir", str(model_dir(name, compiled_dir)), "--out", str(out), "--no-png"]
                    load_script(script).main(argv + FEWER.get(script, []))
                    for c in json.loads((out / "summary.json").read_text())["claims"]:
                        got[(script, c["key"])] = c
            done[name] = got
        return done[name]

    runs.root = root
    return runs


@pytest.mark.parametrize("name", MODELS)
def test_every_claim_gets_its_known_verdict(name, compiled_dir, claim_runs):
    if not (model_dir(name, compiled_dir) / "model.safetensors").exists():
        pytest.skip(f"{model_dir(name, compiled_dir)} is missing")
    got = claim_runs(name)
    wrong = {
        k: f"expected {verdict} ({reason}); got {got[k]['verdict']}: {got[k]['why']}"
        for k, (verdict, reason) in expected(name).items()
        if got[k]["verdict"] != verdict
    }
    assert not wrong, wrong


def test_a_model_without_previous_token_heads_is_said_so(compiled_dir, claim_runs):
    """lookalike-none has no head whose greatest diagonal is the previous token: its ranking claims are not held
    because of that, said as such (not as a ratio that "is inf, not a finite number")."""
    got = claim_runs("lookalike-none")
    for key in ("sharp_prev_head", "sharpest_stands_alone"):
        claim = got[("rank_prev_heads", key)]
        assert claim["verdict"] == "not held" and claim["why"].startswith("no previous-token head: no head's greatest")
        assert "inf" not in claim["why"] and claim["readout"] == "no previous-token head"


@pytest.mark.parametrize("name", MODELS)
def test_every_model_gets_its_route_conclusion(name, compiled_dir, claim_runs):
    """The route conclusion drawn from the scripts' records (as the page draws it from their summary.json files)."""
    from gpt2_posheads.claims.route import conclude

    if not (model_dir(name, compiled_dir) / "model.safetensors").exists():
        pytest.skip(f"{model_dir(name, compiled_dir)} is missing")
    c = conclude({key: claim for (_, key), claim in claim_runs(name).items()})
    assert c.route == ROUTE_CONCLUSIONS[name][0], c.line()


def test_route_report_in_three_columns(compiled_dir, claim_runs, tmp_path, monkeypatch):
    """The organism report on the route model: its targets, and the post's story beside data/mini-gpt2's and the
    post's own numbers, every route claim of the route model held."""
    claim_runs("route-gpt2"), claim_runs("mini-gpt2")  # the scripts' results the story is read from
    report = load_script("mini_gpt2_report")
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "results").symlink_to(claim_runs.root)  # the story is read from ./results
    monkeypatch.chdir(tmp_path / "here")
    out = tmp_path / "report"
    report.main(
        [
            "--model-dir",
            str(compiled_dir / "route-gpt2"),
            "--compare",
            str(ORGANISM_DIR),
            "--skip-scripts",
            "--out",
            str(out),
            "--no-png",
        ]
    )
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "mini-gpt2" in page and "GPT-2 small (post)" in page and page.count("(route)") >= 6
    story = {c["key"]: c for c in json.loads((out / "summary.json").read_text())["story"]}
    for key, spec in CLAIMS.items():
        if spec.role == ROUTE and key in story and key != "sources_named_heads":
            assert story[key]["verdict"] == "held", (key, story[key]["why"])
    assert "has not run on this model" not in page  # both columns read from the scripts' results


def test_without_its_aggregator_the_sharpest_head_is_self_suppressing(tmp_path):
    """The other branch of "the sharp head boosts the previous token", from a model: route-gpt2 with its aggregator
    made inert; its sharpest previous-token head is then an early head, whose raw scores dip at its own token."""
    model = compile_model("route-gpt2")
    model.heads[2][0] = Head(model.res)
    folder = write_folder(model, tmp_path / "no-aggregator", "# no-aggregator: a test variant\n")
    out = tmp_path / "out"
    load_script("raw_scores_taxonomy").main(["--model-dir", str(folder), "--out", str(out), "--no-png"])
    claims = {c["key"]: c for c in json.loads((out / "summary.json").read_text())["claims"]}
    assert claims["aggregator_prev_boosting"]["verdict"] == "not held"
    assert "self-suppressing" in claims["aggregator_prev_boosting"]["why"]
    shutil.rmtree(folder)
