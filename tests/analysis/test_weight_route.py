"""The positional circuits read from the weights (analysis.weight_route) and the route label (weight_route script).

Known answers: tiny hand-set models whose expected scores are computed here by enumerating every token sequence
(an exact expectation, independent of the closed form the module uses), the compiled models whose route is set by
hand, and a rotary model (no W_pos: not testable).
"""

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from gpt2_posheads.analysis.weight_route import positional_circuits, upstream_contributions
from gpt2_posheads.model.validation import UsageError
from gpt2_posheads.posts.gpt2_prev_heads.weight_route import (
    BUILT,
    NOT_POSITIONAL,
    READS_WPOS,
    route_label,
    weight_route,
)

from conftest import random_arch_dir

N, VOCAB = 5, 3


def tiny(n_layers: int) -> SimpleNamespace:
    """The weights of an attention-only model without LayerNorm (what the circuits read: ``cfg``, ``W_E``,
    ``W_pos``, each block's ``attn.W_Q`` ... ``b_O``), one head of 2 dims per layer, d_model 6: tokens in dims 0-1,
    positions in 2-3, dims 4-5 free for a head's write. Every weight 0 until a test sets it."""
    cfg = SimpleNamespace(
        n_layers=n_layers, n_heads=1, d_model=6, d_head=2, n_ctx=N, d_vocab=VOCAB, normalization_type=None,
        attn_only=True, positional_embedding_type="standard",
    )  # fmt: skip
    z = torch.zeros

    def attn():
        return SimpleNamespace(
            W_Q=z(1, 6, 2), W_K=z(1, 6, 2), W_V=z(1, 6, 2), W_O=z(1, 2, 6), b_Q=z(1, 2), b_K=z(1, 2), b_V=z(1, 2),
            b_O=z(6),
        )  # fmt: skip

    W_E, W_pos = z(VOCAB, 6), z(N, 6)
    W_E[:, :2] = torch.tensor([[1.0, 0.0], [0.0, 1.5], [-0.5, -0.5]])
    W_pos[:, 2] = torch.arange(N, dtype=torch.float32) / N
    W_pos[:, 3] = torch.cos(torch.arange(N, dtype=torch.float32))
    blocks = [SimpleNamespace(attn=attn(), ln1=None) for _ in range(n_layers)]
    return SimpleNamespace(cfg=cfg, W_E=W_E, W_pos=W_pos, blocks=blocks)


def sequences():
    return [torch.tensor(t) for t in itertools.product(range(VOCAB), repeat=N)]


def causal_softmax(s: torch.Tensor) -> torch.Tensor:
    rows = []
    for q in range(N):
        e = [math.exp(float(s[q, k])) for k in range(q + 1)]
        rows.append([x / sum(e) for x in e] + [0.0] * (N - q - 1))
    return torch.tensor(rows, dtype=torch.float64)


def prev_mass(A: torch.Tensor) -> float:
    """Mean of ``A[q, q - 1]`` over the queries whose previous key is not key 0 (the toolkit leaves key 0 out)."""
    return sum(float(A[q, q - 1]) for q in range(2, N)) / (N - 2)


def expected_scores(model, layer: int, resid) -> torch.Tensor:
    """``E_tokens[(r W_Q + b_Q) . (r W_K + b_K)] / sqrt(d_head)`` over every token sequence, ``resid(x)`` the
    residual entering ``layer`` for the embedded sequence ``x`` ``[N, d_model]``."""
    a = model.blocks[layer].attn
    W_Q, W_K, b_Q, b_K = (t[0].double() for t in (a.W_Q, a.W_K, a.b_Q, a.b_K))
    total = torch.zeros(N, N, dtype=torch.float64)
    seqs = sequences()
    for t in seqs:
        r = resid(model.W_E.double()[t] + model.W_pos.double())
        total += (r @ W_Q + b_Q) @ (r @ W_K + b_K).T / math.sqrt(2)
    return total / len(seqs)


