"""Hub models as a user with the hub reachable loads them (``load_model(name)``, ``--model name``), through the real
clients and ``tests/hubserver.py``: downloaded once and loaded from the cache after, offline too; a gated, missing,
stalled or half-cached model is one line naming the model and what to do, and a cut download is never loaded."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from gpt2_posheads import ModelLoadError, load_model
from gpt2_posheads.model import hub as hub_client
from gpt2_posheads.model.paths import REPO_ROOT

TINY = "tiny-org/tiny-gpt2"
STALLS = "tiny-org/stalls"


@pytest.fixture(autouse=True)
def _fresh_answers():
    hub_client._REACHABLE.clear()
    yield
    hub_client._REACHABLE.clear()


@pytest.fixture(scope="module")
def tiny_hub(hub, tiny_dir):
    """``hub`` serving a small random GPT-2 (``tiny_dir``) as ``tiny-org/tiny-gpt2``, and a copy of it whose weights
    stall after a third of their bytes as ``tiny-org/stalls``."""
    hub.add_model(TINY, tiny_dir)
    size = (tiny_dir / "model.safetensors").stat().st_size
    hub.add_model(STALLS, tiny_dir, stall_after=size // 3)
    return hub


def cached_weights(home):
    return list((home / "hub").rglob("model.safetensors"))


def experiment(name: str, argv: list[str], env: dict, cwd=None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python experiments/NAME.py ARGV`` as a user runs it, its output captured."""
    script = REPO_ROOT / "experiments" / f"{name}.py"
    return subprocess.run(
        [sys.executable, str(script), *argv], cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout
    )


def test_a_hub_model_downloads_once_and_loads_offline_from_the_cache(tiny_hub, tiny_model, tmp_path, monkeypatch):
    import torch

    home = tmp_path / "hf"
    with tiny_hub.patched(monkeypatch, home):
        m = load_model(TINY, device="cpu")
    assert torch.equal(m.W_Q, tiny_model.W_Q)  # the model given, not another
    assert m.cfg.model_name == TINY  # named as the caller named it, not by its cache folder
    assert len(cached_weights(home)) == 1
    # nothing but what a model is loaded from: no other framework's files
    names = {p.name for p in (home / "hub").rglob("*") if p.is_file() and "snapshots" in p.parts}
    assert names <= {
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
        "vocab.json",
        "merges.txt",
        "README.md",
    }
    n = len(tiny_hub.requests)
    hub_client._REACHABLE.clear()
    with tiny_hub.patched(None, home, offline=True):
        again = load_model(TINY, device="cpu")
    assert torch.equal(again.W_Q, m.W_Q) and len(tiny_hub.requests) == n


def test_an_incomplete_cache_offline_is_one_line_naming_the_model(tiny_hub, tmp_path, monkeypatch):
    home = tmp_path / "hf"
    with tiny_hub.patched(monkeypatch, home):
        load_model(TINY, device="cpu")
    for f in cached_weights(home):  # the weights gone from the cache, the config left
        f.unlink()
    hub_client._REACHABLE.clear()
    with tiny_hub.patched(None, home, offline=True), pytest.raises(ModelLoadError) as e:
        load_model(TINY, device="cpu")
    msg = str(e.value)
    assert "\n" not in msg and TINY in msg and "incomplete" in msg and "HF_HUB_OFFLINE" in msg


@pytest.mark.parametrize(
    "name, words",
    [("gated-org/gated-model", "gated on the hub"), ("nobody/no-such-model", "no model of that name")],
)
def test_a_gated_or_missing_model_is_one_line(name, words, tiny_hub, tmp_path, monkeypatch):
    with tiny_hub.patched(monkeypatch, tmp_path / "hf"), pytest.raises(ModelLoadError) as e:
        load_model(name, device="cpu")
    msg = str(e.value)
    assert "\n" not in msg and name in msg and words in msg and "--model-dir" in msg


def test_a_stalled_download_is_one_line_and_never_loaded_later(tiny_hub, tiny_model, tmp_path, monkeypatch):
    import torch

    home = tmp_path / "hf"
    with tiny_hub.patched(monkeypatch, home, timeout=1), pytest.raises(ModelLoadError) as e:
        load_model(STALLS, device="cpu")
    assert "\n" not in str(e.value) and STALLS in str(e.value) and "run again" in str(e.value)
    assert not cached_weights(home)  # the part written is not a cached file
    tiny_hub.repos[("model", STALLS)].stall_after = None  # the network recovers
    hub_client._REACHABLE.clear()
    with tiny_hub.patched(monkeypatch, home, timeout=1):
        m = load_model(STALLS, device="cpu")
    assert torch.equal(m.W_Q, tiny_model.W_Q)


def test_the_command_names_the_model_for_a_missing_one(tiny_hub, hub_env, tmp_path):
    argv = ["--model", "nobody/no-such-model", "--out", str(tmp_path / "out")]
    r = experiment("rank_prev_heads", argv, hub_env, timeout=300)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --model: cannot load 'nobody/no-such-model'"), r.stderr
    shutil.rmtree(tmp_path / "out", ignore_errors=True)


def test_the_main_job_with_a_hub_model_beside_a_shipped_one(tiny_hub, tmp_path):
    """``run_all --models route-gpt2,<hub model>`` as a user with the hub runs it (quick, one script; the whole post
    on the GPT-2-small stand-in is ``tests/online/test_post_online.py``, slow): both models measured on
    openwebtext-10k read from the hub, each its own column of the page."""
    import json

    from gpt2_posheads.analysis.prompts import OPENWEBTEXT

    argv = ["--models", f"route-gpt2,{TINY}", "--only", "rank_prev_heads", "--quick", "--no-png", "--no-explorer"]
    r = experiment("run_all", argv, tiny_hub.env(tmp_path / "hf"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    results = tmp_path / "results" / "rank_prev_heads"
    for folder in ("route-gpt2", TINY.replace("/", "--")):
        s = json.loads((results / folder / "summary.json").read_text())
        assert s["prompt_source"] == OPENWEBTEXT, folder
    page = (tmp_path / "results" / "index.html").read_text(encoding="utf-8")
    assert "route-gpt2" in page and TINY in page


def test_the_weight_route_atlas_of_a_hub_model(hub, tmp_path):
    """``head_atlas --route weights`` with one model from the hub beside a shipped one, the real clients downloading
    it: ``lookalike-wpos`` served as ``lab/wpos-reader`` (its route set by hand: its sharpest previous-token head L2H0
    reads ``W_pos`` directly) keeps its label under a hub name, and ``route-gpt2``'s (built from earlier heads)
    stands beside it."""
    import json

    from gpt2_posheads.model.paths import shipped_model_dir

    name = "lab/wpos-reader"
    hub.add_model(name, shipped_model_dir("lookalike-wpos"))
    out = tmp_path / "atlas"
    argv = ["--models", f"route-gpt2,{name}", "--route", "weights", "--n-prompts", "4", "--no-png", "--out", str(out)]
    r = experiment("head_atlas", argv, hub.env(tmp_path / "hf"), cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    models = json.loads((out / "summary.json").read_text())["models"]
    hub_model = models["lab--wpos-reader"]  # filed under the name its results folder has
    assert hub_model["model"] == name
    assert hub_model["weight_route"]["head"] == "L2H0"
    assert hub_model["weight_route"]["label"] == "reads W_pos directly"
    assert models["route-gpt2"]["weight_route"]["label"] == "built from earlier heads"
    assert list((tmp_path / "hf" / "hub").rglob("model.safetensors")), "the hub model was not downloaded"
