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
