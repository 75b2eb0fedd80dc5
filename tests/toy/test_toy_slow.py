"""Seed numbers of full-length toy runs (minutes): ``pytest -m slow``."""

import pytest

from gpt2_posheads.claims.toy import plateaus
from gpt2_posheads.posts.lost_in_middle import retrieval as lost
from gpt2_posheads.posts.prev_token_toy import copying as prev
from gpt2_posheads.posts.similar_content import similarity as sim
from gpt2_posheads.toy import ToyConfig, train_group
from gpt2_posheads.toy.analysis import pairing, perplexity_curve


@pytest.mark.slow
@pytest.mark.parametrize("V", [4, 8])
def test_sticky_plateau_at_half_vocab_then_solved(V):
    """003 at its defaults, the posts' architecture (no W_O; n_embd 2, C 4, init N(0, 0.02), lr 0.01, seed 0):
    first plateau at V/2, then solved."""
    r = train_group([ToyConfig(V=V, C=4, n_embd=2, steps=5000, log_every=25, snapshot_every=50)], progress=False)[0]
    first = plateaus(r["steps"], perplexity_curve(r), min_steps=250)[0]
    assert first["perplexity"] == pytest.approx(V / 2, rel=0.1)
    assert r["final_perplexity"] < 1.05
    if V == 4:  # two-stage branching: pairs on the plateau, four directions at the end
        mid = (first["start_step"] + first["end_step"]) // 2
        i = min(range(len(r["snapshot_steps"])), key=lambda j: abs(r["snapshot_steps"][j] - mid))
        assert pairing(r["snapshots"][i]["W_E"]) == 2 and pairing(r["snapshots"][-1]["W_E"]) == 4


@pytest.mark.slow
def test_lost_in_middle_two_layers_u_shape():
    """002 with the posts' architecture (no W_O): 2 layers, n_embd 10, 800 steps, seed 0: first and last tokens
    easier than the middle."""
    cfgs = [
        ToyConfig(task="kth_token", V=10, C=10, n_embd=10, n_layers=2, k=k, steps=800, log_every=100) for k in (0, 5, 9)
    ]
    first, middle, last = (r["final_loss"] for r in train_group(cfgs, progress=False))
    assert first < middle - 0.5 and last < middle - 0.3


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_prev_token_learned_with_pos_emb_and_not_without(seed):
    """000 with the posts' architecture (no W_O), V 30, C 4, n_embd 2, lr 0.01, 2,000 steps: learned with
    positional embeddings (measured 1.02-1.03), fails without (relative perplexity >= 0.5; measured 20-25)."""
    cfgs = [
        ToyConfig(
            task="copy_offset",
            k=1,
            V=30,
            C=4,
            n_embd=2,
            pos_emb=p,
            steps=2000,
            lr=0.01,
            batch_size=128,
            log_every=100,
            seed=seed,
        )
        for p in (True, False)
    ]
    with_pos, without = train_group(cfgs[:1], progress=False)[0], train_group(cfgs[1:], progress=False)[0]
    assert prev.LEARNED.rule.decide((with_pos["final_perplexity"], 30))[0] and with_pos["final_perplexity"] < 1.1
    assert prev.FAILS.rule.decide((without["final_perplexity"], 30))[0]


@pytest.mark.slow
def test_most_similar_converges_near_half_vocab_and_rises_from_c3_to_c5():
    """001 with the posts' architecture (n_embd 2, 4,000 steps): V=32, C=3 ends near V/2 (seed 0, measured
    10.8), and at V=20 the mean final perplexity of seeds 0-2 rises from C=3 to C=5 by more than 5% (measured
    6.93 -> 7.86), but one seed stays at C=3's level (7.03), so the rise is within 2 sd and the rule does not hold."""
    from gpt2_posheads.posts.similar_content.similarity import GRID_C

    cfg = lambda V, C, s=0: ToyConfig(task="most_similar", V=V, C=C, n_embd=2, steps=4000, log_every=100, seed=s)  # noqa: E731
    half = train_group([cfg(32, 3)], progress=False)[0]
    assert sim.NEAR_HALF.rule.decide((half["final_perplexity"], 32, 1))[0]
    ppl = {
        C: [r["final_perplexity"] for r in train_group([cfg(20, C, s) for s in range(sim.TREND_SEEDS)], progress=False)]
        for C in (3, 5)
    }
    m3, m5 = sum(ppl[3]) / len(ppl[3]), sum(ppl[5]) / len(ppl[5])
    assert sim.confused({20: [m3, 0.0, m5, 0.0, 0.0]}, GRID_C).ok  # only C=3 and C=5 enter
    assert m5 > 1.05 * m3 and min(ppl[5]) < 1.05 * m3
    held, why = sim.RISE.rule.decide({20: ppl})
    assert held is False and "mean ± sd of 3 seeds" in why


@pytest.mark.slow
def test_lost_in_middle_three_layers_u_shape_after_convergence():
    """002, 3 layers, n_embd 10, no W_O, seed 0, trained to convergence (5,000 steps): the first and the last
    token are retrieved, the middle is not (measured at 5,100 steps: k=0 0.06, k=9 1.57, middle ~2.1 nats)."""
    from gpt2_posheads.posts.lost_in_middle import THREE_LAYER_STEPS

    cfgs = [
        ToyConfig(task="kth_token", V=10, C=10, n_embd=10, n_layers=3, k=k, steps=THREE_LAYER_STEPS, log_every=500)
        for k in range(10)
    ]
    assert lost.U_SHAPE_2.rule.decide(([r["final_loss"] for r in train_group(cfgs, progress=False)], 10))[0]
