"""The notebooks run top to bottom, offline, in a folder of their own: the cells as a reader runs them.

Each notebook's own cells assert what its models must show (the route claims held on the route model, never on the
look-alike; the toy posts' verdicts printed from their rules); a cell that raises fails the test. The notebooks run
under ``pytest -m slow`` (the toy notebooks train models for minutes, the 004 notebook takes half a minute); the
default suite checks that every post has one, and tests what the 004 notebook runs on faster paths: the claim
functions with a shared run and what a result and the explorer show inline
(tests/posts/test_gpt2_prev_heads_aggregator_claims.py), each route claim's verdict on route-gpt2 and on the look-alike
(tests/organism/test_known_answers.py), and the README's quick start, the same calls from a fresh process
(tests/cli/test_fresh_clone.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpt2_posheads.model.paths import REPO_ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = REPO_ROOT / "notebooks"


def run_notebook(path: Path, cwd: Path, timeout: int = 900):
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": cwd}})
    client.execute()
    return nb


def outputs(nb, mime: str) -> list[str]:
    return [
        o["data"][mime]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if mime in o.get("data", {})
    ]


def test_every_post_has_a_notebook():
    from gpt2_posheads.claims.catalogue import posts

    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert [n[:3] for n in names] == sorted(p.key for p in posts()), names
    for p in NOTEBOOKS.glob("*.ipynb"):
        first = nbformat.read(p, as_version=4).cells[0]
        assert first.cell_type == "markdown" and "hub" in first.source  # how to point it at real models


@pytest.mark.slow
def test_post_004_notebook_runs_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    nb = run_notebook(NOTEBOOKS / "004_previous_token_heads.ipynb", tmp_path)
    html = "\n".join(outputs(nb, "text/html"))
    assert "held" in html and "<iframe srcdoc=" in html  # a claim result and the explorer, inline
    assert outputs(nb, "application/vnd.plotly.v1+json")  # figures drawn by plotly itself


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["003_sticky_plateau", "001_similar_content", "000_previous_token_head", "002_lost_in_middle"]
)
def test_toy_notebooks_run(name, tmp_path):
    nb = run_notebook(NOTEBOOKS / f"{name}.ipynb", tmp_path, timeout=1800)
    assert "held" in "\n".join(outputs(nb, "text/html"))
