"""Post 004's claims about the aggregator and the early heads as functions called from Python: on the compiled route
model (weights set by hand to carry the post's mechanism) each gets the verdict its construction implies, with one
set of prompts and one ranking shared between them; arguments are checked at entry, naming the argument."""

import pandas as pd
import pytest

from gpt2_posheads.organism.known_answers import expected
from gpt2_posheads.posts.gpt2_prev_heads import (
    ext_pos_averaging,
    l4h11_edit,
    model_run,
    prev_head_sources,
    raw_scores_taxonomy,
)
from gpt2_posheads.posts.gpt2_prev_heads.sources import aggregator_first
from gpt2_posheads.posts.result import ClaimResult


@pytest.fixture(scope="module")
def route(tmp_path_factory):
    from gpt2_posheads import load_model
    from gpt2_posheads.organism.compiled import build

    folder = build("route-gpt2", tmp_path_factory.mktemp("route") / "route-gpt2", measured=False)
    return load_model(folder, device="cpu")


@pytest.fixture(scope="module")
def run(route):
    return model_run(route, n_prompts=8, seq_len=256)


@pytest.fixture(scope="module")
def results(run):
    """Each claim function on the same run, with its defaults (the heads the model's ranking chooses)."""
    return {
        "raw_scores_taxonomy": raw_scores_taxonomy(run=run),
        "ext_pos_averaging": ext_pos_averaging(run=run),
        "l4h11_edit": l4h11_edit(run=run),
        "prev_head_sources": prev_head_sources(run=run),
    }


def test_each_claim_gets_its_known_verdict(results):
    known = expected("route-gpt2")
    for name, result in results.items():
        assert isinstance(result, ClaimResult) and result.name == name
        got = {c.key: c for c in result.claims}
        want = {key: v for (script, key), v in known.items() if script == name}
        assert set(got) == set(want), name
        for key, (verdict, reason) in want.items():
            assert got[key].verdict == verdict, (key, reason, got[key].why)


def test_one_ranking_is_shared_and_roles_follow_it(run, results):
    """The run's ranking, computed once, chooses every default head: the aggregator is its sharpest previous-token
    head; the early head of ext_pos_averaging sits below it; prev_head_sources puts the aggregator first."""
    rank = run.ranking
    agg = rank[rank.is_prev_token].iloc[0]["name"]
    assert results["raw_scores_taxonomy"].numbers["aggregator"] == agg
    heads = [r["head"] for r in results["ext_pos_averaging"].numbers["results"]]
    assert heads[-1] == agg and len(heads) == 2
    layers = [r["layer"] for r in results["ext_pos_averaging"].numbers["results"]]
    assert layers[0] < layers[1]
    assert results["prev_head_sources"].numbers["targets"][0] == agg
    assert results["l4h11_edit"].claim("edit_moves_copy").head == agg


def test_the_numbers_are_the_claims_own(results):
    """What a result holds beside its verdicts is what the verdicts were judged on, not a second computation."""
    tax = results["raw_scores_taxonomy"]
    df = tax.tables["classification"]
    assert isinstance(df, pd.DataFrame) and len(df) == 16  # every head of 4 layers x 4 heads
    agg = tax.numbers["aggregator"]
    assert tax.claim("aggregator_prev_boosting").measured["label"] == df.set_index("name").loc[agg, "label"]
    early = tax.numbers["early_prev_heads"]
    assert tax.claim("early_self_suppressing").measured["early_prev_heads"] == early.name.tolist()
    ext = results["ext_pos_averaging"]
    js = ext.claim("ext_avg_hurts_early_more").measured["js"]
    assert js == {r["head"]: r["js_divergence"] for r in ext.numbers["results"]}
    edit = results["l4h11_edit"]
    clean, x2 = edit.numbers["rows"][0], next(r for r in edit.numbers["rows"] if r["factor"] == 2.0)
    assert clean["condition"] == "clean" and edit.claim("edit_moves_copy").measured["edit_x2"] == {
        k: v for k, v in x2.items() if k.startswith("P(")
    }
    src = results["prev_head_sources"]
    agg_table = src.tables[f"ablation_{agg}"]
    below = agg_table[(agg_table.source == "layers below") & (agg_table.side == "both")].relative_drop.item()
    assert src.claim("aggregator_above_layer0").measured["relative_drop_without_layers_below"] == below
    assert set(src.figures) == {"prev_head_sources", "sources_groups"}