def test_direct_circuit_is_the_expected_score_over_every_token_sequence():
    """One layer: the head reads positions (a ramp) and tokens (its own token scores -1.5 per unit of overlap); the
    circuit's pattern is the causal softmax of the exact expectation of the score over all 3^5 sequences."""
    model = tiny(1)
    a = model.blocks[0].attn
    a.W_Q[0, 2, 0], a.W_K[0, 2, 0] = 4.0, 3.0  # score rises with the key's position (and the query's)
    a.W_Q[0, 0, 1], a.W_K[0, 0, 1] = -1.5, 1.0  # the token's own first coordinate against itself
    a.W_Q[0, 1, 1], a.W_K[0, 1, 1] = -1.5, 1.0
    a.b_Q[0, 0] = 0.7
    c = positional_circuits(model, N, bos=False)
    A = causal_softmax(expected_scores(model, 0, lambda x: x))
    assert torch.allclose(c.patterns[0, 0].double(), A, atol=1e-6)
    assert c.direct["prev_mass"][0, 0] == pytest.approx(prev_mass(A), abs=1e-6)
    assert c.composed["prev_mass"][0, 0] == pytest.approx(prev_mass(A), abs=1e-6)  # layer 0: nothing upstream


def test_composed_circuit_with_one_upstream_head_is_the_expected_score():
    """Two layers: head L0H0 attends by position and copies the attended token's coordinates into dims 4-5; head
    L1H0 matches that copy (query) against each key's own token. Its composed pattern is the causal softmax of the
    exact expected score given L0H0's pattern; its direct circuit sees no copy (uniform over the keys)."""
    model = tiny(2)
    a0, a1 = model.blocks[0].attn, model.blocks[1].attn
    a0.W_Q[0, 3, 0], a0.W_K[0, 2, 0] = 2.0, 5.0
    a0.W_V[0, 0, 0], a0.W_V[0, 1, 1], a0.W_O[0, 0, 4], a0.W_O[0, 1, 5] = 1.0, 1.0, 1.0, 1.0
    a0.b_V[0, 0] = 0.3
    a1.W_Q[0, 4, 0], a1.W_Q[0, 5, 1], a1.W_K[0, 0, 0], a1.W_K[0, 1, 1] = 3.0, 3.0, 2.0, 2.0
    c = positional_circuits(model, N, bos=False)
    A0 = causal_softmax(expected_scores(model, 0, lambda x: x))
    assert torch.allclose(c.patterns[0, 0].double(), A0, atol=1e-6)
    W_V, W_O, b_V = a0.W_V[0].double(), a0.W_O[0].double(), a0.b_V[0].double()
    A1 = causal_softmax(expected_scores(model, 1, lambda x: x + A0 @ (x @ W_V + b_V) @ W_O))
    assert torch.allclose(c.patterns[1, 0].double(), A1, atol=1e-6)
    assert c.composed["prev_mass"][1, 0] == pytest.approx(prev_mass(A1), abs=1e-6)
    uniform = sum(1 / (q + 1) for q in range(2, N)) / (N - 2)  # mean token only: every key alike
    assert c.direct["prev_mass"][1, 0] == pytest.approx(uniform, abs=1e-6)
    table, without = upstream_contributions(model, c, 1, 0)
    assert without == pytest.approx(uniform, abs=1e-6)  # the one upstream head removed: the direct circuit
    assert table.loc[0, "source"] == "L0H0" and table.loc[0, "drop"] == pytest.approx(prev_mass(A1) - uniform)


@pytest.mark.parametrize(
    "args, label",
    [
        ((1, 0.01, 0.9, 0.95, 0.9, 2), READS_WPOS),  # the embeddings alone do it
        ((1, 0.01, 0.05, 0.99, 0.1, 2), BUILT),  # the heads below carry it
        ((1, 0.01, 0.05, 0.99, 0.9, 2), READS_WPOS),  # the MLPs below carry it, from the embeddings
        ((1, 0.3, 0.05, 0.6, 0.1, 2), NOT_POSITIONAL),  # not sharp
        ((0, 0.01, 0.05, 0.99, 0.1, 2), NOT_POSITIONAL),  # tops elsewhere
        ((1, 0.01, 0.05, 0.99, 0.99, 0), READS_WPOS),  # layer 0 has nothing below
    ],
)
def test_route_label_rule(args, label):
    assert route_label(*args)[0] == label


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    from gpt2_posheads import load_model
    from gpt2_posheads.organism.compiled import build

    root = tmp_path_factory.mktemp("compiled")
    return lambda name: load_model(build(name, root / name, measured=False), device="cpu")


