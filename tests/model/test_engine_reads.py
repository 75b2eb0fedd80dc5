"""What an engine reads for the analyses that recompute attention themselves (``Engine.activations``: queries and
keys as the scores use them, head outputs, patterns, residuals; ``residual_write``), and the patterns-with-logits
reduction of the induction score, on random-weight models of five architectures.

The reads are checked against the model's own computation (the softmax of the scaled ``q . k`` plus the mask is the
pattern the model attends with), the write against what a head must compute from a residual it is given, and each
engine that cannot read or write says so (:class:`~gpt2_posheads.model.engine.EngineError`). ``"auto"`` hands these
passes to TransformerLens hooks, so its numbers equal the hooks engine's to the bit; the induction score through an
nnsight trace agrees with the hooks engine to float32 rounding (1e-6, as ``test_engines.py`` measures the engines).
"""

import importlib.util

import pytest
import torch

from gpt2_posheads import load_model
from gpt2_posheads.analysis.induction import induction_scores
from gpt2_posheads.analysis.scores import attention_scores, score_profile
from gpt2_posheads.analysis.sources import path_ablation
from gpt2_posheads.model.engine import (
    READS,
    EngineError,
    Reduction,
    attn_scale,
    engine_for,
    residual_write,
    scale_from_pattern,
)

from conftest import ARCHITECTURES

HAS_NNSIGHT = importlib.util.find_spec("nnsight") is not None


@pytest.fixture(scope="session")
def tl_models(arch_dirs):
    return {a: load_model(arch_dirs[a], device="cpu") for a in ARCHITECTURES}


def _tokens(model, n=2, pos=24, seed=0):
    return torch.randint(1, model.cfg.d_vocab, (n, pos), generator=torch.Generator().manual_seed(seed))


def _keep(state, layer, acts):
    state.setdefault(layer, []).append(acts)


def _kept(state):
    return state


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_reads_are_the_attention_the_model_computes(arch, tl_models):
    """Every read of every layer arrives once per batch, all of a layer's reads together, with the shapes the
    engine names; ``softmax(q . k * scale + mask)`` is the pattern read beside them (rotary queries and keys rotated,
    grouped-query keys one per query head), and the residual entering the last block plus nothing is what ``"resid"``
    at ``n_layers`` is not: the final residual is a different tensor."""
    m = tl_models[arch]
    L, H, d, dh = m.cfg.n_layers, m.cfg.n_heads, m.cfg.d_model, m.cfg.d_head
    batches = [_tokens(m, 2, 24, seed=0), _tokens(m, 3, 24, seed=1)]
    every = list(range(L))
    reads = {"q": every, "k": every, "z": every, "pattern": every, "resid": [*every, L]}
    got = engine_for(m, "hooks").activations(batches, reads, Reduction(_keep, _kept))
    assert sorted(got) == [*every, L]
    for l in every:
        assert len(got[l]) == len(batches)
        for b, acts in zip(batches, got[l]):
            n, p = b.shape
            assert set(acts) == set(READS)
            assert acts["q"].shape == acts["k"].shape == acts["z"].shape == (n, p, H, dh)
            assert acts["pattern"].shape == (n, H, p, p) and acts["resid"].shape == (n, p, d)
            dot = torch.einsum("bqhd,bkhd->bhqk", acts["q"].float(), acts["k"].float())
            _, _, err = scale_from_pattern(dot, acts["pattern"].float(), attn_scale(m.cfg, l))
            assert err < 1e-4, f"{arch} layer {l}: the reads do not give the model's pattern (off by {err:.1e})"
    assert [set(a) for a in got[L]] == [{"resid"}] * len(batches)
    assert not torch.equal(got[L][0]["resid"], got[L - 1][0]["resid"])


def test_a_residual_write_is_what_the_head_reads(tl_models):
    """Writing the clean residual back leaves the queries and keys as they are, to the bit; writing zeros leaves a
    LayerNorm model nothing per position to read: every position's query is the same."""
    m = tl_models["gpt2"]
    eng, toks, layer = engine_for(m, "hooks"), _tokens(m), 2
    clean = eng.activations([toks], {"q": [layer], "k": [layer], "resid": [layer]}, Reduction(_keep, _kept))[layer][0]
    for value, same in ((clean["resid"], True), (torch.zeros_like(clean["resid"]), False)):
        edits = [residual_write(layer, value)]
        got = eng.activations([toks], {"q": [layer], "k": [layer]}, Reduction(_keep, _kept), edits)[layer][0]
        assert torch.equal(got["q"], clean["q"]) == same and torch.equal(got["k"], clean["k"]) == same
    q = got["q"]
    torch.testing.assert_close(q, q[:, :1].expand_as(q))


