"""One page on a model organism: does it have the GPT-2 post's mechanism, and claim by claim, does the
post's causal story hold on it?

    python experiments/mini_gpt2_report.py --model-dir data/mini-gpt2          # ~3 min on 2 CPU cores

Part 1, the targets (gpt2_posheads.claims.organism): a sharp previous-token head on held-out text and on random
tokens, an induction head and copying, the repeat-string prompt, held-out loss against the previous
shipped model. Part 2, the story: runs every GPT-2 claim script on the model (results/<script>/<model>/)
and lists each claim as the post's result, the model's, and agrees / disagrees / not testable (why).
Writes report.html and summary.json under results/mini_gpt2_report/<model>/.
"""
import html

from gpt2_posheads.cli.common import (Output, experiment_parser, main_entry, model_from_args, model_label, model_slug, positive,
                               postcheck, precheck, read_json)
from gpt2_posheads.claims.organism import REFERENCE_HELDOUT, heldout_stream, organism_targets
from gpt2_posheads.report.plotting import heatmap
from gpt2_posheads.analysis.prompts import wikitext_documents
from gpt2_posheads.cli.runner import GPT2_SCRIPTS, RESULTS, run_experiment
from gpt2_posheads.claims.verdicts import claims_table

AGREE = {"held": "agrees", "not held": "disagrees", "not testable": "not testable"}
# The causal story of the post, in order: which script's claim answers each step.
STORY = [
    ("rank_prev_heads", "sharp_prev_head"), ("rank_prev_heads", "sharpest_stands_alone"),
    ("rank_prev_heads", "half_prev_heads"),
    ("raw_scores_taxonomy", "early_self_suppressing"), ("raw_scores_taxonomy", "aggregator_prev_boosting"),
    ("mask_prev_attention", "mask_disrupts"),
    ("pos_embed_averaging", "avg_prev_heads_unaffected"), ("pos_embed_averaging", "avg_output_unchanged"),
    ("pos_embed_averaging", "avg_breaks_down"),
    ("ext_pos_averaging", "ext_avg_hurts_early_more"),
    ("l4h11_edit", "edit_moves_copy"),
    ("prev_head_sources", "sources_upstream"), ("prev_head_sources", "sources_named_heads"),
    ("pos_embed_helix", "wpos_helix"), ("pos_embed_helix", "ext_helix"),
    ("ext_pos_vs_wpe", "ext_same_subspace"), ("ext_pos_vs_wpe", "ext_sparser"), ("ext_pos_vs_wpe", "ext_token_independent"),
]


def story_rows(slug: str) -> list[dict]:
    rows = []
    for script, key in STORY:
        path = RESULTS / script / slug / "summary.json"
        if not path.exists():
            rows.append({"script": script, "key": key, "claim": key, "post": "", "measured": "(script not run)",
                         "verdict": "not testable", "why": f"no {path.relative_to(RESULTS)}", "rule": ""})
            continue
        found = [c for c in read_json(path).get("claims", []) if c.get("key") == key]
        for c in found:
            rows.append({"script": script, **c})
    return rows


def page(title: str, targets: list[dict], story: list[dict], figs: list[str]) -> str:
    def table(rows, agree: bool):
        head = "<tr><th>claim</th><th>post (GPT-2)</th><th>this model</th><th>verdict</th><th>rule / why</th></tr>"
        body = "".join(
            f"<tr><td>{html.escape(r['claim'])}</td><td>{html.escape(str(r['post']))}</td>"
            f"<td><code>{html.escape(str(r['measured']))[:300]}</code></td>"
            f"<td><b>{html.escape(AGREE[r['verdict']] if agree else r['verdict'])}</b></td>"
            f"<td>{html.escape(r['rule'])}<br><i>{html.escape(r['why'])}</i></td></tr>" for r in rows)
        return f"<table>{head}{body}</table>"
    links = " · ".join(f'<a href="{html.escape(f)}">{html.escape(f)}</a>' for f in figs)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>
