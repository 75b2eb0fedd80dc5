"""Every analysis and intervention gives the same numbers on CUDA as on CPU (skipped without a GPU), and no result
carries autograd history on either device."""

import pytest
import torch

CUDA = pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"))


@pytest.fixture(scope="module")
def cpu_model(tiny_dir):
    from gpt2_posheads import load_model

    return load_model(tiny_dir, device="cpu")


def prompts():
    return torch.randint(1, 1000, (4, 32), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("device", [CUDA])
def test_analyses_match_cpu(device, tiny_dir, cpu_model):
    from gpt2_posheads import (
        average_pos_embed,
        diagonal_attention,
        extended_pos_embeddings,
        induction_scores,
        load_model,
        mask_previous_attention,
    )
    from gpt2_posheads.analysis.measures import next_token_probs
    from gpt2_posheads.analysis.sources import path_ablation

    model = load_model(tiny_dir, device=device)
    p = prompts()
    tol = dict(atol=1e-4, rtol=1e-3, equal_nan=True)
    torch.testing.assert_close(
        diagonal_attention(model, p, progress=False), diagonal_attention(cpu_model, p, progress=False), **tol
    )
    edits = [mask_previous_attention(5, [0, 1])]
    torch.testing.assert_close(
        diagonal_attention(model, p, edits=edits, progress=False),
        diagonal_attention(cpu_model, p, edits=edits, progress=False),
        **tol,
    )
    torch.testing.assert_close(
        extended_pos_embeddings(model, 2, n_prompts=2, seq_len=32).cpu(),
        extended_pos_embeddings(cpu_model, 2, n_prompts=2, seq_len=32),
        atol=1e-4,
        rtol=1e-3,
    )
    torch.testing.assert_close(
        next_token_probs(model, p[0], [average_pos_embed(5)]),
        next_token_probs(cpu_model, p[0], [average_pos_embed(5)]),
        atol=1e-5,
        rtol=1e-3,
    )
    a = path_ablation(model, p, 2, 1).set_index(["source", "side"])["prev_mass"]
    b = path_ablation(cpu_model, p, 2, 1).set_index(["source", "side"])["prev_mass"]
    assert (a - b.loc[a.index]).abs().max() < 1e-4
    ia, ib = induction_scores(model, 4, 16), induction_scores(cpu_model, 4, 16)
    torch.testing.assert_close(ia.scores, ib.scores, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("device", ["cpu", CUDA])
def test_results_carry_no_autograd_history(device, tiny_dir):
    from gpt2_posheads import diagonal_attention, extended_pos_embeddings, load_model

    model = load_model(tiny_dir, device=device)
    for t in (diagonal_attention(model, prompts(), progress=False), extended_pos_embeddings(model, 1, n_prompts=2)):
        assert not t.requires_grad and t.grad_fn is None
