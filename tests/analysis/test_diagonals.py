import pytest
import torch

from gpt2_posheads import diagonal_attention, prev_token_ranking
from gpt2_posheads.analysis.diagonals import diagonal_counts, diagonal_sums

from conftest import HANDSET


def _prompts(n, seq_len, vocab, seed=0):
    return torch.randint(0, vocab, (n, seq_len), generator=torch.Generator().manual_seed(seed))


def test_handset_previous_token_head_ranks_first(handset_model):
    prompts = _prompts(4, HANDSET["n_ctx"], handset_model.cfg.d_vocab)
    df = prev_token_ranking(handset_model, prompts, progress=False)
    first = df.iloc[0]
    assert first["name"] == "L0H0"
    assert first["top_offset"] == 1
    assert first["ratio"] < 0.05
    assert bool(first["is_prev_token"])


def test_handset_current_and_uniform_heads(handset_model):
    prompts = _prompts(4, HANDSET["n_ctx"], handset_model.cfg.d_vocab)
    df = prev_token_ranking(handset_model, prompts, progress=False).set_index("name")
    assert df.loc["L0H1", "top_offset"] == 0
    assert df.loc["L0H1", "ratio"] < 0.05
    # uniform attention 1/(q+1): neighbouring diagonals differ only by their share of late queries
    assert df.loc["L0H2", "ratio"] > 0.8
    # self-suppressing: uniform over earlier keys, so the previous diagonal is greatest but barely
    assert df.loc["L0H3", "top_offset"] == 1 and df.loc["L0H3", "ratio"] > 0.8


def test_diagonal_masses_match_direct_computation(tiny_model):
    prompt = _prompts(1, 20, tiny_model.cfg.d_vocab, seed=3)
    _, cache = tiny_model.run_with_cache(prompt)
    for exclude_bos in (True, False):
        diag = diagonal_attention(tiny_model, prompt, max_offset=19, exclude_bos=exclude_bos, progress=False)
        for layer, head in [(0, 0), (1, 2), (2, 3)]:
            A = cache[f"blocks.{layer}.attn.hook_pattern"][0, head]
            k0 = 1 if exclude_bos else 0
            for d in range(0, 19):
                vals = [A[q, q - d] for q in range(d + k0, 20)]
                expect = torch.stack(vals).mean()
                assert torch.allclose(diag[layer, head, d], expect, atol=1e-6), (layer, head, d)


def test_batching_does_not_change_result(tiny_model):
    prompts = _prompts(5, 24, tiny_model.cfg.d_vocab, seed=4)
    a = diagonal_attention(tiny_model, prompts, max_offset=8, batch_size=1, progress=False)
    b = diagonal_attention(tiny_model, prompts, max_offset=8, batch_size=5, progress=False)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_diagonal_sums_hand_example():
    # 1 batch, 1 head, 3x3 lower-triangular pattern
    A = torch.tensor([[[[1.0, 0, 0], [0.2, 0.8, 0], [0.1, 0.3, 0.6]]]])
    s = diagonal_sums(A, 3, exclude_bos=False)
    torch.testing.assert_close(s, torch.tensor([[1 + 0.8 + 0.6, 0.2 + 0.3, 0.1]], dtype=torch.float64))
    s = diagonal_sums(A, 3, exclude_bos=True)
    torch.testing.assert_close(s, torch.tensor([[0.8 + 0.6, 0.3, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(diagonal_counts(3, 3, True), torch.tensor([2.0, 1.0, 0.0], dtype=torch.float64))


def _reference_sums(A: torch.Tensor, n_offsets: int, exclude_bos: bool) -> torch.Tensor:
    """Each diagonal summed on its own (``torch.diagonal``), in float64: ``[head, n_offsets]``."""
    k0 = int(exclude_bos)
    out = torch.zeros(A.shape[1], n_offsets, dtype=torch.float64)
    for d in range(n_offsets):
        diag = torch.diagonal(A.double(), offset=-d, dim1=-2, dim2=-1)  # [b, h, n - d]: A[q, q - d], q = d..n-1
        out[:, d] = diag[..., k0:].sum((0, -1)) if d == 0 else diag.sum((0, -1)) - k0 * A[:, :, d, 0].double().sum(0)
    return out


@pytest.mark.parametrize("n, n_offsets", [(2, 2), (7, 7), (7, 2), (33, 33), (64, 16), (200, 120)])
def test_diagonal_sums_every_diagonal_at_once(n, n_offsets):
    """Most diagonals of a contiguous causal pattern are read in one strided pass: the same sums as each diagonal
    summed on its own, with heads that put most of their mass on key 0 (where taking key 0 off cancels most of a
    diagonal's sum)."""
    g = torch.Generator().manual_seed(n)
    s = torch.randn(3, 4, n, n, generator=g) * 2
    s[:, :2, :, 0] += 8.0
    A = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    for exclude_bos in (True, False):
        ref = _reference_sums(A, n_offsets, exclude_bos)
        torch.testing.assert_close(diagonal_sums(A, n_offsets, exclude_bos), ref, rtol=1e-5, atol=1e-9)
        # a strided (not contiguous) copy of the same pattern takes the gather: the same sums again
        wide = torch.zeros(3, 4, n, 2 * n)
        wide[..., ::2] = A
        torch.testing.assert_close(diagonal_sums(wide[..., ::2], n_offsets, exclude_bos), ref, rtol=1e-5, atol=1e-9)


def test_diagonal_sums_ignore_mass_above_the_diagonal():
    """A pattern that is not causal: only entries ``k <= q`` count, whichever way the sums are taken."""
    A = torch.rand(2, 3, 9, 9, generator=torch.Generator().manual_seed(1))
    lower = A.tril()
    for exclude_bos in (True, False):
        torch.testing.assert_close(
            diagonal_sums(A, 9, exclude_bos), _reference_sums(lower, 9, exclude_bos), rtol=1e-6, atol=1e-9
        )


def test_bad_input(tiny_model):
    with pytest.raises(ValueError, match="empty"):
        diagonal_attention(tiny_model, [], progress=False)
    too_long = torch.zeros(1, tiny_model.cfg.n_ctx + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="n_ctx"):
        diagonal_attention(tiny_model, too_long, progress=False)
    with pytest.raises(ValueError, match="max_offset"):
        diagonal_attention(tiny_model, torch.zeros(1, 8, dtype=torch.long), max_offset=0, progress=False)


def test_string_prompts(tiny_model):
    diag = diagonal_attention(tiny_model, ["The cat sat on the mat.", "Hello there"], max_offset=3, progress=False)
    assert diag.shape == (3, 4, 4)
    assert torch.isfinite(diag).all()
