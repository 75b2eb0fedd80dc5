"""The hook-free fast path reproduces the TransformerLens pass, checks itself, and steps aside for hooks."""

import pytest
import torch
import torch.nn.functional as F

from gpt2_posheads import load_model
from gpt2_posheads.analysis.diagonals import diagonal_attention
from gpt2_posheads.analysis.interventions import mask_previous_attention
from gpt2_posheads.analysis.posembed import extended_pos_embeddings_by_layer
from gpt2_posheads.model import engine_fast as fastpath
from gpt2_posheads.model.engine import EngineError
from gpt2_posheads.model.engine_fast import FastPathUnsupported, fast_forward

from conftest import MINI_DIR


@pytest.fixture(scope="module")
def trained_model():
    """The trained mini model: sharp, varied attention, unlike N(0, 0.02) random weights."""
    if not (MINI_DIR / "model.safetensors").exists():
        pytest.skip("data/mini-gpt2 is not present")
    return load_model(MINI_DIR, device="cpu")


def _prompts(n, pos, vocab, seed):
    return torch.randint(0, vocab, (n, pos), generator=torch.Generator().manual_seed(seed))


def test_fast_diagonals_equal_hooked(trained_model, monkeypatch):
    from gpt2_posheads.model import state as precision

    monkeypatch.setenv(precision.FORCE_ENV, "1")  # the bfloat16 path itself, even on a CPU that emulates it
    toks = _prompts(3, 48, trained_model.cfg.d_vocab, seed=0)
    hooked = diagonal_attention(trained_model, toks, max_offset=40, progress=False, engine="hooks")
    fast = diagonal_attention(trained_model, toks, max_offset=40, progress=False, engine="fast")
    assert hooked[:, :, 1].std() > 1e-2  # the heads differ: the comparison has something to compare
    torch.testing.assert_close(fast, hooked, atol=1e-6, rtol=1e-5)
    bf16 = diagonal_attention(trained_model, toks, max_offset=40, progress=False, engine="fast", bf16=True)
    torch.testing.assert_close(bf16, hooked, atol=2e-3, rtol=0)
    assert not torch.equal(bf16, fast)  # it really ran in bfloat16