@pytest.mark.parametrize(
    "name, head, label, verdict",
    [
        ("route-gpt2", "L2H0", BUILT, "held"),
        ("lookalike-wpos", "L2H0", READS_WPOS, "not held"),
        ("lookalike-boost", "L2H0", BUILT, "held"),
        ("lookalike-decoy", "L2H0", READS_WPOS, "not held"),
        ("lookalike-none", None, NOT_POSITIONAL, "not testable"),
    ],
)
def test_compiled_models_get_their_built_route(compiled, name, head, label, verdict):
    result = weight_route(compiled(name))
    r = result.numbers["record"]
    assert r["label"] == label
    assert head is None or r["head"] == head
    assert result.claim("weight_route_built").verdict == verdict


def test_rotary_model_is_not_testable(tmp_path, small_tokenizer):
    from gpt2_posheads import load_model

    model = load_model(random_arch_dir(tmp_path / "pythia", "pythia", small_tokenizer, n_layers=1), device="cpu")
    result = weight_route(model)
    claim = result.claim("weight_route_built")
    assert claim.verdict == "not testable" and "rotary" in claim.why
    with pytest.raises(UsageError):
        positional_circuits(model)


def test_label_confusion_counts_expected_against_got():
    from gpt2_posheads.organism.route_bench import label_confusion
    from gpt2_posheads.posts.gpt2_prev_heads.weight_route import LABELS

    pairs = [(BUILT, BUILT), (BUILT, READS_WPOS), (READS_WPOS, READS_WPOS), (BUILT, "not testable")]
    m = label_confusion(pairs, LABELS)
    assert m.loc[BUILT, BUILT] == 1 and m.loc[BUILT, READS_WPOS] == 1 and m.loc[READS_WPOS, READS_WPOS] == 1
    assert m.loc[BUILT, "not testable"] == 1 and int(m.to_numpy().sum()) == 4 and m.loc[NOT_POSITIONAL].sum() == 0


def test_copy_coefficients_in_bounded_pieces_are_the_traces(tmp_path, small_tokenizer, monkeypatch):
    """``c_self``, ``c_Q``, ``c_K`` of every pair of layers are the module doc's Frobenius products, computed here in
    float64 head by head: with every layer's ``M`` in one block, and with one upstream layer and 8 rows of ``M`` held
    at a time (the pieces GPT-2 XL is computed in; its partial sums re-associated in float32)."""
    import gpt2_posheads.analysis.weight_route as wr
    from gpt2_posheads import load_model

    model = load_model(random_arch_dir(tmp_path / "gpt2", "gpt2", small_tokenizer), device="cpu")
    whole = wr._Weights(model, 16, True)
    monkeypatch.setattr(wr, "CACHE_BYTES", 1)
    monkeypatch.setattr(wr, "QK_BYTES", 2 * 4 * 64 * 8 * 4)  # 2 x 4 heads x 8 rows x d_model 64, float32
    pieces = wr._Weights(model, 16, True)
    cov = whole.cov.double()
    ws = [whole.attn(l) for l in range(3)]
    D = [torch.diag(a["w"].double()) for a in ws]
    M = [[D[l] @ a["W_K"][h].double() @ a["W_Q"][h].double().T @ D[l] for h in range(4)] for l, a in enumerate(ws)]
    A = [[cov @ D[u] @ a["W_V"][j].double() @ a["W_O"][j].double() for j in range(4)] for u, a in enumerate(ws)]
    A = [[x - x.mean(-1, keepdim=True) for x in xs] for xs in A]  # times C: the write centred

    def close(got, want):  # float32 against float64, to the scale of the coefficients (about 1e-5 here)
        return torch.allclose(got, want, rtol=1e-4, atol=1e-5 * float(want.abs().max()))

    for l in range(3):
        want_self = torch.tensor([float((cov * m).sum()) for m in M[l]], dtype=torch.float64)
        for W in (whole, pieces):
            c_self, pairs = W.copy_terms(l)
            assert close(c_self, want_self)
            assert len(pairs) == l
            for u, (c_q, c_k) in enumerate(pairs):
                want_q = torch.tensor([[float((x * m).sum()) for m in M[l]] for x in A[u]], dtype=torch.float64)
                want_k = torch.tensor([[float((x * m.T).sum()) for m in M[l]] for x in A[u]], dtype=torch.float64)
                assert close(c_q, want_q)
                assert close(c_k, want_k) and not close(c_k, want_q)
