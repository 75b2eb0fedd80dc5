"""The package as a user gets it: installed from a clone (not editable), used from an empty folder with nothing beside
it — no ``../shared``, no browser, no model built yet, no checkout on the path.

The default suite installs the clone's wheel into a folder of its own (``pip install --no-deps --target``: the
package as pip builds it, its data included, the dependencies those of this environment) and runs, in an empty
folder: the command list, a claim script on a shipped model and the README's library quick start as printed.
``pytest -m slow`` runs the main job there too (what it runs, the default suite tests on faster paths: see its test),
and installs the clone with ``pip install <clone>``, dependencies and all, into a fresh virtualenv.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2_posheads.analysis.prompts import WIKITEXT_OFFLINE
from gpt2_posheads.claims.catalogue import model_scripts, script_claims, toy_scripts
from gpt2_posheads.model.paths import CACHE_ENV, MODELS_ENV, REPO_ROOT, SHARED_ENV
from gpt2_posheads.organism.known_answers import expected

NO_PROMPTS = ("pos_embed_helix", "ext_pos_vs_wpe")  # W_pos and repeated-token prompts: no natural text


def fresh_clone(dest: Path) -> Path:
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


def user_env(tmp_path: Path, python_path: str | None) -> dict[str, str]:
    """An environment with nothing of this checkout in it: no shared/, no browser, an empty cache, offline."""
    env = {k: v for k, v in os.environ.items() if k not in (SHARED_ENV, MODELS_ENV, "GPT2_POSHEADS_PNG", "PYTHONPATH")}
    env.update(
        BROWSER_PATH=str(tmp_path / "no-browser"),
        HF_HUB_OFFLINE="1",
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        **{CACHE_ENV: str(tmp_path / "cache" / "gpt2_posheads")},
    )
    if python_path:
        env["PYTHONPATH"] = python_path
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(python, target, workdir, env)``: the clone's wheel installed into ``target``, an empty working folder."""
    tmp = tmp_path_factory.mktemp("installed")
    clone = fresh_clone(tmp / "clone" / "gpt2_posheads")
    target = tmp / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", target, clone],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    shutil.rmtree(clone.parent)  # nothing of the clone is left to lean on
    work = tmp / "work"
    work.mkdir()
    return sys.executable, target, work, user_env(tmp, str(target))


