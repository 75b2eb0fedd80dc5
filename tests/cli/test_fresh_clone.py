"""The README's main job on a fresh clone: no ``../shared`` beside it, no browser, no model built yet. It finishes
with a complete page (HTML figures, one line about PNGs), from what the repository ships."""

import json
import os
import shutil
import subprocess
import sys

from gpt2_posheads.claims.catalogue import MODEL_SCRIPTS, SCRIPT_CLAIMS, TOY_SCRIPTS
from gpt2_posheads.model.paths import REPO_ROOT, SHARED_ENV
from gpt2_posheads.organism.known_answers import expected


def fresh_clone(dest):
    """The repository's files as a clone has them (tracked and not ignored: what `git clone` of this tree gives),
    with nothing beside it."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    for f in files:
        src = REPO_ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


def test_main_job_on_a_fresh_clone_without_shared_or_browser(tmp_path):
    repo = fresh_clone(tmp_path / "clone" / "gpt2_posheads")
    assert not (repo.parent / "shared").exists() and not (repo / "data" / "route-gpt2").exists()
    env = {k: v for k, v in os.environ.items() if k not in (SHARED_ENV, "GPT2_POSHEADS_PNG")}
    env.update(PYTHONPATH=str(repo), BROWSER_PATH=str(tmp_path / "no-browser"), HF_HUB_OFFLINE="1")
    r = subprocess.run(
        [sys.executable, "experiments/run_all.py", "--quick", "--model-dirs", "data/route-gpt2", "--no-explorer"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert "building data/route-gpt2" in r.stdout  # built on first use, from the shipped W_pos and tokenizer
    notes = [line for line in r.stdout.splitlines() if "HTML only" in line]
    assert len(notes) == 1 and "does not exist" in notes[0]
    results = repo / "results"
    record = json.loads((results / "run_all.json").read_text())
    assert {j["status"] for j in record["jobs"]} == {"ok"}
    assert [j["script"] for j in record["jobs"]] == list(MODEL_SCRIPTS) + list(TOY_SCRIPTS) + ["mini_gpt2_report"]
    page = (results / "index.html").read_text(encoding="utf-8")
    assert "no results" not in page and "not measured" not in page
    known = expected("route-gpt2")
    for script, keys in SCRIPT_CLAIMS.items():
        s = json.loads((results / script / "route-gpt2" / "summary.json").read_text())
        assert [c["key"] for c in s["claims"]] == list(keys)
        assert s.get("prompt_source", "wikitext-2").startswith("wikitext-2")  # the shipped text, offline
        for c in s["claims"]:  # with every script's defaults, the verdicts the construction implies
            assert c["verdict"] == known[(script, c["key"])][0], (script, c["key"], c["why"])
    assert list(results.rglob("*.html")) and not list(results.rglob("*.png"))