def test_fast_diagonals_mixed_lengths(trained_model):
    # prompts of two lengths: the scratch buffers are reused within a length and reallocated across
    toks = list(_prompts(3, 30, trained_model.cfg.d_vocab, seed=5)) + list(
        _prompts(2, 17, trained_model.cfg.d_vocab, seed=6)
    )
    hooked = diagonal_attention(trained_model, toks, max_offset=20, batch_size=2, progress=False, engine="hooks")
    fast = diagonal_attention(trained_model, toks, max_offset=20, batch_size=2, progress=False, engine="fast")
    torch.testing.assert_close(fast, hooked, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("rows_per_thread", [7, 4096])
def test_mlp_chunking_changes_nothing(trained_model, monkeypatch, rows_per_thread):
    """3 x 48 = 144 rows through the MLP in chunks of 7 per thread (ragged last chunk) or all at once: the
    hooked pass's diagonals either way (each row's MLP is independent of the others)."""
    monkeypatch.setattr(fastpath, "MLP_CHUNK_PER_THREAD", rows_per_thread)
    fastpath.release(trained_model)
    toks = _prompts(3, 48, trained_model.cfg.d_vocab, seed=3)
    hooked = diagonal_attention(trained_model, toks, max_offset=40, progress=False, engine="hooks")
    fast = diagonal_attention(trained_model, toks, max_offset=40, progress=False, engine="fast")
    torch.testing.assert_close(fast, hooked, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("rows", [5, 16])
def test_causal_blocks_change_nothing(trained_model, monkeypatch, rows):
    """Long prompts attend in blocks of query rows against the keys each block sees: here from 20 positions on, in
    blocks of 5 or 16 rows (48 = 9 x 5 + 3: a ragged last block). The hooked pass's diagonals, every one of them (the
    pattern's zeros above the diagonal, which the one-pass diagonal sums rely on, included), and its residuals."""
    monkeypatch.setattr(fastpath, "CAUSAL_BLOCKS_FROM", 20)
    monkeypatch.setattr(fastpath, "CAUSAL_BLOCK_ROWS", rows)
    toks = _prompts(3, 48, trained_model.cfg.d_vocab, seed=5)
    hooked = diagonal_attention(trained_model, toks, progress=False, engine="hooks")
    fast = diagonal_attention(trained_model, toks, progress=False, engine="fast")
    assert fast.shape[-1] == 48 and bool(fast[..., 47].isnan().all())  # offset 47's one entry is key 0, left out
    torch.testing.assert_close(fast, hooked, atol=1e-6, rtol=1e-5, equal_nan=True)
    patterns = []
    fast_forward(trained_model, engine="fast").patterns(toks, lambda l, p: patterns.append(p.clone()))
    assert all(float(p.triu(1).abs().max()) == 0.0 for p in patterns)
    assert all(torch.allclose(p.sum(-1), torch.ones(p.shape[:-1])) for p in patterns)


def test_qkv_fused_per_call_changes_nothing(trained_model, monkeypatch):
    """A model too big to keep its fused QKV matrices (GPT-2 large, XL) fuses each layer's when it runs: the same
    diagonals and residuals, with no fused matrix kept beyond one reused buffer."""
    monkeypatch.setattr(fastpath, "FUSED_QKV_CACHE_BYTES", 0)
    fastpath.release(trained_model)
    fast = fast_forward(trained_model, engine="fast")
    assert fast.fuse_per_call and all(b.W_qkv is None for b in fast.blocks)
    # the per-head weights are the model's own tensors, not copies
    assert fast.blocks[1].qkv[0].data_ptr() == trained_model.blocks[1].attn.W_Q.data_ptr()
    toks = _prompts(3, 48, trained_model.cfg.d_vocab, seed=4)
    hooked = diagonal_attention(trained_model, toks, max_offset=40, progress=False, engine="hooks")
    torch.testing.assert_close(
        diagonal_attention(trained_model, toks, max_offset=40, progress=False, engine="fast"),
        hooked,
        atol=1e-6,
        rtol=1e-5,
    )
    kw = dict(n_prompts=2, seq_len=32, batch_size=2)
    a = extended_pos_embeddings_by_layer(trained_model, [3], engine="hooks", **kw)[3]
    b = extended_pos_embeddings_by_layer(trained_model, [3], engine="fast", **kw)[3]
    torch.testing.assert_close(b, a, atol=1e-5 * float(a.abs().max()), rtol=1e-5)
    fastpath.release(trained_model)


def test_fast_ext_pos_equal_hooked(trained_model):
    layers = [0, 2, trained_model.cfg.n_layers]
    kw = dict(n_prompts=3, seq_len=64, batch_size=2)
    hooked = extended_pos_embeddings_by_layer(trained_model, layers, engine="hooks", **kw)
    fast = extended_pos_embeddings_by_layer(trained_model, layers, engine="fast", **kw)
    for layer in layers:
        scale = float(hooked[layer].abs().max())
        torch.testing.assert_close(fast[layer], hooked[layer], atol=1e-5 * scale, rtol=1e-5)


def test_interventions_take_the_hooked_path(trained_model):
    toks = _prompts(2, 32, trained_model.cfg.d_vocab, seed=1)
    edits = [mask_previous_attention(every=1, layers=[0])]
    auto = diagonal_attention(trained_model, toks, max_offset=8, progress=False, edits=edits)
    hooked = diagonal_attention(trained_model, toks, max_offset=8, progress=False, edits=edits, engine="hooks")
    torch.testing.assert_close(auto, hooked)
    assert float(auto[0, :, 1].abs().max()) < 1e-6  # the mask really ran: layer 0 no longer sees offset 1
    with pytest.raises(EngineError, match="fast engine cannot apply an intervention"):
        diagonal_attention(trained_model, toks, max_offset=8, progress=False, edits=edits, engine="fast")


def test_unknown_engine(tiny_model):
    with pytest.raises(ValueError, match="engine='turbo'"):
        diagonal_attention(tiny_model, _prompts(1, 8, 100, 0), progress=False, engine="turbo")


def test_unreproduced_model_falls_back_to_hooks(tiny_dir, monkeypatch):
    model = load_model(tiny_dir, device="cpu")
    monkeypatch.setattr(fastpath, "attn_scale", lambda cfg, layer: 1.0)  # a wrong softmax temperature
    toks = _prompts(2, 20, model.cfg.d_vocab, seed=2)
    with pytest.raises(FastPathUnsupported, match="does not reproduce it"):
        fast_forward(model, engine="fast")
    with pytest.warns(UserWarning, match="fast path disabled"):
        auto = diagonal_attention(model, toks, max_offset=8, progress=False)
    hooked = diagonal_attention(model, toks, max_offset=8, progress=False, engine="hooks")
    torch.testing.assert_close(auto, hooked)


def test_a_wrong_fused_attention_is_caught(tiny_dir, monkeypatch):
    # the residual-only workloads run the fused SDPA branch: the self-check compares it with the explicit one
    model = load_model(tiny_dir, device="cpu")
    sdpa = fastpath.F.scaled_dot_product_attention
    monkeypatch.setattr(
        fastpath.F,
        "scaled_dot_product_attention",
        lambda q, k, v, is_causal=False, scale=None: sdpa(q, k, v, is_causal=False, scale=scale),
    )
    with pytest.raises(FastPathUnsupported, match="fused attention disagrees"):
        fast_forward(model, engine="fast")


def test_unsupported_config_is_named(tiny_dir, monkeypatch):
    model = load_model(tiny_dir, device="cpu")
    monkeypatch.setattr(model.cfg, "act_fn", "solu_ln")
    with pytest.raises(FastPathUnsupported, match="act_fn 'solu_ln'"):
        fast_forward(model, engine="fast")


def test_weight_edits_are_seen(tiny_dir):
    model = load_model(tiny_dir, device="cpu")
    before = extended_pos_embeddings_by_layer(model, [0], n_prompts=1, seq_len=16)[0]
    wpe = next(p for n, p in model.named_parameters() if "wpe" in n or "pos_embed" in n)
    with torch.no_grad():
        wpe[:16] += torch.linspace(0, 1, 16)[:, None]  # in place: same storage, new version
    after = extended_pos_embeddings_by_layer(model, [0], n_prompts=1, seq_len=16)[0]
    w = model.W_pos.detach()[1:16]  # the repeated token's rows, after BOS
    torch.testing.assert_close(after[1:], w - w.mean(0), atol=1e-6, rtol=1e-5)
    assert not torch.allclose(before, after)


def test_release_forgets_the_model(tiny_dir):
    model = load_model(tiny_dir, device="cpu")
    first = fast_forward(model)
    assert fast_forward(model) is first  # gathered once, reused
    fastpath.release(model)
    assert fast_forward(model) is not first


def test_bf16_falls_back_to_float32_without_native_support(tiny_dir, monkeypatch):
    from gpt2_posheads.analysis.diagonals import diagonal_attention
    from gpt2_posheads.model import state as precision

    model = load_model(tiny_dir, device="cpu")
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    monkeypatch.delenv(precision.FORCE_ENV, raising=False)
    precision._WARNED.clear()
    prompts = torch.randint(0, 100, (2, 16))
    with pytest.warns(UserWarning, match="running float32 instead"):
        got = diagonal_attention(model, prompts, bf16=True, progress=False)
    torch.testing.assert_close(got, diagonal_attention(model, prompts, progress=False), equal_nan=True)  # float32
    assert precision.resolve_bf16(True, "cpu", force=True) is True  # the override
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    assert precision.resolve_bf16(True, "cpu") is True
    assert precision.resolve_bf16(False, "cpu") is False


def test_inplace_activations_match_torch():
    from gpt2_posheads.model.engine_fast import ACTIVATIONS

    x = torch.randn(300, 64, generator=torch.Generator().manual_seed(0)) * 3
    want = {"gelu_new": F.gelu(x, approximate="tanh"), "gelu": F.gelu(x), "relu": F.relu(x), "silu": F.silu(x)}
    for name, ref in want.items():
        got = ACTIVATIONS[name](x.clone())
        torch.testing.assert_close(got, ref, atol=2e-6, rtol=1e-6)
