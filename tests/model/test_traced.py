"""The nnsight engine equals the TransformerLens engine on five architectures and the shipped organism; only small
tensors leave a trace; the code shipped to NDIF runs without this package installed; --remote fails in one line."""

import os
import sys

import pytest
import torch

nnsight = pytest.importorskip("nnsight", reason="nnsight is not installed (pip install 'gpt2_posheads[nnsight]')")

from gpt2_posheads import (  # noqa: E402
    average_ext_pos_embed,
    average_pos_embed,
    diagonal_attention,
    extended_pos_embeddings_by_layer,
    head_table,
    load_model,
    mask_previous_attention,
    prev_token_ranking,
)
from gpt2_posheads.analysis.diagonals import _finish_ranking  # noqa: E402
from gpt2_posheads.model.engine_nnsight import load_traced, result_bytes  # noqa: E402

from conftest import ARCHITECTURES, EXPERIMENTS, MINI_DIR, Started  # noqa: E402

MODELS = (*ARCHITECTURES, "mini-gpt2")


@pytest.fixture(scope="module")
def pairs(arch_dirs):
    """(TransformerLens model, traced model) per architecture, loaded once."""
    dirs = {**arch_dirs, "mini-gpt2": MINI_DIR}
    return {a: (load_model(dirs[a], device="cpu"), load_traced(dirs[a])) for a in MODELS}


def _tokens(model, n=3, pos=40, seed=0):
    return torch.randint(1, model.cfg.d_vocab, (n, pos), generator=torch.Generator().manual_seed(seed))


def _close(a, b, tol=1e-5):
    return float((a - b).nan_to_num().abs().max()) <= tol and bool((a.isnan() == b.isnan()).all())


@pytest.mark.parametrize("arch", MODELS)
def test_ranking_and_atlas_equal_the_transformerlens_engine(arch, pairs):
    tl, nm = pairs[arch]
    toks = _tokens(tl)
    assert _close(diagonal_attention(tl, toks, progress=False), diagonal_attention(nm, toks))
    r_tl, r_nn = prev_token_ranking(tl, toks, progress=False), prev_token_ranking(nm, toks)
    assert r_tl.name.tolist() == r_nn.name.tolist() and r_tl.is_prev_token.tolist() == r_nn.is_prev_token.tolist()
    num = r_tl.select_dtypes("number").columns
    assert float((r_tl[num] - r_nn[num]).abs().max().max()) <= 1e-5
    a_tl = head_table(tl, toks, protocol="ood-composition", n_seqs=3, seg_len=8)
    a_nn = head_table(nm, toks, protocol="ood-composition", n_seqs=3, seg_len=8)
    num = a_tl.select_dtypes("number").columns
    assert a_tl.is_prev_token.tolist() == a_nn.is_prev_token.tolist()
    assert float((a_tl[num] - a_nn[num]).abs().max().max()) <= 1e-5


@pytest.mark.parametrize("arch", MODELS)
def test_extended_embeddings_and_interventions_equal_the_transformerlens_engine(arch, pairs):
    tl, nm = pairs[arch]
    layers = [0, 2, tl.cfg.n_layers]
    e_tl = extended_pos_embeddings_by_layer(tl, layers, n_prompts=2, seq_len=24)
    e_nn = extended_pos_embeddings_by_layer(nm, layers, n_prompts=2, seq_len=24)
    for l in layers:  # the organism's final residual is large: relative
        assert float((e_tl[l] - e_nn[l]).abs().max()) <= 1e-5 * (1 + float(e_tl[l].abs().max()))
    toks = _tokens(tl, 2, 30)
    ivs = [mask_previous_attention(5, [0, 1]), average_ext_pos_embed(1, 4, n_prompts=2, seq_len=30)]
    if arch not in ("pythia", "llama"):
        ivs.append(average_pos_embed(10))
    clean = diagonal_attention(tl, toks, progress=False)
    for iv in ivs:
        d_tl = diagonal_attention(tl, toks, edits=[iv], progress=False)
        d_nn = diagonal_attention(nm, toks, edits=[iv])
        assert float((d_tl - clean).nan_to_num().abs().max()) > 1e-6, iv.name  # the intervention does something
        # GPT-Neo's and OPT's TransformerLens pattern hooks show the pattern before a masking edit (it goes through
        # hook_z there); the nnsight engine reports the pattern the model attends with: compare the layers above
        first = 2 if iv.name.startswith("mask") and arch in ("gpt-neo", "opt") else 0
        assert _close(d_tl[first:], d_nn[first:]), iv.name


