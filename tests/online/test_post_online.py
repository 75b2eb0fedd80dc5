"""The GPT-2 post as a user with the hub runs it, on ``gpt2`` from ``tests/hubserver.py``: the GPT-2-small stand-in
(``gpt2_posheads.organism.standin``), which the toolkit takes for GPT-2 small, so every default the post's head
names drive runs. Its answers (verdicts, heads, route) were written down before it was measured
(``gpt2_posheads.organism.known_answers``: ``standin_expected``, ``STANDIN_HEADS``, ``STANDIN_ROUTE``).

Slow: the stand-in has GPT-2 small's size (12 x 12, d_model 768, 50,257 tokens); ``pytest -m slow tests/online``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpt2_posheads.analysis.prompts import OPENWEBTEXT
from gpt2_posheads.claims.catalogue import model_scripts
from gpt2_posheads.claims.record import read_summary
from gpt2_posheads.claims.route import route_conclusion_from_summaries
from gpt2_posheads.model.paths import REPO_ROOT
from gpt2_posheads.organism.known_answers import STANDIN_HEADS, STANDIN_ROUTE, standin_expected

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def post_on_gpt2(hub, tmp_path_factory):
    """``run_all --models gpt2 --only <the post's nine scripts>`` with the hub reachable: the results folder and the
    completed process."""
    work = tmp_path_factory.mktemp("post_on_gpt2")
    r = subprocess.run(
        [sys.executable, str(REPO_ROOT / "experiments" / "run_all.py"), "--models", "gpt2"]
        + ["--only", ",".join(model_scripts()), "--no-png", "--no-explorer"],
        cwd=work,
        capture_output=True,
        text=True,
        env=hub.env(work / "hf_home"),
        timeout=3000,
    )
    return work / "results", r


def summaries(results):
    return {p.parent.parent.name: json.loads(p.read_text()) for p in results.glob("*/gpt2/summary.json")}


def test_every_script_runs_on_gpt2_from_the_hub_with_openwebtext(post_on_gpt2):
    results, r = post_on_gpt2
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = summaries(results)
    assert set(got) == set(model_scripts())
    for script, s in got.items():
        assert s["is_gpt2_small"] is True, script
        assert s["compiled_standin"].startswith("a compiled stand-in"), script
        if "prompt_source" in s:
            assert s["prompt_source"] == OPENWEBTEXT, script
    page = (results / "index.html").read_text(encoding="utf-8")
    assert "gpt2 [compiled stand-in, not the real model]" in page  # nobody reads it as GPT-2's numbers


def test_the_posts_heads_are_chosen_by_name(post_on_gpt2):
    got = summaries(post_on_gpt2[0])
    for script, heads in STANDIN_HEADS.items():
        s = got[script]
        if script == "rank_prev_heads":
            assert s["aggregator"] == heads[0]
            continue
        assert tuple(s["heads"]) == heads, script
        assert s["heads_chosen"] == "the post's heads (GPT-2 small)", script


def test_the_verdicts_are_the_stand_ins_known_answers(post_on_gpt2):
    got = summaries(post_on_gpt2[0])
    want = {k: v for k, v in standin_expected().items() if k[0] in model_scripts()}
    measured = {(script, c["key"]): c["verdict"] for script, s in got.items() for c in s["claims"]}
    wrong = {k: (measured.get(k), v[0]) for k, v in want.items() if measured.get(k) != v[0]}
    assert not wrong, wrong


def test_the_route_conclusion_is_the_posts(post_on_gpt2):
    results = post_on_gpt2[0]
    conclusion = route_conclusion_from_summaries(read_summary(p) for p in results.glob("*/gpt2/summary.json"))
    assert conclusion.route == STANDIN_ROUTE[0], conclusion


def test_the_readme_quick_start_on_gpt2_from_the_hub(hub, tmp_path):
    """The README's library quick start with ``load_model("gpt2")`` in place of the shipped model, as a user with the
    hub runs it: the post's aggregator by name, the prompts from openwebtext-10k."""
    import re

    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    code = re.search(r"## Library quick start\s+```python\n(.*?)```", readme, re.S).group(1)
    code = code.replace('load_model("route-gpt2")', 'load_model("gpt2")')
    code = code.replace('write_explorer(model, "explorer.html", "route-gpt2")', "")  # the page: tested offline
    code += "\nprint('SOURCE', run.source)\nprint('AGGREGATOR', layer, head)\n"
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=hub.env(tmp_path / "hf"),
        timeout=1800,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"SOURCE {OPENWEBTEXT}" in r.stdout and "AGGREGATOR 4 11" in r.stdout


def test_the_004_notebook_runs_its_hub_cell(hub, tmp_path, monkeypatch):
    """The 004 notebook top to bottom with the hub: its GPT-2 cell loads ``gpt2`` and ranks its heads on
    openwebtext-10k, and says that this hub's ``gpt2`` is the compiled stand-in."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    for k, v in hub.env(tmp_path / "hf").items():  # the kernel inherits this process's environment
        monkeypatch.setenv(k, v)
    nb = nbformat.read(REPO_ROOT / "notebooks" / "004_previous_token_heads.ipynb", as_version=4)
    nbclient.NotebookClient(
        nb, timeout=1800, kernel_name="python3", resources={"metadata": {"path": tmp_path}}
    ).execute()
    text = "\n".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if "text" in o
    )
    assert f"prompts: {OPENWEBTEXT}" in text and "compiled stand-in" in text
    assert "unreachable" not in text
