"""The committed activation cache of each shipped organism, against numbers recomputed from the models, and
measured facts of each organism read through its cache; marked ``gpt2``, the GPT-2 post's numbers against a real
GPT-2 cache when one has been built."""

import math

import pytest
import torch

from gpt2_posheads import load_model, prev_token_ranking
from gpt2_posheads.analysis.diagonals import choose_aggregator, diagonal_attention
from gpt2_posheads.analysis.geometry import principal_angles
from gpt2_posheads.analysis.measures import next_token_probs
from gpt2_posheads.analysis.posembed import extended_pos_embeddings
from gpt2_posheads.analysis.scores import attention_scores, classify_prev_heads, score_profile
from gpt2_posheads.model.paths import ORGANISM_DIR, REPO_ROOT
from gpt2_posheads.model.validation import parse_head
from gpt2_posheads.store.cache import PosheadsCache

ORGANISMS = ["mini-gpt2"]  # each shipped organism with its committed cache
GPT2_CACHE = REPO_ROOT / "data" / "gpt2-cache.safetensors"


@pytest.fixture(scope="module", params=ORGANISMS)
def mini(request):
    folder = ORGANISM_DIR  # the shipped organism (package data); its cache is committed in the checkout's data/
    cache = REPO_ROOT / "data" / f"{request.param}-cache.safetensors"
    assert cache.exists(), f"{cache} is missing: build it with gpt2-posheads cache_activations --model {request.param}"
    return load_model(folder, device="cpu"), PosheadsCache.load(cache)


def test_cache_provenance(mini):
    model, cache = mini
    assert organism_name(cache) in ORGANISMS
    assert cache.meta["cfg"]["n_layers"] == model.cfg.n_layers == 4
    assert cache.layers() == list(range(model.cfg.n_layers + 1))


def test_diagonals_recomputed_match_cache(mini):
    model, cache = mini
    prompts = cache.tensors["prompts"]
    diag = diagonal_attention(model, prompts[:8], progress=False)
    ref = diagonal_attention(model, prompts[:8], batch_size=3, progress=False, engine="hooks")
    # the last offset has only key 0, which the ratio leaves out: NaN in both
    torch.testing.assert_close(diag, ref, atol=1e-6, rtol=1e-5, equal_nan=True)
    full = diagonal_attention(model, prompts, progress=False)
    torch.testing.assert_close(full, cache.diagonals, atol=1e-5, rtol=1e-4, equal_nan=True)
    assert cache.diagonals.shape[-1] == prompts.shape[1]  # every offset of the prompts
    # the ranking read through the store is the ranking of the model measured afresh on the same prompts
    assert prev_token_ranking(cache, None)["name"].tolist() == prev_token_ranking(model, prompts)["name"].tolist()


def test_ext_pos_recomputed_match_cache(mini):
    model, cache = mini
    for layer in (0, 2):
        ext = extended_pos_embeddings(model, layer, n_prompts=cache.meta["ext_n_prompts"], seed=cache.meta["seed"])
        torch.testing.assert_close(ext, cache.ext_pos(layer), atol=1e-4, rtol=1e-4)
        # read through the store, against the model's measured afresh (not the store against itself)
        torch.testing.assert_close(extended_pos_embeddings(cache, layer), ext, atol=1e-4, rtol=1e-4)
    assert cache.meta["ext_bos"] is True  # measured after BOS: row 0 is BOS, the rest are W_pos's rows centred
    w = cache.tensors["w_pos"]
    torch.testing.assert_close(cache.ext_pos(0)[1:], w[1:] - w[1:].mean(0), atol=1e-5, rtol=0)


