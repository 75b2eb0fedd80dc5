"""The post's prompts with the hub reachable: openwebtext-10k read from the hub's parquet conversion by the real
clients (``tests/hubserver.py`` on 127.0.0.1), cached for the next run, and every way the hub can fail falling back
to the shipped WikiText-2 under ``auto`` (said) or refused in one line under ``openwebtext``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpt2_posheads.analysis import prompts
from gpt2_posheads.model import hub as hub_client
from gpt2_posheads.model.paths import REPO_ROOT
from gpt2_posheads.model.validation import UsageError

OWT = prompts.OPENWEBTEXT
PARQUET = "plain_text/train"


@pytest.fixture(autouse=True)
def _fresh_answers():
    """Every test asks the hub anew: the process remembers the dataset and the reachability per endpoint."""
    prompts._openwebtext.cache_clear()
    hub_client._REACHABLE.clear()
    yield
    prompts._openwebtext.cache_clear()
    hub_client._REACHABLE.clear()


def parquet_gets(hub) -> int:
    return sum(1 for m, path, _ in hub.requests if m == "GET" and PARQUET in path and "/resolve/" in path)


def test_auto_reads_openwebtext_from_the_parquet_conversion_then_from_the_cache(hub, tmp_path, monkeypatch, shared):
    with hub.patched(monkeypatch, tmp_path / "hf"):
        docs, source = prompts.documents("auto")
    assert source == OWT
    # the served documents are NLTK's webtext, not the shipped WikiText-2
    wiki = set(prompts.wikitext_documents())
    assert len(docs) >= 100 and not wiki & set(docs)
    assert any("webtext" in d.lower() or len(d.split()) > 200 for d in docs)
    got = parquet_gets(hub)
    assert got >= 1
    # a second run, offline, reads the same documents from the cache without a request
    prompts._openwebtext.cache_clear()
    n_requests = len(hub.requests)
    with hub.patched(None, tmp_path / "hf", offline=True):
        again, source = prompts.documents("auto")
    assert source == OWT and again == docs
    assert len(hub.requests) == n_requests


def test_the_loading_script_datasets_refuses_is_not_in_the_way(hub, tmp_path, monkeypatch):
    """datasets >= 4 refuses the repository's loading script (the real hub's layout): the prompts never ask it."""
    import datasets

    with hub.patched(monkeypatch, tmp_path / "hf"):
        with pytest.raises(Exception, match="(?i)script"):
            datasets.load_dataset(OWT, split="train")
        docs, source = prompts.documents("openwebtext")
    assert source == OWT and docs


@pytest.mark.parametrize(
    "kind, why",
    [
        ("429", "HTTP 429"),
        ("500", "HTTP 500"),
        ("html", "did not answer as the Hugging Face hub does"),
        ("cut", "did not answer"),
    ],
)
def test_auto_falls_back_and_says_why(kind, why, hub, tmp_path, monkeypatch, capsys):
    hub.fault(f"datasets/{OWT}", kind)
    with hub.patched(monkeypatch, tmp_path / "hf", timeout=1):
        docs, source = prompts.documents("auto")
    assert source.startswith("wikitext-2 (stand-in for stas/openwebtext-10k, which could not be read: ")
    assert why in source, source
    assert docs == prompts.wikitext_documents()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("note: prompts: stas/openwebtext-10k could not be read")


def test_a_missing_conversion_is_said_and_openwebtext_is_refused_in_one_line(hub, tmp_path, monkeypatch):
    hub.fault("refs%2Fconvert%2Fparquet", "500")
    with hub.patched(monkeypatch, tmp_path / "hf", timeout=1), pytest.raises(UsageError) as e:
        prompts.documents("openwebtext")
    assert e.value.param == "prompts" and "HTTP 500" in e.value.problem
    assert "\n" not in str(e.value)


def test_a_stalled_download_falls_back_within_the_timeout(hub, tmp_path, monkeypatch):
    hub.fault(f"{PARQUET}/", "stall", method="GET")
    with hub.patched(monkeypatch, tmp_path / "hf", timeout=1):
        docs, source = prompts.documents("auto")
    assert source.startswith("wikitext-2 (stand-in") and docs
    # nothing half-downloaded is left where a later run would read it
    assert not list((tmp_path / "hf" / "hub").rglob("*.parquet"))


def test_a_cut_download_is_never_read_later(hub, tmp_path, monkeypatch):
    hub.fault(f"{PARQUET}/", "cut", method="GET")
    with hub.patched(monkeypatch, tmp_path / "hf", timeout=1):
        _, source = prompts.documents("auto")
    assert source.startswith("wikitext-2 (stand-in")
    hub.clear_faults()
    prompts._openwebtext.cache_clear()
    with hub.patched(monkeypatch, tmp_path / "hf", timeout=1):
        docs, source = prompts.documents("auto")  # downloads again, whole
    assert source == OWT and len(docs) >= 100


def test_a_cached_file_that_does_not_read_is_downloaded_again(hub, tmp_path, monkeypatch, capsys):
    with hub.patched(monkeypatch, tmp_path / "hf"):
        docs, _ = prompts.documents("auto")
        (blob,) = list((tmp_path / "hf" / "hub").rglob("*.parquet"))
        target = blob.resolve()
        target.write_bytes(target.read_bytes()[:1000])  # a damaged cache
        prompts._openwebtext.cache_clear()
        again, source = prompts.documents("auto")
    assert source == OWT and again == docs
    assert "downloading it again" in capsys.readouterr().err


def test_a_dead_proxy_in_front_of_a_reachable_hub_is_unreachable_within_seconds(hub, tmp_path, monkeypatch):
    import time

    with hub.patched(monkeypatch, tmp_path / "hf"):
        assert hub_client.hub_reachable()
        hub_client._REACHABLE.clear()
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        from huggingface_hub.utils import _http

        monkeypatch.setattr(_http, "_GLOBAL_CLIENT", None, raising=False)  # a new session reads the proxy
        t = time.monotonic()
        assert not hub_client.hub_reachable(timeout=2)
        assert time.monotonic() - t < 10
        docs, source = prompts.documents("auto")
    assert source == prompts.WIKITEXT_OFFLINE and docs


def test_the_command_refuses_openwebtext_before_loading_a_model(hub, hub_env, tmp_path):
    hub.fault(f"datasets/{OWT}", "429")
    r = subprocess.run(
        [sys.executable, str(REPO_ROOT / "experiments" / "rank_prev_heads.py"), "--model", "route-gpt2"]
        + ["--prompts", "openwebtext", "--out", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        env={**hub_env, "HF_HUB_ETAG_TIMEOUT": "1"},
        timeout=300,
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --prompts: stas/openwebtext-10k could not be read: ")
    assert "HTTP 429" in lines[0] and "Traceback" not in r.stderr
    assert "prompts x" not in r.stdout and not (tmp_path / "results").exists()
