"""The generator of compiled known-answer models, and the route conclusion scored on what it generates.

The answers (each kind's route, the aggregator, the ambiguity) were written down in the generator and in
docs/known-answers.md before any model it generates was measured. The default suite measures one model of each kind
(layouts with d_model <= 512, once per session); ``-m slow`` measures 40 over every layout.
"""

import numpy as np
import pytest

from gpt2_posheads.claims.route import RELAY, ROUTES
from gpt2_posheads.model.validation import HEAD_NAME
from gpt2_posheads.organism.compiled import CODE, weights_digest
from gpt2_posheads.organism.generator import (
    KIND_ORDER,
    KINDS,
    MAX_NOISE,
    ROUTE_LAYERS,
    generate,
    gpt2_small_route,
    layouts,
    member,
    suite,
    token_rows,
    write,
)
from gpt2_posheads.organism.route_bench import aggregator_found, confusion, report, score
from gpt2_posheads.posts.gpt2_prev_heads.route import route_records


def test_the_same_seed_gives_the_same_bytes(tmp_path):
    a = write(generate(11, "relay"), tmp_path / "a")
    b = write(generate(11, "relay"), tmp_path / "b")
    c = write(generate(12, "relay"), tmp_path / "c")
    assert weights_digest(a) == weights_digest(b) != weights_digest(c)
    assert (a / "card.json").read_text() == (b / "card.json").read_text()