body{{font-family:sans-serif;margin:2em;max-width:1300px}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:4px 6px;vertical-align:top}}th{{background:#f3f3f3}}</style></head><body>
<h1>{html.escape(title)}</h1><h2>1. Does it have the mechanism? (targets)</h2>{table(targets, False)}
<h2>2. The post's causal story, claim by claim</h2>
<p>agrees = the post's claim held on this model by the stated rule; disagrees = it did not (a finding);
not testable = a precondition failed.</p>{table(story, True)}
<p>Figures: {links}</p></body></html>"""


def main(argv=None):
    p = experiment_parser(__doc__)
    p.add_argument("--n-prompts", type=int, default=32, help="held-out text prompts (WikiText-2 held-out split)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per prompt (capped at n_ctx)")
    p.add_argument("--skip-scripts", action="store_true", help="only the targets; reuse the claim scripts' last results")
    args = p.parse_args(argv)
    precheck(args)
    out = Output.from_args(args, __file__)
    model = model_from_args(args)
    postcheck(args, model)
    from gpt2_posheads.organism.train import split_docs

    _, val_docs = split_docs(wikitext_documents(), 0.05, 0)  # the organism's held-out split (never trained on)
    seq = min(args.seq_len, model.cfg.n_ctx)
    stream = heldout_stream(model, val_docs)
    n = min(args.n_prompts, (len(stream) - 1) // seq)
    positive("--n-prompts", n)
    text = stream[: n * seq].view(n, seq).clone()
    text[:, 0] = model.tokenizer.bos_token_id
    claims, m = organism_targets(model, text, heldout=stream, seed=args.seed)
    L = model.cfg.n_layers
    out.figure(heatmap(m["induction_scores"], x=list(range(model.cfg.n_heads)), y=list(range(L)), zmin=0, zmax=1,
                       colorbar=dict(title="score"), xlabel="head", ylabel="layer",
                       title=f"{model_label(args)}: induction score (attention to the token after the earlier "
                             f"occurrence; 0..1)"), "induction_scores")
    rt = m["ranking_text"]
    grid = [[float("nan")] * model.cfg.n_heads for _ in range(L)]
    for r in rt.itertuples():
        grid[r.layer][r.head] = r.ratio if r.is_prev_token else float("nan")
    out.figure(heatmap(grid, x=list(range(model.cfg.n_heads)), y=list(range(L)), zmin=0, zmax=1, colorscale="Viridis_r",
                       colorbar=dict(title="ratio"), xlabel="head", ylabel="layer",
                       title=f"{model_label(args)}: previous-token ratio on held-out text (lower = sharper; "
                             f"blank = not a previous-token head)"), "prev_token_ratio")
    print(claims_table(claims))

    slug = model_slug(args)
    if not args.skip_scripts:
        margs = (["--model-dir", args.model_dir] if args.model_dir else ["--model", args.model]) + \
                (["--device", args.device] if args.device else []) + (["--no-png"] if args.no_png else [])
        for i, name in enumerate(GPT2_SCRIPTS, 1):
            print(f"\n=== [{i}/{len(GPT2_SCRIPTS)}] {name}", flush=True)
            if not (RESULTS.parent / "experiments" / f"{name}.py").exists():
                continue
            run_experiment(name, margs + ["--out", str(RESULTS / name / slug)])
    story = story_rows(slug)
    print("\nthe post's causal story on this model:\n" + claims_table(story))
    figs = [f.name for f in out.written if f.suffix == ".html"]
    (out.out_dir / "report.html").write_text(page(f"{model_label(args)} as a model organism of the GPT-2 post",
                                                  [c.as_dict() for c in claims], story, figs), encoding="utf-8")
    out.written.append(out.out_dir / "report.html")
    out.summary({"model": model_label(args), "targets": {k: v for k, v in m.items()
                                                         if k not in ("induction_scores", "ranking_text")},
                 "reference_heldout": REFERENCE_HELDOUT,
                 "story": [{**r, "agreement": AGREE[r["verdict"]]} for r in story]}, claims)
    out.report()


if __name__ == "__main__":
    main_entry(main)
