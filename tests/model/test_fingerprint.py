"""A model folder's fingerprint covers every byte of its weights, and a rerun on unchanged files reads none of them."""

import hashlib
import os
import shutil
import types

import pytest

from gpt2_posheads.cli.experiment import model_identity
from gpt2_posheads.model import folder as fingerprint
from gpt2_posheads.model.folder import safetensors_header
from gpt2_posheads.model.paths import CACHE_ENV

MIB = 1 << 20


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache folder of this test's own."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def wide_dir(tmp_path_factory, small_tokenizer):
    """A random GPT-2 whose weights file is several MiB, so a tensor lies wholly inside its middle."""
    from gpt2_posheads import make_random_model_dir

    return make_random_model_dir(
        tmp_path_factory.mktemp("wide"), n_layers=4, n_heads=4, d_model=128, n_ctx=64, tokenizer=small_tokenizer
    )


def middle_tensor(path):
    """A tensor whose bytes lie neither in the file's first MiB nor in its last: ``(name, file offset)``."""
    size = path.stat().st_size
    with path.open("rb") as f:
        start = 8 + int.from_bytes(f.read(8), "little")
    for name, info in safetensors_header(path).items():
        lo, hi = (start + o for o in info["data_offsets"])
        if lo >= MIB and hi <= size - MIB and hi - lo >= 8:
            return name, lo
    raise AssertionError("no tensor in the middle of the file")


def test_a_change_in_the_middle_of_the_weights_changes_the_fingerprint(wide_dir, tmp_path, cache):
    """Two folders that differ only in one tensor in the middle of model.safetensors (its first and last MiB
    identical): different fingerprints, as the results folder sees them (model_identity)."""
    other = tmp_path / wide_dir.name
    shutil.copytree(wide_dir, other)
    path = other / "model.safetensors"
    name, offset = middle_tensor(path)
    with path.open("r+b") as f:
        f.seek(offset)
        old = f.read(4)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in old))
    a, b = (wide_dir / "model.safetensors").read_bytes(), path.read_bytes()
    assert a != b and a[:MIB] == b[:MIB] and a[-MIB:] == b[-MIB:] and len(a) == len(b)
    ids = [model_identity(types.SimpleNamespace(model_dir=str(d), model=None)) for d in (wide_dir, other)]
    assert ids[0]["fingerprint"] != ids[1]["fingerprint"], name
    assert all(i["fingerprint"].startswith("sha256:") for i in ids)
    assert fingerprint.folder_fingerprint(wide_dir) == ids[0]["fingerprint"]  # the same folder, the same fingerprint


def test_the_file_hash_is_the_whole_file_sha256(wide_dir, cache):
    path = wide_dir / "model.safetensors"
    assert fingerprint.cached_file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_rerun_reads_no_weights_and_a_rewritten_file_is_hashed_again(wide_dir, tmp_path, cache, monkeypatch):
    folder = tmp_path / "m"
    shutil.copytree(wide_dir, folder)
    hashed = []
    whole = fingerprint.file_sha256
    monkeypatch.setattr(fingerprint, "file_sha256", lambda p: (hashed.append(p.name), whole(p))[1])
    first = fingerprint.folder_fingerprint(folder)
    assert sorted(hashed) == ["config.json", "model.safetensors"]
    assert (cache / fingerprint.CACHE_FILE).is_file()
    hashed.clear()
    assert fingerprint.folder_fingerprint(folder) == first and hashed == []  # every hash from the cache
    st = (folder / "model.safetensors").stat()
    os.utime(folder / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert fingerprint.folder_fingerprint(folder) == first and hashed == ["model.safetensors"]


def test_the_cache_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    assert fingerprint.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fingerprint.cache_dir() == tmp_path / "xdg" / "gpt2_posheads"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fingerprint.cache_dir() == tmp_path / "home" / ".cache" / "gpt2_posheads"


def test_an_unwritable_cache_still_gives_the_fingerprint(wide_dir, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))
    assert (
        fingerprint.cached_file_sha256(wide_dir / "config.json")
        == hashlib.sha256((wide_dir / "config.json").read_bytes()).hexdigest()
    )