def test_the_shipped_code_runs_without_this_package(pairs, monkeypatch):
    """remote="local": nnsight serialises the session exactly as for NDIF and deserialises it with gpt2_posheads
    unimportable (as on NDIF's servers), then runs it: the same function, the same numbers."""
    from nnsight.intervention.backends.local import LocalSimulationBackend

    class Hidden:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "gpt2_posheads":
                raise ModuleNotFoundError(f"No module named {name!r}")

    blocker, hide, restore = Hidden(), LocalSimulationBackend._hide_local_modules, LocalSimulationBackend._restore
    monkeypatch.setattr(
        LocalSimulationBackend, "_hide_local_modules", lambda s: (sys.meta_path.insert(0, blocker), hide(s))[1]
    )
    monkeypatch.setattr(LocalSimulationBackend, "_restore", lambda s, h: (sys.meta_path.remove(blocker), restore(s, h)))
    tl, nm = pairs["llama"]
    toks = _tokens(tl)
    here = prev_token_ranking(nm, toks)
    monkeypatch.setattr(nm, "remote", "local")
    shipped = prev_token_ranking(nm, toks)
    masked = diagonal_attention(nm, toks, edits=[mask_previous_attention(5, [0])])
    assert here.equals(shipped) and masked.shape == (3, 4, 40)


def test_a_ranking_returns_under_a_megabyte_for_llama_70b_and_no_pattern():
    """What a traced ranking returns is finish() of its state: measured on a Llama-70B shape (80 layers, 64 heads,
    every offset of 1,024-token prompts), from shapes alone."""
    L, H, n = 80, 64, 1024
    state = dict(sums=torch.rand(L, H, n, dtype=torch.float64), counts=torch.arange(n, 0, -1).double(), keep=16)
    out = _finish_ranking(state)
    assert result_bytes(out) <= 2**20, result_bytes(out)
    assert all(t.ndim == 0 or (t.shape[:2] == (L, H) and t.numel() <= L * H * 16) for t in out.values())  # no [q, k]
    assert result_bytes({"pattern": torch.zeros(1, H, n, n)}) > 100 * 2**20  # what one layer's pattern would be


def test_a_small_ranking_returns_only_per_head_tensors(pairs):
    from gpt2_posheads.analysis.diagonals import traced_stats

    tl, nm = pairs["gpt2"]
    out = traced_stats(nm, _tokens(tl, 2, 64))
    assert set(out) == {"top_offset", "top_mass", "second_mass", "ratio", "prev_mass", "profile"}
    assert all(t.shape[:2] == (3, 4) and t.ndim <= 3 and t.shape[-1] <= 16 for t in out.values())


REMOTE = [  # (arguments, environment, words of the one line)
    (["--engine", "nnsight", "--remote"], {}, "NDIF_API_KEY is not set"),
    (["--engine", "nnsight", "--remote"], {"NDIF_API_KEY": "x", "NDIF_HOST": "http://127.0.0.1:9"}, "unreachable"),
    (["--remote"], {"NDIF_API_KEY": "x"}, "needs --engine nnsight"),
    (["--engine", "nnsight", "--remote", "--model-dir", str(MINI_DIR)], {"NDIF_API_KEY": "x"}, "not a local folder"),
]


@pytest.fixture(scope="module")
def remote_runs():
    """The script with each of :data:`REMOTE`'s arguments, as real processes started together (each spends its time
    in a fresh interpreter's imports, so they overlap); each test waits for its own."""
    base = {k: v for k, v in os.environ.items() if k not in ("NDIF_API_KEY", "NDIF_HOST")}
    runs = Started()
    for i, (args, env, _) in enumerate(REMOTE):
        runs.start(i, [sys.executable, str(EXPERIMENTS / "rank_prev_heads.py"), *args, "--no-png"], env={**base, **env})
    yield runs
    runs.stop()


@pytest.mark.parametrize("case", range(len(REMOTE)), ids=[words for _, _, words in REMOTE])
def test_remote_without_ndif_is_one_line(case, remote_runs):
    words = REMOTE[case][2]
    p, seconds = remote_runs.result(case, timeout=60)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --remote: ") and words in lines[0]
    assert seconds < 60  # a Python start and a 3-second bound, on a busy machine too: never a hang


def test_the_script_gives_the_same_ranking_and_verdicts(tmp_path):
    import json

    from conftest import run_script

    out = {}
    for engine in ("auto", "nnsight"):
        run_script(
            EXPERIMENTS / "rank_prev_heads.py",
            ["--model-dir", str(MINI_DIR), "--engine", engine, "--out", str(tmp_path / engine), "--no-png"]
            + ["--n-prompts", "8", "--seq-len", "64"],
        )
        out[engine] = json.loads((tmp_path / engine / "summary.json").read_text())
    verdicts = {e: [(c["key"], c["verdict"]) for c in s["claims"]] for e, s in out.items()}
    assert verdicts["auto"] == verdicts["nnsight"]
    assert [t["name"] for t in out["auto"]["top"]] == [t["name"] for t in out["nnsight"]["top"]]
    for a, b in zip(out["auto"]["top"], out["nnsight"]["top"]):
        assert abs(a["ratio"] - b["ratio"]) <= 1e-5