def test_layouts_cover_the_ranges():
    pairs = layouts()
    assert {d for d, _ in pairs} == {256, 384, 512, 640, 768, 896, 1024}
    assert {h for _, h in pairs} == set(range(2, 9))
    assert all(d % h == 0 and d // h >= 64 for d, h in pairs)
    assert max(d for d, _ in layouts(512)) == 512
    with pytest.raises(ValueError, match="max_d_model"):
        generate(0, "post", max_d_model=100)
    with pytest.raises(ValueError, match="kind"):
        generate(0, "gpt2")


def test_every_card_says_its_answer():
    models = suite(8)
    assert [g.card["kind"] for g in models] == list(KIND_ORDER)
    for g in models:
        c = g.card
        assert c["route"] == KINDS[c["kind"]][0] and c["route"] in ROUTES
        assert c["ambiguous"] == (c["kind"] == "mixed")
        assert 3 <= c["shape"]["n_layers"] <= 6 and 0 <= c["noise"] <= MAX_NOISE
        heads = [c.get("aggregator"), c.get("counter"), c.get("induction_head")]
        heads += c.get("early_heads", []) + c.get("relay_heads", []) + c["unrelated_heads"]
        named = [h for h in heads if h]
        assert len(named) == len(set(named)), c  # one role per head
        for h in named:
            m = HEAD_NAME.match(h)
            assert int(m.group(1)) < c["shape"]["n_layers"] and int(m.group(2)) < c["shape"]["n_heads"]
        if c["kind"] == "none":
            assert c["aggregator"] is None
        else:
            layer = int(HEAD_NAME.match(c["aggregator"]).group(1))
            assert (layer == 0) == (c["kind"] == "wpos-layer0")
            below = [int(HEAD_NAME.match(h).group(1)) for h in c.get("early_heads", []) + c.get("relay_heads", [])]
            assert all(b < layer for b in below)
            if c["kind"] in ("post", "boost", "mixed", "decoy"):  # the kinds built with early heads
                assert 2 <= len(c["early_heads"]) <= 6
            else:
                assert "early_heads" not in c


def test_the_noise_stays_in_the_token_subspaces():
    clean, noisy = generate(5, "post", noise=0.0), generate(5, "post", noise=MAX_NOISE)
    rows = token_rows(clean.model.res)
    for layer, (hs0, hs1) in enumerate(zip(clean.model.heads, noisy.model.heads)):
        for h0, h1 in zip(hs0, hs1):
            for a, b in ((h0.Wq, h1.Wq), (h0.Wk, h1.Wk), (h0.Wv, h1.Wv), (h0.Wo.T, h1.Wo.T)):
                diff = b - a
                if layer == 0:
                    assert not diff.any()
                    continue
                outside = diff.copy()
                outside[np.ix_(rows, np.arange(CODE, diff.shape[1]))] = 0
                assert not outside.any()  # nothing moved outside the token rows x code dimensions
        if layer:
            moved = np.concatenate([(h1.Wq - h0.Wq)[rows][:, CODE:].ravel() for h0, h1 in zip(hs0, hs1)])
            assert moved.std() > 0
    assert (clean.model.W_E == noisy.model.W_E).all() and (clean.model.W_pos == noisy.model.W_pos).all()


# --- the benchmark: measured ---------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def default_suite(tmp_path_factory):
    """One model of each kind (d_model <= 512), each written, loaded and measured once per session."""
    work = tmp_path_factory.mktemp("generated")
    return [score(member(i, 0, max_d_model=512), work, measure=route_records) for i in range(len(KIND_ORDER))]


def test_default_suite_is_on_the_diagonal(default_suite):
    assert sorted({s.kind for s in default_suite}) == sorted(KINDS)
    m = confusion(default_suite)
    off = int(m.values.sum() - np.trace(m.values))
    assert off == 0, report(default_suite)
    found, n_agg, none_ok, n_none = aggregator_found(default_suite)
    assert (found, none_ok) == (n_agg, n_none), report(default_suite)


def test_the_relay_lookalike_is_concluded_a_relay(default_suite):
    """The issue's blind spot: a sharp head that reads W_pos relayed by layer-0 heads is not 'built from earlier
    layers' (aggregator_above_layer0 not held) and concludes 'relays W_pos'."""
    (relay,) = [s for s in default_suite if s.kind == "relay"]
    assert relay.records["aggregator_above_layer0"]["verdict"] == "not held", relay.records["aggregator_above_layer0"]
    assert relay.concluded == RELAY, report([relay])


def test_a_model_where_no_head_tops_at_offset_one_is_concluded_none(tmp_path):
    """Model 22 of the suite (kind none): no head's greatest diagonal is the previous one, a measured fact, so
    sharp_prev_head is judged (not held), and the conclusion is none, not undetermined."""
    s = score(member(22, 0), tmp_path, measure=route_records)
    assert s.records["sharp_prev_head"]["verdict"] == "not held", s.records["sharp_prev_head"]
    assert s.right and s.concluded == "none", report([s])


@pytest.mark.slow
def test_forty_generated_models_are_on_the_diagonal(tmp_path):
    scored = [score(g, tmp_path, measure=route_records) for g in suite(40)]
    m = confusion(scored)
    assert int(m.values.sum() - np.trace(m.values)) == 0, report(scored)
    found, n_agg, none_ok, n_none = aggregator_found(scored)
    assert (found, none_ok) == (n_agg, n_none), report(scored)


# --- an asked-for shape: the post's route in GPT-2 small's shape ------------------------------------------------------

SMALL_ROUTE = dict(n_layers=7, n_heads=4, d_model=256, n_ctx=1024, n_vocab=50257)  # seed 0: layers 5-6 free


def test_gpt2_small_route_has_gpt2_smalls_shape():
    g = gpt2_small_route(0)
    m, c = g.model, g.card
    assert (len(m.heads), len(m.heads[0]), m.res.d_model) == (12, 12, 768)
    assert m.W_E.shape == m.W_U.shape == (50257, 768) and m.W_pos.shape == (1024, 768)
    assert not m.W_U[4096:].any() and m.W_U[1:4096].any(axis=1).all()  # padding: no code, logit 0
    assert m.res.shape.d_mlp == 3072 and m.mlps[0].w_fc.shape == (768, 3072)
    cfg = m.config(50257)
    assert (cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_positions"], cfg["vocab_size"]) == (
        12,
        12,
        768,
        1024,
        50257,
    )
    assert c["kind"] == "post" and c["route"] == "post" and not c["ambiguous"]
    route = [c["aggregator"], c["counter"], c["induction_head"], *c["early_heads"]]
    assert max(int(HEAD_NAME.match(h).group(1)) for h in route) <= ROUTE_LAYERS  # the route in the first layers
    assert int(HEAD_NAME.match(c["aggregator"]).group(1)) < ROUTE_LAYERS


def test_an_asked_for_shape_is_deterministic_and_validated(tmp_path):
    small = dict(SMALL_ROUTE, n_vocab=4096)
    a = write(gpt2_small_route(3, **small), tmp_path / "a")
    b = write(gpt2_small_route(3, **small), tmp_path / "b")
    c = write(gpt2_small_route(4, **small), tmp_path / "c")
    assert weights_digest(a) == weights_digest(b) != weights_digest(c)
    assert (a / "card.json").read_text() == (b / "card.json").read_text()
    assert "n_ctx=1024" in (a / "README.md").read_text()  # the card says how to rebuild it
    # asking for the drawn shape gives the drawn model, byte for byte
    drawn = generate(7, "post")
    s = drawn.card["shape"]
    asked = generate(7, "post", layout=(s["d_model"], s["n_heads"]), n_layers=s["n_layers"])
    assert weights_digest(write(drawn, tmp_path / "d")) == weights_digest(write(asked, tmp_path / "e"))
    for kwargs, arg in (
        (dict(n_layers=2), "n_layers"),
        (dict(n_ctx=2048), "n_ctx"),
        (dict(n_vocab=100), "n_vocab"),
        (dict(d_model=100), "d_model"),
        (dict(n_heads=5), "n_heads"),
        (dict(d_model=256, n_heads=8), "n_heads"),
    ):
        with pytest.raises(ValueError, match=f"^{arg}:"):
            gpt2_small_route(0, **kwargs)
    with pytest.raises(ValueError, match="^layout:"):
        generate(0, "post", layout=(512, 3))
    with pytest.raises(ValueError, match="^d_mlp:"):
        generate(0, "post", n_ctx=1024, d_mlp=512)


def test_a_small_gpt2_route_is_found_on_its_whole_context(tmp_path):
    """With 50,257 unembedding rows and layers above the route: the sharpest previous-token head on a 1,024-token
    prompt is the card's aggregator, and the route conclusion (what :func:`route_bench.score` measures, on the model
    loaded once, on two 128-token prompts) is the card's."""
    from gpt2_posheads.analysis.diagonals import choose_aggregator, prev_token_ranking
    from gpt2_posheads.claims.route import conclude
    from gpt2_posheads.model.loading import load_model
    from gpt2_posheads.model.validation import head_name
    from gpt2_posheads.organism.route_bench import prompts_for

    g = gpt2_small_route(0, **SMALL_ROUTE)
    c = g.card
    route = [c["aggregator"], c["counter"], c["induction_head"], *c["early_heads"]]
    assert max(int(HEAD_NAME.match(h).group(1)) for h in route) < SMALL_ROUTE["n_layers"] - 1  # a layer above it
    model = load_model(write(g, tmp_path / "m"), device="cpu")
    assert (model.cfg.n_ctx, model.cfg.d_vocab, model.cfg.n_layers) == (1024, 50257, SMALL_ROUTE["n_layers"])
    rank = prev_token_ranking(model, prompts_for(model.tokenizer, 1, 1024), progress=False)
    assert head_name(*choose_aggregator(rank)) == c["aggregator"]
    records = route_records(model, prompts_for(model.tokenizer, 2, 128), n_pattern_prompts=2)
    assert records["sharp_prev_head"]["head"] == c["aggregator"], records["sharp_prev_head"]
    assert conclude(records).route == c["route"], conclude(records).as_dict()


PLACED = {"counter": "L0H1", "early_heads": ["L2H3", "L1H0"], "aggregator": "L3H2", "induction_head": "L4H0"}
PLACED_SHAPE = dict(layout=(256, 4), n_layers=5, n_ctx=64)


def test_heads_are_placed_where_asked_and_nowhere_else():
    g = generate(0, "post", placement=PLACED, **PLACED_SHAPE)
    c = g.card
    assert (c["counter"], c["aggregator"], c["induction_head"]) == ("L0H1", "L3H2", "L4H0")
    assert c["early_heads"] == ["L1H0", "L2H3"]  # in layer order
    heads = g.model.heads
    assert heads[0][1].role.startswith("counter") and "aggregator" in heads[3][2].role.lower()
    assert all("self-suppress" in heads[l][h].role or "suppress" in heads[l][h].role for l, h in ((1, 0), (2, 3)))
    # the roles nobody asked for never land on a placed slot
    assert not {c["counter"], c["aggregator"], c["induction_head"], *c["early_heads"]} & set(c["unrelated_heads"])


@pytest.mark.parametrize(
    "change, words",
    [
        ({"aggregator": "L9H0"}, "is not a head"),
        ({"counter": "L1H1"}, "counter must sit in layer 0"),
        ({"induction_head": "L2H0"}, "induction head above the aggregator"),
        ({"early_heads": ["L1H0"]}, "2-6 early heads"),
        ({"early_heads": ["L1H0", "L3H1"]}, "2-6 early heads"),
        ({"early_heads": ["L1H0", "L3H2"]}, "named twice"),
    ],
)
def test_a_placement_that_cannot_hold_the_route_is_refused(change, words):
    with pytest.raises(ValueError, match=f"placement: .*{words}"):
        generate(0, "post", placement={**PLACED, **change}, **PLACED_SHAPE)
    with pytest.raises(ValueError, match="placement: heads can be placed for the kinds post and boost"):
        generate(0, "wpos", placement=PLACED, **PLACED_SHAPE)


def test_reserved_coordinates_belong_to_no_block():
    """What the GPT-2-small stand-in writes into them (GPT-2's values at the entries is_gpt2_small reads) reaches no
    head or MLP: every weight reading or writing them is zero, and no embedding uses them."""
    g = generate(0, "post", reserved=(3, 3), **PLACED_SHAPE)
    m, free = g.model, [0, 1, 2, 253, 254, 255]
    assert m.res.used <= 253 and not np.abs(m.W_E[:, free]).any() and not np.abs(m.W_pos[:, free]).any()
    for layer in m.heads:
        for h in layer:
            assert not np.abs(np.concatenate([h.Wq[free], h.Wk[free], h.Wv[free], h.Wo[:, free].T])).any()
    assert all(not np.abs(mlp.w_fc[free]).any() and not np.abs(mlp.w_proj[:, free]).any() for mlp in m.mlps)
