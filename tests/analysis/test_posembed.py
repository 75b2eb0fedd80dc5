import math

import numpy as np
import pytest
import torch

from gpt2_posheads import load_model, make_random_model_dir
from gpt2_posheads.analysis.geometry import large_entry_fraction, pca, principal_angles, token_dependence
from gpt2_posheads.analysis.posembed import (
    centred_w_pos,
    extended_pos_embeddings,
    extended_pos_embeddings_by_layer,
    load_w_pos,
    token_rows,
)
from gpt2_posheads.model.paths import GPT2_W_POS

from conftest import conv1d_zero_outputs


def test_layer0_identity_random_model(tiny_model):
    """After BOS, the repeated token's rows at layer 0 are W_pos's rows centred over the same positions; without BOS
    every row is."""
    ext = extended_pos_embeddings(tiny_model, 0, n_prompts=3, seq_len=40)
    w = tiny_model.W_pos.detach()
    torch.testing.assert_close(
        token_rows(ext, True), token_rows(centred_w_pos(w, 40, bos=True), True), atol=1e-5, rtol=1e-4
    )
    assert float(token_rows(ext, True).mean(0).abs().max()) < 1e-5  # centred over the repeated token's rows
    no_bos = extended_pos_embeddings(tiny_model, 0, n_prompts=3, seq_len=40, bos=False)
    torch.testing.assert_close(no_bos, centred_w_pos(w, 40), atol=1e-5, rtol=1e-4)


def test_bos_row_is_the_bos_position(tiny_model):
    """Row 0 of the embeddings after BOS is the BOS position: at layer 0, W_E[BOS] - mean of the repeated tokens'
    embeddings, plus W_pos[0] minus the mean of the rows compared."""
    toks = [5, 17, 99]
    ext = extended_pos_embeddings(tiny_model, 0, tokens=toks, seq_len=16)
    w, e = tiny_model.W_pos.detach(), tiny_model.W_E.detach()
    bos = tiny_model.tokenizer.bos_token_id
    want = e[bos] - e[toks].mean(0) + w[0] - w[1:16].mean(0)
    torch.testing.assert_close(ext[0], want, atol=1e-5, rtol=1e-4)


def test_by_layer_matches_single_layer(tiny_model):
    both = extended_pos_embeddings_by_layer(tiny_model, [1, 3], n_prompts=2, seq_len=20)
    one = extended_pos_embeddings(tiny_model, 1, n_prompts=2, seq_len=20)
    torch.testing.assert_close(both[1], one)
    assert both[3].shape == (20, 64)
    assert not torch.allclose(both[1], both[3])


def test_silent_blocks_keep_layer0_answer(tmp_path, small_tokenizer):
    # blocks 0 and 1 write nothing: the residual entering blocks 1 and 2 is still W_E + W_pos
    d = make_random_model_dir(
        tmp_path,
        n_layers=3,
        n_heads=2,
        d_model=32,
        n_ctx=32,
        tokenizer=small_tokenizer,
        state_dict=conv1d_zero_outputs(3, 32, layers=[0, 1]),
    )
    m = load_model(d, device="cpu")
    ext = extended_pos_embeddings_by_layer(m, [0, 1, 2, 3], n_prompts=2)
    for l in (1, 2):
        torch.testing.assert_close(ext[l], ext[0], atol=1e-5, rtol=1e-4)
    assert (ext[3] - ext[0]).abs().max() > 1e-3


def test_per_token_matrices(tiny_model):
    ext, per = extended_pos_embeddings(tiny_model, 2, tokens=[5, 17, 99], seq_len=16, return_per_token=True)
    assert per.shape == (3, 16, 64)
    torch.testing.assert_close(per.mean(0), ext, atol=1e-6, rtol=1e-5)
    assert token_dependence(per) > 0
    _, per0 = extended_pos_embeddings(tiny_model, 0, tokens=[5, 17, 99], seq_len=16, return_per_token=True)
    assert token_dependence(token_rows(per0.transpose(0, 1), True).transpose(0, 1)) < 1e-5  # the token's rows


def test_bad_input(tiny_model, tmp_path):
    with pytest.raises(ValueError, match="layer"):
        extended_pos_embeddings(tiny_model, -1)
    with pytest.raises(ValueError, match="layer"):
        extended_pos_embeddings(tiny_model, tiny_model.cfg.n_layers + 1)
    with pytest.raises(ValueError, match="seq_len"):
        extended_pos_embeddings(tiny_model, 1, seq_len=tiny_model.cfg.n_ctx + 1)

    with pytest.raises(ValueError, match="does not exist"):
        load_w_pos(tmp_path / "missing.npy")


