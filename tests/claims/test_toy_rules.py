"""The toy posts' verdict rules (gpt2_posheads.claims.toy) on made-up numbers: each rule gives every outcome."""

import math

import pytest

from gpt2_posheads.claims import toy as rules


@pytest.mark.parametrize(
    "ppl,held", [(10.8, True), (16.0, True), (19.2, True), (19.3, False), (1.2, False), (30.0, False)]
)
def test_near_half_vocab(ppl, held):
    assert rules.near_half(ppl, 32) is held


CS = (3, 4, 5, 6, 8)


def theory(V):
    return [(C - 2) / (C - 1) * V for C in CS]


def test_trend_held_only_when_every_vocabulary_rises_with_c():
    rising = {V: [0.3 * V + 0.01 * V * i for i in range(len(CS))] for V in (10, 20)}
    assert rules.follows_trend(rising, CS)[0]
    # the shape measured at the default settings: up from C=3 to C=4, then down
    peaked = {V: [0.34 * V, 0.39 * V, 0.37 * V, 0.33 * V, 0.27 * V] for V in (10, 20)}
    held, rho = rules.follows_trend(peaked, CS)
    assert not held and all(r < 0.8 for r in rho.values())
    one_bad = {10: rising[10], 20: peaked[20]}
    assert not rules.follows_trend(one_bad, CS)[0]


def test_rise_from_three_to_five():
    peaked = {V: [0.34 * V, 0.39 * V, 0.37 * V, 0.33 * V, 0.27 * V] for V in (10, 20)}
    assert rules.rises_3_to_5(peaked, CS)
    flat_then_down = {10: [3.4, 3.9, 3.3, 3.0, 2.7], 20: peaked[20]}
    assert not rules.rises_3_to_5(flat_then_down, CS)
    noise = {10: peaked[10], 20: [6.99, 8.07, 7.03, 7.59, 5.54]}  # one seed at V=20: +0.6%
    assert not rules.rises_3_to_5(noise, CS)


def test_c_claims_need_the_confused_regime():
    assert rules.confused({V: [0.34 * V, 0.39 * V, 0.37 * V, 0.33 * V, 0.27 * V] for V in (10, 20)}, CS)
    assert not rules.confused({10: [1.01, 1.02, 1.05, 1.01, 1.0]}, CS)  # learned: no C trend to speak of
    assert not rules.confused({10: [9.8, 9.9, 9.95, 9.9, 9.9]}, CS)  # at chance


V = 10
CHANCE = math.log(V)


def test_only_last():
    assert rules.only_last([CHANCE] * 9 + [0.01], V)
    assert not rules.only_last([0.3] + [CHANCE] * 8 + [0.01], V)  # the first is retrieved too
    assert not rules.only_last([CHANCE] * 10, V)  # nothing retrieved


def test_u_shape_needs_a_margin_not_noise():
    assert rules.u_shape([0.5, 1.9, 2.1, 2.2, 2.2, 2.2, 2.2, 2.2, 2.2, 1.0], V)
    # a model still at chance: first and last a hair below the middle by noise
    at_chance = [2.28, 2.30, 2.30, 2.31, 2.30, 2.30, 2.31, 2.30, 2.30, 2.29]
    assert not rules.u_shape(at_chance, V)
    # only the first retrieved (the 3-layer runs after 800 steps)
    assert not rules.u_shape([0.54, 2.18, 2.22, 2.23, 2.25, 2.25, 2.24, 2.25, 2.25, 2.30], V)
    # one layer: only the last
    assert not rules.u_shape([CHANCE] * 9 + [0.0], V)
