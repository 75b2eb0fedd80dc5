"""The results page shows each model's route conclusion first, drawn from its scripts' summary.json files."""

import json

from gpt2_posheads.report.index import collect_summaries, index_html, route_conclusions


def write_summary(root, script, model, claims):
    folder = root / script / model
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"script": script, "model": model, "claims": claims}))


def claim(key, verdict, measured=None, head="L2H0", readout=""):
    return {
        "key": key,
        "claim": key,
        "post": "",
        "rule": "held if",
        "verdict": verdict,
        "why": "because",
        "measured": measured or {},
        "head": head,
        "readout": readout,
    }


def test_route_conclusions_lead_the_page(tmp_path):
    write_summary(tmp_path, "rank_prev_heads", "flat", [claim("sharp_prev_head", "not held", head="")])
    write_summary(tmp_path, "rank_prev_heads", "reader", [claim("sharp_prev_head", "held", readout="ratio 0.001")])
    write_summary(
        tmp_path,
        "pos_embed_averaging",
        "reader",
        [claim("avg_prev_heads_unaffected", "not held", {"L2H0 clean -> g10": [0.9, 0.1]})],
    )
    write_summary(
        tmp_path,
        "prev_head_sources",
        "reader",
        [
            claim(
                "aggregator_above_layer0",
                "not held",
                {
                    "head": "L2H0",
                    "layer": 2,
                    "relative_drop_without_layers_below": 0.0,
                    "relative_drop_wpos_averaged_below": 0.0,
                },
            )
        ],
    )
    summaries = collect_summaries(tmp_path)
    routes = route_conclusions(summaries, tmp_path)
    assert {m: c.route for m, c in routes.items()} == {"flat": "none", "reader": "wpos"}
    page = index_html(summaries, tmp_path)
    first = page.index("Which route each model")
    assert first < page.index("004: The positional embedding")
    assert "reads W_pos directly" in page and "no sharp previous-token head" in page
    assert "keeps 11% of its previous-token mass" in page  # the deciding row, with its number


def test_the_route_read_from_the_weights_stands_beside_the_causal_one_and_a_disagreement_is_said(tmp_path):
    """A model whose causal conclusion is "reads W_pos" and whose weight route says "built from earlier heads" shows
    the disagreement; one whose weight route agrees says so; a model without a weight_route run says it did not run."""
    for model, label in (("reader", "reads W_pos directly"), ("mixed", "built from earlier heads")):
        write_summary(tmp_path, "rank_prev_heads", model, [claim("sharp_prev_head", "held", readout="ratio 0.001")])
        write_summary(
            tmp_path,
            "pos_embed_averaging",
            model,
            [claim("avg_prev_heads_unaffected", "not held", {"L2H0 clean -> g10": [0.9, 0.1]})],
        )
        record = {"head": "L2H0", "layer": 2, "relative_drop_without_layers_below": 0.0}
        record["relative_drop_wpos_averaged_below"] = 0.0
        write_summary(tmp_path, "prev_head_sources", model, [claim("aggregator_above_layer0", "not held", record)])
        w = {"head": "L2H0", "label": label, "reason": f"the weights say {label}"}
        write_summary(tmp_path, "weight_route", model, [claim("weight_route_built", "held", w)])
    write_summary(tmp_path, "rank_prev_heads", "flat", [claim("sharp_prev_head", "not held", head="")])
    summaries = collect_summaries(tmp_path)
    assert {m: c.route for m, c in route_conclusions(summaries, tmp_path).items()} == {
        "flat": "none",
        "mixed": "wpos",
        "reader": "wpos",
    }
    page = index_html(summaries, tmp_path)
    table = page[page.index("Which route each model") : page.index("004: The positional embedding")]
    rows = {m: table[table.index(f"<b>{m}</b>") :].split("</tr>")[0] for m in ("flat", "mixed", "reader")}
    assert "read from the weights" in table
    assert "agrees: the weights say reads W_pos directly" in rows["reader"]
    assert "<b>disagrees</b> with the causal conclusion: the weights say built from earlier heads" in rows["mixed"]
    assert "not run" in rows["flat"]


def test_a_script_that_failed_on_one_model_keeps_the_other_models_rows(tmp_path):
    write_summary(tmp_path, "rank_prev_heads", "a", [claim("sharp_prev_head", "held", readout="ratio 0.01")])
    jobs = [
        {"script": "rank_prev_heads", "model": m, "status": s, "seconds": 1.0}
        for m, s in (("a", "ok"), ("b", "failed"))
    ]
    page = index_html(collect_summaries(tmp_path), tmp_path, {"models": ["a", "b"], "jobs": jobs})
    section = page[page.index("004: The positional embedding") :]
    assert "no results: failed" in section  # model b's cell says why it has no numbers
    assert "ratio 0.01" in section  # model a's row is still there