def test_a_result_and_the_explorer_show_themselves_inline(route, results, monkeypatch):
    """What the 004 notebook shows (the notebook itself runs under ``-m slow``, tests/notebooks): a claim result is its
    verdict table, every claim with its verdict; ``.show()`` draws each figure, or those named, with plotly's own
    renderer; the explorer is its page in an iframe of its own."""
    import html

    from plotly.basedatatypes import BaseFigure

    from gpt2_posheads import explore

    for result in results.values():
        shown = result._repr_html_()
        assert all(html.escape(c.claim) in shown and f">{c.verdict}</span>" in shown for c in result.claims)
    assert ">held</span>" in results["raw_scores_taxonomy"]._repr_html_()
    drawn = []
    monkeypatch.setattr(BaseFigure, "show", lambda fig, *a, **k: drawn.append(fig))
    src = results["prev_head_sources"]
    src.show()
    assert drawn == list(src.figures.values())
    src.show("sources_groups")
    assert drawn[-1] is src.figures["sources_groups"] and len(drawn) == len(src.figures) + 1
    inline = explore(route, "route-gpt2")._repr_html_()
    assert inline.startswith("<iframe srcdoc=") and "route-gpt2" in inline


def test_off_gpt2_the_aggregator_comes_first(route):
    """The role's default order is [early, aggregator]; prev_head_sources judges the first head."""
    assert aggregator_first(route, [(1, 0), (3, 2)]) == [(3, 2), (1, 0)]


@pytest.mark.parametrize(
    "call, param",
    [
        (lambda run: raw_scores_taxonomy(run=run, window=2), "window"),
        (lambda run: raw_scores_taxonomy(run=run, window=200), "window"),
        (lambda run: raw_scores_taxonomy(run=run, threshold=-1.0), "threshold"),
        (lambda run: ext_pos_averaging(run=run, group_size=1), "group_size"),
        (lambda run: ext_pos_averaging(run=run, ext_prompts=0), "ext_prompts"),
        (lambda run: l4h11_edit(run=run, factors=(1, 3)), "factors"),
        (lambda run: l4h11_edit(run=run, factors=(-1, 2)), "factors"),
        (lambda run: l4h11_edit(run=run, target=" ninja turtle"), "target"),
        (lambda run: prev_head_sources(run=run, ablation="noise"), "ablation"),
        (lambda run: prev_head_sources(run=run, pos_group=1), "pos_group"),
        (lambda run: prev_head_sources(run=run, batch_size=0), "batch_size"),
    ],
)
def test_a_bad_argument_is_a_value_error_naming_it(run, call, param):
    with pytest.raises(ValueError, match=rf"^{param}: "):
        call(run)


def test_without_a_model_is_a_type_error():
    with pytest.raises(TypeError, match="^model: "):
        raw_scores_taxonomy("gpt2")


def test_masking_claim_names_the_period_it_measured(run):
    """``every=3`` masks every third query, and the claim's text and rule say so (not the post's fifth)."""
    from gpt2_posheads.posts.gpt2_prev_heads import mask_prev_attention

    for every, nth in ((3, "every 3rd"), (5, "every 5th")):
        result = mask_prev_attention(run=run, heads=["L3H0"], every=every)
        (claim,) = result.claims
        assert result.numbers["every"] == every
        assert nth in claim.claim and nth in claim.rule, (claim.claim, claim.rule)
        assert (every == 5) == ("every 5th" in claim.claim + claim.rule)