def test_patterns_scores_and_repeat_probs_match_cache(mini):
    model, cache = mini
    head = cache.meta["heads"][0]
    l, h = parse_head(head)
    s = attention_scores(model, cache.tensors["prompts"][0], l, h)
    torch.testing.assert_close(s["pattern"], cache.pattern(head), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(s["raw"], cache.raw_scores(head), atol=1e-4, rtol=1e-4)
    for name in ("apple_orange", "ninja_turtle_pirate"):
        p = next_token_probs(model, cache.tensors[f"repeat.{name}.tokens"])[0]
        torch.testing.assert_close(p, cache.repeat_probs(name), atol=1e-5, rtol=1e-3)


@pytest.fixture(scope="module")
def gpt2_cache():
    if not GPT2_CACHE.exists():
        pytest.skip(
            f"{GPT2_CACHE.relative_to(REPO_ROOT)} is absent: build it on a machine with the hub via "
            f"`python experiments/cache_activations.py --model gpt2`"
        )
    return PosheadsCache.load(GPT2_CACHE)


@pytest.mark.gpt2
def test_gpt2_l4h11_first(gpt2_cache):
    df = gpt2_cache.ranking()
    assert df.iloc[0]["name"] == "L4H11" and df.iloc[0]["ratio"] < 0.05


@pytest.mark.gpt2
def test_gpt2_top_five(gpt2_cache):
    top5 = set(gpt2_cache.ranking().head(5)["name"])
    assert {"L4H11", "L5H6", "L3H3", "L2H2"} <= top5


@pytest.mark.gpt2
def test_gpt2_count_prev_heads(gpt2_cache):
    assert 60 <= int(gpt2_cache.ranking()["is_prev_token"].sum()) <= 80


@pytest.mark.gpt2
def test_gpt2_ext_pos_angles(gpt2_cache):
    ang = principal_angles(gpt2_cache.ext_pos(0), gpt2_cache.ext_pos(2), k=3)
    assert float(ang.max()) < 15


def test_mechanism_entries_match_recomputation(mini):
    """The cache's induction scores, copy losses and the aggregator's previous-token masses are what the model
    gives, and its aggregator is the one rule's (the sharpest previous-token head, whatever its layer)."""
    from gpt2_posheads.analysis.induction import induction_scores
    from gpt2_posheads.analysis.interventions import average_pos_embed, mask_previous_attention

    model, cache = mini
    seg = cache.meta["induction_seg_len"]
    ind = induction_scores(model, n_seqs=8, seg_len=seg, seed=cache.meta["seed"])
    torch.testing.assert_close(ind.scores, cache.tensors["induction.scores"], atol=1e-5, rtol=1e-4)
    assert [ind.loss_first, ind.loss_second] == pytest.approx(cache.tensors["induction.losses"].tolist(), abs=1e-4)
    l, h = parse_head(cache.meta["aggregator"])
    assert (l, h) == choose_aggregator(cache.ranking())
    clean, averaged = cache.tensors["mechanism.aggregator_prev_mass"].tolist()
    rows_clean, rows_masked = cache.tensors["mechanism.masked_rows"].tolist()
    prompts = cache.tensors["prompts"]
    assert clean == pytest.approx(float(cache.diagonals[l, h, 1]), abs=1e-6)
    avg = diagonal_attention(model, prompts, max_offset=2, progress=False, edits=[average_pos_embed(10)])
    assert averaged == pytest.approx(float(avg[l, h, 1]), abs=1e-5)
    if l == 0:
        assert math.isnan(rows_clean) and math.isnan(rows_masked)  # nothing below layer 0 to mask
    else:  # A[q, q-1] on the masked rows, from the patterns themselves
        edits = [mask_previous_attention(5, range(l))]
        q = torch.arange(5, prompts.shape[1], 5)
        from gpt2_posheads.analysis.measures import head_patterns

        got = [head_patterns(model, p, [(l, h)], edits)[(l, h)][q, q - 1].mean() for p in prompts[:8]]
        assert rows_masked == pytest.approx(float(torch.stack(got).mean()), abs=1e-5)


# Measured facts of each shipped organism, with margins: what its model card says, read through its cache.
# "toy route": its sharp head reads the previous position off W_pos (layer 0, collapses under averaging).
# "GPT-2 route": the sharp head sits above layer 0, keeps its mass under W_pos averaging and loses it when the
# previous position is masked in the layers below.
ROUTE = {"mini-gpt2": "toy"}


def organism_name(cache) -> str:
    return cache.meta["model"].rstrip("/").split("/")[-1]


def test_classification_read_through_the_store_is_the_models(mini):
    """``PosheadsCache.classification`` labels every head as the taxonomy measured afresh on the cache's prompts."""
    model, cache = mini
    window = (cache.tensors["score_profile"].shape[-1] - 1) // 2
    fresh = classify_prev_heads(score_profile(model, cache.tensors["prompts"], window=window))
    got = cache.classification()
    assert len(got) == model.cfg.n_layers * model.cfg.n_heads
    assert got["label"].tolist() == fresh["label"].tolist()
    assert set(got["label"]) == {"prev_boosting", "self_suppressing", "neither"}  # the organism has all three kinds
    assert cache.classification(threshold=1e9)["label"].eq("neither").all()  # no head clears a bar of 1e9 logits


def test_organism_has_the_mechanism(mini):
    """Every shipped organism: a sharp previous-token head ranks first (ratio < 0.10; GPT-2's L4H11: 0.01), an
    induction head (>= 0.4) copies a repeated random sequence (second copy <= 1 nat with BOS, first >= 7)."""
    _, cache = mini
    rank = cache.ranking()
    assert rank.iloc[0]["ratio"] < 0.10 and rank.iloc[0]["top_offset"] == 1
    assert float(cache.tensors["induction.scores"].max()) >= 0.4
    first, second = cache.tensors["induction.losses"].tolist()
    assert first >= 7.0 and second <= 1.0


def test_organism_route(mini):
    """The toy-route organism (card: L0H1, ratio 0.001, previous-token mass 0.993 -> 0.026 under W_pos averaged in
    groups of 10) collapses under averaging; a GPT-2-route organism's head keeps >= 80% and, on the rows masked at
    every fifth query in the layers below it, loses at least half its previous-token attention."""
    _, cache = mini
    route = ROUTE[organism_name(cache)]
    l, _ = parse_head(cache.meta["aggregator"])
    clean, averaged = cache.tensors["mechanism.aggregator_prev_mass"].tolist()
    rows_clean, rows_masked = cache.tensors["mechanism.masked_rows"].tolist()
    if route == "toy":
        assert l == 0 and math.isnan(rows_masked)
        assert averaged < 0.1 * clean  # it reads the previous position off W_pos
    else:
        assert l >= 1
        assert averaged >= 0.8 * clean
        assert rows_masked <= 0.5 * rows_clean  # the masked rows lose at least half (the post's rule)


def test_sources_ranking_matches_cache(mini):
    """The direct-path-ablation ranking of the aggregator's upstream heads, recomputed, is the cached one (a
    layer-0 aggregator has none: nothing is stored); removing nothing changes nothing."""
    from gpt2_posheads.analysis.sources import path_ablation

    model, cache = mini
    target = cache.meta["sources_target"]
    if target is None:
        assert parse_head(cache.meta["aggregator"])[0] == 0 and cache.meta["sources_order"] == []
        assert not [k for k in cache.tensors if k.startswith("sources.")]
        return
    l, h = parse_head(target)
    df = path_ablation(model, cache.tensors["prompts"][:16], l, h)
    cached = dict(zip(cache.meta["sources_order"], cache.tensors[f"sources.{target}.drop"].tolist()))
    got = {f"{r.source}|{r.side}": r.drop for r in df.itertuples()}
    assert set(got) == set(cached)
    assert max(abs(got[k] - cached[k]) for k in got) < 1e-6  # per (source, side), whatever the order of near-ties
    assert next(iter(got)) == cache.meta["sources_order"][0]  # the largest effect is the same source and side
    none = df[df.source == "none"].iloc[0]
    assert none["drop"] == 0.0
    assert none["clean_prev_mass"] == pytest.approx(
        float(diagonal_attention(model, cache.tensors["prompts"][:16], max_offset=2, progress=False)[l, h, 1]), abs=1e-5
    )