def test_auto_runs_these_analyses_as_the_hooks_engine_does(tl_models):
    """``"auto"`` hands reads, residual writes and logits to TransformerLens hooks: the same pass, bit for bit."""
    m = tl_models["gpt2"]
    toks = _tokens(m, 4, 24)
    runs = {
        "attention_scores": lambda e: attention_scores(m, toks[0], 1, 2, engine=e),
        "score_profile": lambda e: {"": score_profile(m, toks, window=3, skip_first=4, engine=e)},
        "induction_scores": lambda e: vars(induction_scores(m, n_seqs=4, seg_len=8, batch_size=2, engine=e)),
        "path_ablation": lambda e: {
            c: torch.tensor(v.to_numpy(dtype=float))
            for c, v in path_ablation(m, toks, 2, 1, batch_size=2, below=True, engine=e).select_dtypes("number").items()
        },
    }
    for name, run in runs.items():
        torch.testing.assert_close(run("auto"), run("hooks"), rtol=0, atol=0, equal_nan=True, msg=name)


class _Store:
    """The least that :class:`~gpt2_posheads.model.engine.StoredActivations` is: per-diagonal masses and extended
    embeddings, no activations of new inputs."""

    diagonals = torch.zeros(1, 1, 1)

    def ext_pos(self, layer):
        return torch.zeros(1, 1)


def test_what_an_engine_cannot_read_is_one_clear_error(tl_models, arch_dirs):
    m = tl_models["gpt2"]
    toks, reads = _tokens(m), {"q": [0], "k": [0]}
    with pytest.raises(EngineError, match=r"fast engine cannot read activations \(k, q\)"):
        engine_for(m, "fast").activations([toks], reads, Reduction(_keep, _kept))
    with pytest.raises(EngineError, match="fast engine cannot hand logits to a reduction"):
        induction_scores(m, n_seqs=2, seg_len=8, engine="fast")
    with pytest.raises(EngineError, match="stored engine cannot read activations"):
        engine_for(_Store()).activations(None, reads, Reduction(_keep, _kept))
    with pytest.raises(ValueError, match="cannot read 'v'"):
        engine_for(m, "hooks").activations([toks], {"v": [0]}, Reduction(_keep, _kept))
    with pytest.raises(ValueError, match="resid layer: 4 is out of range"):
        engine_for(m, "hooks").activations([toks], {"resid": [4]}, Reduction(_keep, _kept))
    if HAS_NNSIGHT:
        from gpt2_posheads.model.engine_nnsight import load_traced

        nm = load_traced(arch_dirs["gpt2"])
        with pytest.raises(EngineError, match="nnsight engine cannot read activations"):
            score_profile(nm, toks, window=3, skip_first=4)
        with pytest.raises(EngineError, match="nnsight engine cannot apply an intervention \\(a residual write\\)"):
            engine_for(nm).run(toks[:2, :24], [residual_write(1, torch.zeros(2, 24, m.cfg.d_model))])


@pytest.mark.skipif(not HAS_NNSIGHT, reason="nnsight is not installed")
@pytest.mark.parametrize("arch", ["gpt2", "pythia"])
def test_induction_is_the_same_through_an_nnsight_trace(arch, tl_models, arch_dirs):
    """Patterns and logits of one traced pass per batch: the induction scores and copy losses of the hooks engine
    (logits differ by a constant per position, which the loss does not see)."""
    from gpt2_posheads.model.engine_nnsight import load_traced

    kw = dict(n_seqs=5, seg_len=8, batch_size=2)  # a ragged last batch: the trace pairs each batch's logits right
    for bos in (True, False):
        ref = induction_scores(tl_models[arch], bos=bos, **kw)
        got = induction_scores(load_traced(arch_dirs[arch]), bos=bos, **kw)
        torch.testing.assert_close(got.scores, ref.scores, atol=1e-6, rtol=0)
        assert abs(got.loss_first - ref.loss_first) <= 1e-6 * ref.loss_first
        assert abs(got.loss_second - ref.loss_second) <= 1e-6 * ref.loss_second
