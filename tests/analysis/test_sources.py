"""Composition scores and direct-path ablation on a hand-built model with one known route."""

import pytest
import torch

from conftest import conv1d_zero_outputs

D, N_CTX, H = 64, 16, 4
DH = D // H


def route_state_dict(vocab_size: int, scale: float = 8.0) -> dict[str, torch.Tensor]:
    """Positions one-hot in dims 0..15, tokens zero. L0H0 attends to the previous position and copies
    its one-hot into dims 32..47; every other layer-0 head and every MLP writes nothing. The target L1H0
    reads dims 32..47 as its query and dims 0..15 as its key, so it finds the previous token only through
    L0H0's output on its *query* side."""
    sd = conv1d_zero_outputs(2, D)
    sd["transformer.wte.weight"] = torch.zeros(vocab_size, D)
    sd["transformer.wpe.weight"] = torch.eye(N_CTX, D)
    w0 = torch.zeros(D, 3 * D)
    for i in range(DH):
        if i + 1 < N_CTX:
            w0[i + 1, i] = scale  # L0H0 query slot i <- position i+1
        w0[i, D + i] = scale  # L0H0 key slot i <- position i
        w0[i, 2 * D + i] = 1.0  # L0H0 value slot i <- position i
    proj0 = torch.zeros(D, D)
    for i in range(DH):
        proj0[i, 32 + i] = 1.0  # L0H0 output slot i -> dim 32 + i
    sd["transformer.h.0.attn.c_attn.weight"] = w0
    sd["transformer.h.0.attn.c_attn.bias"] = torch.zeros(3 * D)
    sd["transformer.h.0.attn.c_proj.weight"] = proj0
    w1 = torch.zeros(D, 3 * D)
    for i in range(DH):
        w1[32 + i, i] = scale  # L1H0 query slot i <- dim 32 + i (previous position)
        w1[i, D + i] = scale  # L1H0 key slot i <- position i
    sd["transformer.h.1.attn.c_attn.weight"] = w1
    sd["transformer.h.1.attn.c_attn.bias"] = torch.zeros(3 * D)
    return sd


@pytest.fixture(scope="module")
def route_model(tmp_path_factory, small_tokenizer):
    from gpt2_posheads import load_model, make_random_model_dir

    d = make_random_model_dir(
        tmp_path_factory.mktemp("route"),
        n_layers=2,
        n_heads=H,
        d_model=D,
        n_ctx=N_CTX,
        tokenizer=small_tokenizer,
        state_dict=route_state_dict(len(small_tokenizer)),
    )
    return load_model(d, device="cpu")


def prompts(n=4):
    g = torch.Generator().manual_seed(0)
    return torch.randint(1, 1000, (n, N_CTX), generator=g)


def test_target_is_a_previous_token_head(route_model):
    from gpt2_posheads import prev_token_ranking

    r = prev_token_ranking(route_model, prompts(), progress=False).set_index("name")
    assert r.loc["L1H0", "top_offset"] == 1 and r.loc["L1H0", "prev_mass"] > 0.9


def test_path_ablation_finds_the_only_route(route_model):
    from gpt2_posheads.analysis.sources import path_ablation

    df = path_ablation(route_model, prompts(), 1, 0).set_index(["source", "side"])
    assert df.attrs["pattern_check_max_abs_err"] < 1e-4
    assert df.loc[("none", "-"), "drop"] == 0.0  # ablating nothing changes nothing, exactly
    assert df.loc[("L0H0", "query"), "drop"] > 0.5  # the route as built
    assert abs(df.loc[("L0H0", "key"), "drop"]) < 0.05  # its key side reads positions only
    for h in (1, 2, 3):  # heads that write nothing: exactly no effect on either side
        for side in ("query", "key"):
            assert df.loc[(f"L0H{h}", side), "drop"] == pytest.approx(0.0, abs=1e-6)
    top = df.reset_index().iloc[0]
    assert (top.source, top.side) == ("L0H0", "query")


@pytest.mark.parametrize("how", ["zero", "resample"])
def test_other_ablations_agree_on_the_route(route_model, how):
    from gpt2_posheads.analysis.sources import path_ablation, top_sources

    df = path_ablation(route_model, prompts(), 1, 0, ablation=how)
    assert top_sources(df, 1) == ["L0H0"]


def test_composition_of_orthogonal_circuits_is_zero():
    from gpt2_posheads.analysis.sources import composition_score

    a = torch.zeros(8, 8)
    a[:4, :4] = torch.randn(4, 4)
    b = torch.zeros(8, 8)
    b[4:, 4:] = torch.randn(4, 4)
    assert float(composition_score(a, b)) == 0.0
    assert float(composition_score(a, a.T)) > 0.3


def test_composition_scores_name_the_query_route(route_model):
    from gpt2_posheads.analysis.sources import composition_scores

    c = composition_scores(route_model, 1, 0).set_index("source")
    # rank-16 circuits aligned exactly score 1/sqrt(16) = 0.25: about 2.8x the random baseline at most
    assert c.loc["L0H0", "q_ratio"] > 1.5
    assert c.loc["L0H0", "k_comp"] < 0.1 * c.loc["L0H0", "q_comp"]
    assert c.index[0] == "L0H0"


def test_baseline_matches_random_circuits():
    from gpt2_posheads.analysis.sources import composition_baseline

    b = composition_baseline(64, 16)
    assert 0.05 < b < 0.4
    assert composition_baseline(64, 16, seed=1) == pytest.approx(b, rel=0.1)


def test_bad_arguments(route_model):
    from gpt2_posheads.analysis.sources import path_ablation
    from gpt2_posheads.model.validation import UsageError

    with pytest.raises(UsageError, match="layer 0"):
        path_ablation(route_model, prompts(), 0, 0)
    with pytest.raises(UsageError, match="ablation"):
        path_ablation(route_model, prompts(), 1, 0, ablation="median")