def run(installed, *args, timeout=900):
    python, _, work, env = installed
    return subprocess.run([python, *args], cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_installed_package_is_the_one_imported(installed):
    _, target, _, _ = installed
    r = run(installed, "-c", "import gpt2_posheads.model.paths as p; print(p.PACKAGE_DIR, p.source_checkout())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(target / "gpt2_posheads"), "None"]
    assert (target / "gpt2_posheads" / "data" / "mini-gpt2" / "model.safetensors").is_file()
    assert (target / "gpt2_posheads" / "data" / "gpt2-small" / "W_pos.npy").is_file()


def test_command_list_names_every_claim(installed):
    _, target, _, _ = installed
    r = subprocess.run(
        [str(target / "bin" / "gpt2-posheads")], cwd=installed[2], env=installed[3], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    for script, keys in script_claims().items():
        assert script in r.stdout and all(k in r.stdout for k in keys)
    assert all(s in r.stdout for s in toy_scripts()) and "run_all" in r.stdout


def test_a_claim_script_runs_in_an_empty_folder(installed):
    _, _, work, env = installed
    r = run(installed, "-m", "gpt2_posheads", "rank_prev_heads", "--model", "route-gpt2", "--n-prompts", "2",
            "--seq-len", "48", "--no-png")  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    summary = json.loads((work / "results" / "rank_prev_heads" / "route-gpt2" / "summary.json").read_text())
    assert summary["aggregator"] == "L2H0"  # the compiled route model's aggregator, by construction
    assert summary["prompt_source"] == WIKITEXT_OFFLINE  # the shipped text, offline (HF_HUB_OFFLINE=1)
    assert (Path(env["XDG_CACHE_HOME"]) / "gpt2_posheads" / "models" / "route-gpt2" / "model.safetensors").is_file()


def test_readme_quick_start_runs_as_printed(installed):
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"## Library quick start\s+```python\n(.*?)```", readme, re.S).group(1)
    r = run(installed, "-c", code)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


@pytest.mark.slow
def test_main_job_in_an_empty_folder(installed):
    """The main job (quick toys, the route model) from the installed package: every script ok, the page written, and
    every claim of every script the verdict the construction of route-gpt2 implies.

    Slow (40 s); the default suite tests its parts on faster paths: the installed package building route-gpt2 and
    running a claim script in an empty folder (above), every claim's verdict on route-gpt2 with fewer prompts, the
    scripts run in one process as here (tests/organism/test_known_answers.py), the job list, the record and the page
    (tests/cli/test_experiments.py, test_run_all_*), the toy scripts' quick runs (test_toy_script_quick there), and
    the one line about HTML-only figures (tests/cli/test_failures.py)."""
    _, _, work, _ = installed
    r = run(installed, "-m", "gpt2_posheads", "run_all", "--quick", "--models", "route-gpt2", "--no-explorer")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    notes = [line for line in r.stdout.splitlines() if "HTML only" in line]
    assert len(notes) == 1 and "does not exist" in notes[0]
    results = work / "results"
    record = json.loads((results / "run_all.json").read_text())
    assert {j["status"] for j in record["jobs"]} == {"ok"}
    assert [j["script"] for j in record["jobs"]] == list(model_scripts()) + list(toy_scripts()) + ["mini_gpt2_report"]
    page = (results / "index.html").read_text(encoding="utf-8")
    assert "no results" not in page and "not measured" not in page
    known = expected("route-gpt2")
    for script, keys in script_claims().items():
        s = json.loads((results / script / "route-gpt2" / "summary.json").read_text())
        assert [c["key"] for c in s["claims"]] == list(keys)
        # the shipped text, offline; the two scripts that make no natural-text prompts record no source
        assert s.get("prompt_source") == (None if script in NO_PROMPTS else WIKITEXT_OFFLINE), script
        for c in s["claims"]:  # with every script's defaults, the verdicts the construction implies
            assert c["verdict"] == known[(script, c["key"])][0], (script, c["key"], c["why"])
    assert list(results.rglob("*.html")) and not list(results.rglob("*.png"))


def test_a_clone_runs_its_scripts_without_installing(tmp_path):
    """``python experiments/<name>.py`` in a clone that was never installed (the package found beside the script)."""
    repo = fresh_clone(tmp_path / "clone" / "gpt2_posheads")
    env = user_env(tmp_path, str(repo))
    r = subprocess.run(
        [sys.executable, "experiments/mask_prev_attention.py", "--help"], cwd=repo, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0 and "--every" in r.stdout, r.stderr


@pytest.mark.slow
def test_pip_install_into_a_fresh_virtualenv(tmp_path):
    """``pip install <clone>`` (dependencies and all, from the package index) into a new virtualenv, then the command
    list and a claim script from an empty folder."""
    clone = fresh_clone(tmp_path / "clone" / "gpt2_posheads")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", str(clone)], capture_output=True, text=True, timeout=3000)
    assert r.returncode == 0, r.stderr[-3000:]
    work = tmp_path / "work"
    work.mkdir()
    env = user_env(tmp_path, None)
    r = subprocess.run([str(venv / "bin" / "gpt2-posheads")], cwd=work, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and "mask_prev_attention" in r.stdout, r.stderr
    r = subprocess.run(
        [py, "-m", "gpt2_posheads", "mask_prev_attention", "--model", "route-gpt2", "--n-prompts", "2", "--no-png"],
        cwd=work, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (work / "results" / "mask_prev_attention" / "route-gpt2" / "summary.json").is_file()