def test_principal_angles_known_answers():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(200, 10, generator=g)
    torch.testing.assert_close(principal_angles(a, a, k=3), torch.zeros(3), atol=1e-2, rtol=0)
    # subspaces in disjoint coordinates are orthogonal
    x = torch.zeros(100, 6)
    x[:, :3] = torch.randn(100, 3, generator=g)
    y = torch.zeros(100, 6)
    y[:, 3:] = torch.randn(100, 3, generator=g)
    torch.testing.assert_close(principal_angles(x, y, k=3), torch.full((3,), 90.0), atol=1e-3, rtol=0)
    # a 2-D signal, and the same signal with one axis rotated by 30 degrees out of the plane
    t = torch.linspace(0, 6.28, 300)
    base = torch.zeros(300, 3)
    base[:, 0], base[:, 1] = torch.cos(t) * 3, torch.sin(t)
    th = math.radians(30)
    rot = torch.tensor([[1, 0, 0], [0, math.cos(th), math.sin(th)], [0, -math.sin(th), math.cos(th)]])
    ang = principal_angles(base, base @ rot, k=2)
    torch.testing.assert_close(ang, torch.tensor([0.0, 30.0]), atol=1e-2, rtol=0)


def test_pca_and_sparsity_known_answers():
    x = torch.zeros(50, 4)
    x[:, 0] = torch.arange(50.0)
    comps, evr, proj = pca(x, 1)
    assert abs(abs(float(comps[0, 0])) - 1) < 1e-6 and abs(float(evr[0]) - 1) < 1e-6
    gauss = torch.randn(400, 400, generator=torch.Generator().manual_seed(1))
    assert abs(large_entry_fraction(gauss) - 0.3173) < 0.005
    sparse = torch.zeros(100, 100)
    sparse[::10, ::10] = 1.0
    assert large_entry_fraction(sparse) == pytest.approx(0.01)


def test_real_gpt2_w_pos_helix():
    w = load_w_pos(GPT2_W_POS)
    assert w.shape == (1024, 768)
    torch.testing.assert_close(w[0, :3], torch.tensor([-0.0188, -0.1974, 0.0040]), atol=1e-4, rtol=0)
    _, evr, _ = pca(w, 3)
    assert 0.85 < float(evr.sum()) < 0.95
    torch.testing.assert_close(evr, torch.tensor([0.33, 0.32, 0.25]), atol=0.015, rtol=0)


def test_layer0_identity_real_w_pos(tmp_path, small_tokenizer):
    """A GPT-2-shaped model carrying the real W_pos reproduces it as its layer-0 extended embedding (the repeated
    token's rows, after BOS)."""
    w = torch.from_numpy(np.load(GPT2_W_POS))
    d = make_random_model_dir(
        tmp_path,
        n_layers=1,
        n_heads=12,
        d_model=768,
        n_ctx=1024,
        tokenizer=small_tokenizer,
        state_dict={"transformer.wpe.weight": w},
    )
    raw = load_model(d, device="cpu", center_writing_weights=False)
    ext = extended_pos_embeddings(raw, 0, n_prompts=2, batch_size=2)
    torch.testing.assert_close(ext[1:], w[1:] - w[1:].mean(0), atol=1e-4, rtol=1e-4)


def test_neighbour_cosines_known_answers():
    """A circle of n points: consecutive centred rows at angle 2 pi / n, cosine cos(2 pi / n) exactly; rows that
    alternate in sign around a direction: about -1; GPT-2's real W_pos: a smooth curve (0.991, 0.999, 0.999)."""
    import numpy as np

    from gpt2_posheads.analysis.geometry import neighbour_cosines

    n = 256
    angle = torch.arange(n) * 2 * math.pi / n
    circle = torch.stack([angle.cos(), angle.sin()], dim=1)
    assert neighbour_cosines(circle) == pytest.approx([math.cos(2 * math.pi / n)] * 3, abs=1e-5)
    signs = torch.tensor([(-1.0) ** p for p in range(n)])[:, None]
    alternating = signs * torch.tensor([[1.0, 0.5]]) + 0.01 * torch.randn(
        n, 2, generator=torch.Generator().manual_seed(0)
    )
    assert all(c < -0.95 for c in neighbour_cosines(alternating))
    assert math.isnan(neighbour_cosines(circle[:10])[1])  # a range beyond the rows is empty
    gpt2 = torch.tensor(np.load(GPT2_W_POS))
    assert neighbour_cosines(gpt2) == pytest.approx([0.991, 0.999, 0.999], abs=1e-3)
