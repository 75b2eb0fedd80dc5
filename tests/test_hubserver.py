"""The local hub (``tests/hubserver.py``) answers the real clients as huggingface.co does.

``huggingface_hub``, ``transformers`` and ``datasets`` talk to the server over HTTP, nothing mocked: downloads,
listings, the hub's error codes, the refusal of a loading-script dataset, and each injected fault giving the failure
a client meets when the hub misbehaves. The standard content comes from the test run's ``hub``; the faults are shown
on a small server of this module, whose files download in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hubserver import OPENWEBTEXT_ID, PARQUET_PATH, PARQUET_REF, HubServer

TINY = "tiny-org/tiny"
# 12 MiB: the clients write what they receive in 10 MiB pieces, so only a download broken past 10 MiB resumes
WEIGHTS = random.Random(0).randbytes(12 << 20)
RESUMABLE = 11 << 20
STALL_WEIGHTS = random.Random(1).randbytes(1 << 19)


def _blobs(home: Path) -> list[Path]:
    """Complete blobs in the hub cache under ``home`` (not the ``.incomplete`` leftovers of a failed download)."""
    return [p for p in (home / "hub").rglob("blobs/*") if not p.name.endswith(".incomplete")]


@pytest.fixture(scope="module")
def small():
    """A server of small repos, for the faults: a model, a stalling copy of it and a dataset with many files."""
    server = HubServer()
    config = json.dumps({"model_type": "gpt2", "n_layer": 1}).encode()
    server.add_model(TINY, {"config.json": config, "model.safetensors": WEIGHTS})
    server.add_model("tiny-org/stalling", {"config.json": config, "model.safetensors": STALL_WEIGHTS}, stall_after=1000)
    server.add_dataset(
        "tiny-org/many",
        {"main": {f"data/part-{i:03d}.txt": f"row {i}\n".encode() for i in range(120)}},
    )
    yield server
    server.stop()


@pytest.fixture
def fresh(small, monkeypatch, tmp_path):
    """The clients of this process pointed at ``small`` with an empty cache and short timeouts."""
    with small.patched(monkeypatch, tmp_path / "hf_home", timeout=0.5):
        yield tmp_path / "hf_home"
    small.clear_faults()


def _since(server: HubServer, n: int) -> list[tuple[str, str, int | None]]:
    return server.requests[n:]


# ----- the standard content, through the real clients


@pytest.fixture(scope="module")
def gpt2_home(hub, tmp_path_factory):
    """One cache for the tests that download ``gpt2`` (its weights are GPT-2 small's size)."""
    return tmp_path_factory.mktemp("gpt2_home")


def test_liveness_probe_and_unknown_paths(hub):
    import httpx2

    assert httpx2.get(hub.url + "/").status_code == 200
    r = httpx2.get(hub.url + "/api/nothing-here")
    assert r.status_code == 404
    assert not any(
        k.lower().startswith("x-xet") for k in httpx2.head(hub.url + "/gpt2/resolve/main/config.json").headers
    )


def test_snapshot_download_gpt2(hub, gpt2_home, monkeypatch):
    from huggingface_hub import snapshot_download

    with hub.patched(monkeypatch, gpt2_home):
        snap = Path(snapshot_download("gpt2"))
    rev = hub.repos[("model", "gpt2")].revisions["main"]
    assert snap.name == rev.sha
    assert sorted(p.relative_to(snap).as_posix() for p in snap.rglob("*") if p.is_file()) == sorted(rev.files)
    for path, entry in rev.files.items():
        assert (snap / path).stat().st_size == entry.size
        if not entry.lfs:
            assert hashlib.sha256((snap / path).read_bytes()).hexdigest() == entry.sha256
    # LFS blobs are stored under their sha256, as the hub's ETag names them
    weights = rev.files["model.safetensors"]
    assert (snap / "model.safetensors").resolve().name == weights.sha256


def test_transformers_loads_gpt2(hub, gpt2_home, monkeypatch):
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    n = len(hub.requests)
    with hub.patched(monkeypatch, gpt2_home):
        config = AutoConfig.from_pretrained("gpt2")
        tok = AutoTokenizer.from_pretrained("gpt2")
        model = AutoModelForCausalLM.from_pretrained("gpt2")
    assert config.model_type == "gpt2" and config.vocab_size == len(tok) == 50257
    assert tok.decode(tok("Hello world")["input_ids"]) == "Hello world"
    assert type(model).__name__ == "GPT2LMHeadModel"
    # transformers probes optional files; the server answers them EntryNotFound, which transformers takes in stride
    probed = [(m, p) for m, p, s in _since(hub, n) if s == 404]
    assert any(p.endswith("/generation_config.json") for _, p in probed)


def test_hub_error_codes(hub, tmp_path, monkeypatch):
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    with hub.patched(monkeypatch, tmp_path / "hf_home"):
        with pytest.raises(EntryNotFoundError):
            hf_hub_download("gpt2", "no-such-file.json")
        with pytest.raises(RepositoryNotFoundError):
            hf_hub_download("nobody/no-such-model", "config.json")
        with pytest.raises(RepositoryNotFoundError):
            HfApi().model_info("nobody/no-such-model")
        with pytest.raises(RevisionNotFoundError):
            hf_hub_download("gpt2", "config.json", revision="no-such-branch")
        with pytest.raises(GatedRepoError) as gated:
            hf_hub_download("gated-org/gated-model", "config.json")
        assert gated.value.response.status_code == 401
        assert HfApi().model_info("gated-org/gated-model").gated == "manual"  # the card is public, the files are not


def test_openwebtext_parquet_export(hub, tmp_path, monkeypatch):
    import pyarrow.parquet as pq
    from huggingface_hub import HfApi, HfFileSystem, hf_hub_download

    with hub.patched(monkeypatch, tmp_path / "hf_home"):
        api = HfApi()
        assert api.list_repo_files(OPENWEBTEXT_ID, repo_type="dataset", revision=PARQUET_REF) == [PARQUET_PATH]
        assert "openwebtext-10k.py" in api.list_repo_files(OPENWEBTEXT_ID, repo_type="dataset")
        refs = api.list_repo_refs(OPENWEBTEXT_ID, repo_type="dataset")
        assert [r.ref for r in refs.converts] == [PARQUET_REF]
        local = hf_hub_download(OPENWEBTEXT_ID, PARQUET_PATH, repo_type="dataset", revision=PARQUET_REF)
        url = f"hf://datasets/{OPENWEBTEXT_ID}@{PARQUET_REF.replace('/', '%2F')}/{PARQUET_PATH}"
        with HfFileSystem().open(url, "rb") as f:
            via_fs = pq.read_table(f)
    texts = pq.read_table(local).column("text").to_pylist()
    assert via_fs.column("text").to_pylist() == texts
    assert 250 <= len(texts) <= 300
    lengths = [len(t.split()) for t in texts]
    assert min(lengths) >= 300 and max(lengths) <= 2100
    assert not any(" @-@ " in t or t.lstrip().startswith("= ") for t in texts)  # web text, not WikiText


def test_load_dataset_refuses_the_loading_script(hub, tmp_path, monkeypatch):
    """What the real hub does to ``datasets`` 4 and later: ``main`` holds a loading script, so loading fails."""
    import datasets

    with hub.patched(monkeypatch, tmp_path / "hf_home"), pytest.raises(RuntimeError, match="scripts are no longer"):
        datasets.load_dataset(OPENWEBTEXT_ID, split="train")


def test_load_dataset_from_the_parquet_export(hub, tmp_path, monkeypatch):
    """The ways around the refusal that work on the real hub: the parquet export as the revision, or its file."""
    import datasets

    url = f"hf://datasets/{OPENWEBTEXT_ID}@{PARQUET_REF.replace('/', '%2F')}/{PARQUET_PATH}"
    with hub.patched(monkeypatch, tmp_path / "hf_home"):
        by_revision = datasets.load_dataset(OPENWEBTEXT_ID, revision=PARQUET_REF, split="train")
        by_file = datasets.load_dataset("parquet", data_files=url, split="train")
    assert by_revision.column_names == ["text"] and by_revision["text"] == by_file["text"]
    assert len(by_revision) >= 250


def test_offline_uses_the_cache(hub, tmp_path, monkeypatch):
    from huggingface_hub import hf_hub_download

    home = tmp_path / "hf_home"
    with hub.patched(None, home):
        online = hf_hub_download("gpt2", "config.json")
    n = len(hub.requests)
    with hub.patched(None, home, offline=True):
        offline = hf_hub_download("gpt2", "config.json")
    assert offline == online and len(hub.requests) == n


def test_fault_on_hub_is_cleared_after_the_test(hub, tmp_path, monkeypatch):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    hub.fault("/api/models/gpt2", "500")
    with hub.patched(monkeypatch, tmp_path / "hf_home"), pytest.raises(HfHubHTTPError) as err:
        HfApi().model_info("gpt2")
    assert err.value.response.status_code == 500


def test_the_next_test_sees_no_fault(hub, tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    with hub.patched(monkeypatch, tmp_path / "hf_home"):
        assert HfApi().model_info("gpt2").sha == hub.repos[("model", "gpt2")].revisions["main"].sha


def test_subprocess_with_hub_env(hub, hub_env, tmp_path):
    code = (
        "from huggingface_hub import constants, hf_hub_download\n"
        "print(constants.ENDPOINT)\n"
        "print(hf_hub_download('gpt2', 'config.json'))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], env=hub_env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    endpoint, path = r.stdout.split()
    assert endpoint == hub.url
    assert Path(path).is_relative_to(tmp_path / "hf_home" / "hub")
    assert not any(k.upper().endswith("_PROXY") for k in hub_env) and "HF_HUB_OFFLINE" not in hub_env


# ----- listings


def test_tree_is_paginated_like_the_hub(small, fresh, monkeypatch):
    from huggingface_hub import HfApi

    monkeypatch.setattr(small, "tree_page", 50)
    n = len(small.requests)
    files = HfApi().list_repo_files("tiny-org/many", repo_type="dataset")
    assert len(files) == 121 and files[0] == ".gitattributes"
    assert sum("/tree/" in p for _, p, _ in _since(small, n)) == 3
    top = list(HfApi().list_repo_tree("tiny-org/many", repo_type="dataset"))
    assert [(type(e).__name__, e.path) for e in top] == [("RepoFolder", "data"), ("RepoFile", ".gitattributes")]
    info = HfApi().get_paths_info("tiny-org/many", ["data", "data/part-007.txt", "nope"], repo_type="dataset")
    assert [e.path for e in info] == ["data", "data/part-007.txt"]
    assert info[1].size == len(b"row 7\n")


# ----- faults: what a client meets when the hub misbehaves


def test_429_is_retried(small, fresh):
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    small.fault("/tiny-org/tiny/resolve/", "429", times=2)
    n = len(small.requests)
    path = hf_hub_download(TINY, "config.json")  # the HEAD is retried with backoff
    assert Path(path).is_file()
    assert [s for _, p, s in _since(small, n) if "config.json" in p][:3] == [429, 429, 200]
    small.fault("/api/models/tiny-org/tiny", "429")
    with pytest.raises(HfHubHTTPError) as err:
        HfApi().model_info(TINY)
    assert err.value.response.status_code == 429


def test_500_html_and_stalled_api(small, fresh):
    import httpx2
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    small.fault("/api/models/tiny-org/tiny", "500", times=1)
    with pytest.raises(HfHubHTTPError) as err:
        HfApi().model_info(TINY)
    assert err.value.response.status_code == 500
    # a captive portal: 200 with a page, no hub headers
    small.fault("/tiny-org/tiny/resolve/", "html", times=1)
    with pytest.raises(LocalEntryNotFoundError):
        hf_hub_download(TINY, "config.json")
    small.fault("/api/models/tiny-org/tiny", "html", times=1)
    with pytest.raises(ValueError):  # json.JSONDecodeError
        HfApi().model_info(TINY)
    small.fault("/api/models/tiny-org/tiny", "stall", times=1)
    t0 = time.perf_counter()
    with pytest.raises(httpx2.ReadTimeout):
        HfApi().model_info(TINY, timeout=0.3)
    assert time.perf_counter() - t0 < 5


def test_one_stall_or_cut_is_resumed(small, fresh):
    """A download that stalls (or is cut) once, past the clients' first 10 MiB piece, resumes with a ``Range``
    request and ends whole."""
    from huggingface_hub import hf_hub_download

    for kind in ("stall", "cut"):
        home = fresh / kind
        with small.patched(None, home, timeout=0.5):
            small.fault("/tiny-org/tiny/resolve/", kind, times=1, after=RESUMABLE, method="GET")
            n = len(small.requests)
            path = hf_hub_download(TINY, "model.safetensors")
        assert Path(path).read_bytes() == WEIGHTS
        statuses = [(m, s) for m, p, s in _since(small, n) if "model.safetensors" in p]
        assert ("GET", 206) in statuses, statuses


def test_lasting_faults_fail_and_leave_no_file(small, fresh):
    """A download that is cut, stalled or rate limited every time fails after the clients' retries, and nothing
    complete enters the cache: a later try (online or offline) never uses the half download. The three run at once:
    each waits on the clients' own backoff."""
    import httpx2
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    small.fault("/tiny-org/tiny/resolve/main/model.safetensors", "cut", method="GET")
    small.fault("/tiny-org/tiny/resolve/main/config.json", "429")

    def attempt(repo, filename, home):
        with pytest.raises(Exception) as err:
            hf_hub_download(repo, filename, cache_dir=home / "hub")
        return err.value

    homes = {k: fresh / k for k in ("cut", "stall", "429")}
    with ThreadPoolExecutor(3) as pool:
        cut = pool.submit(attempt, TINY, "model.safetensors", homes["cut"])
        stall = pool.submit(attempt, "tiny-org/stalling", "model.safetensors", homes["stall"])
        limited = pool.submit(attempt, TINY, "config.json", homes["429"])
        errors = {"cut": cut.result(), "stall": stall.result(), "429": limited.result()}
    assert isinstance(errors["cut"], httpx2.RemoteProtocolError), repr(errors["cut"])
    assert "complete message body" in str(errors["cut"])
    assert isinstance(errors["stall"], httpx2.TimeoutException), repr(errors["stall"])
    assert isinstance(errors["429"], LocalEntryNotFoundError)
    assert errors["429"].__cause__.response.status_code == 429
    for home in homes.values():
        assert _blobs(home) == []
        assert not list((home / "hub").rglob("snapshots/*/*"))
    with small.patched(None, fresh, offline=True), pytest.raises(LocalEntryNotFoundError):
        hf_hub_download("tiny-org/stalling", "model.safetensors", cache_dir=homes["stall"] / "hub")


def test_cli_help():
    r = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("hubserver.py")), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "--shared" in r.stdout and "--port" in r.stdout
