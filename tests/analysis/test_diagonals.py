import pytest
import torch

from gpt2_posheads import diagonal_attention, rank_prev_heads
from gpt2_posheads.analysis.diagonals import diagonal_counts, diagonal_sums

from conftest import HANDSET


def _prompts(n, seq_len, vocab, seed=0):
    return torch.randint(0, vocab, (n, seq_len), generator=torch.Generator().manual_seed(seed))


def test_handset_previous_token_head_ranks_first(handset_model):
    prompts = _prompts(4, HANDSET["n_ctx"], handset_model.cfg.d_vocab)
    df = rank_prev_heads(handset_model, prompts, progress=False)
    first = df.iloc[0]
    assert first["name"] == "L0H0"
    assert first["top_offset"] == 1
    assert first["ratio"] < 0.05
    assert bool(first["is_prev_token"])


def test_handset_current_and_uniform_heads(handset_model):
    prompts = _prompts(4, HANDSET["n_ctx"], handset_model.cfg.d_vocab)
    df = rank_prev_heads(handset_model, prompts, progress=False).set_index("name")
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
