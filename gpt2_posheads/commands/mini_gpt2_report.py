"""One page on a model organism: does it have the GPT-2 post's mechanism, and claim by claim, does the post's causal
story hold on it (does it take the post's route)?

    gpt2-posheads mini_gpt2_report --model route-gpt2 --compare <mini-gpt2 folder>
    gpt2-posheads mini_gpt2_report --model-dir my-organism --compare <route-gpt2 folder>
    gpt2-posheads mini_gpt2_report --model mini-gpt2 --skip-scripts   # targets only

Part 1, the behaviour targets (gpt2_posheads.claims.organism), each a rule fixed before any model was built or
trained: a sharp previous-token head, induction and copying, held-out loss. Part 2, the story: every GPT-2 claim
script on this model (results/<script>/<model>/), in three columns: this model, the --compare model (its latest
results, when it has any) and the post's GPT-2 numbers; the claims that tell the post's route from a head reading
W_pos are marked "route". Writes report.html and summary.json under results/mini_gpt2_report/<model>/.
"""

import html
from pathlib import Path

from gpt2_posheads.analysis.prompts import wikitext_documents
from gpt2_posheads.claims.catalogue import MODEL_SCRIPTS
from gpt2_posheads.claims.gpt2_post import CLAIMS, ROUTE
from gpt2_posheads.claims.organism import REFERENCE_HELDOUT, heldout_stream, organism_targets
from gpt2_posheads.claims.verdicts import claims_table
from gpt2_posheads.cli import experiment_parser, positive, read_json, results_root, setup
from gpt2_posheads.cli.args import check_model_dir
from gpt2_posheads.commands import run_experiment
from gpt2_posheads.organism.data import split_docs
from gpt2_posheads.report.plotting import heatmap

# The causal story of the post, in order: which script's claim answers each step.
STORY = [
    ("rank_prev_heads", "sharp_prev_head"),
    ("rank_prev_heads", "sharpest_stands_alone"),
    ("prev_head_sources", "aggregator_above_layer0"),
    ("rank_prev_heads", "half_prev_heads"),
    ("raw_scores_taxonomy", "early_self_suppressing"),
    ("raw_scores_taxonomy", "aggregator_prev_boosting"),
    ("mask_prev_attention", "mask_disrupts"),
    ("pos_embed_averaging", "avg_prev_heads_unaffected"),
    ("pos_embed_averaging", "avg_output_unchanged"),
    ("pos_embed_averaging", "avg_breaks_down"),
    ("ext_pos_averaging", "ext_avg_hurts_early_more"),
    ("l4h11_edit", "edit_moves_copy"),
    ("prev_head_sources", "sources_upstream"),
    ("prev_head_sources", "sources_named_heads"),
    ("pos_embed_helix", "wpos_helix"),
    ("pos_embed_helix", "ext_helix"),
    ("ext_pos_vs_wpe", "ext_same_subspace"),
    ("ext_pos_vs_wpe", "ext_sparser"),
    ("ext_pos_vs_wpe", "ext_token_independent"),
]


def story_rows(slug: str) -> dict[str, dict]:
    """``{claim key: the claim of this model's latest run}`` for every step of :data:`STORY`."""
    rows = {}
    for script, key in STORY:
        path = results_root() / script / slug / "summary.json"
        found = [c for c in read_json(path).get("claims", []) if c.get("key") == key] if path.exists() else []
        rows[key] = (
            found[0]
            if found
            else {
                "claim": CLAIMS[key].claim,
                "post": CLAIMS[key].post,
                "measured": "",
                "verdict": "not testable",
                "rule": CLAIMS[key].rule.text,
                "why": f"{script} has not run on this model (no {path.relative_to(Path.cwd())})",
            }
        )
    return rows


def _cell(c: dict | None) -> str:
    if c is None:
        return "<td>-</td>"
    colour = {"held": "#1a7f37", "not held": "#cf222e"}.get(c["verdict"], "#6e7781")
    head = f" ({html.escape(c['head'])})" if c.get("head") else ""
    return (
        f"<td><b style='color:{colour}'>{html.escape(c['verdict'])}</b>{head}<br>{html.escape(c.get('shown', ''))}"
        f"<br><i>{html.escape(c.get('why', ''))}</i></td>"
    )


def page(
    title: str, targets: list[dict], story: dict, contrast: dict | None, contrast_name: str, figs: list[str]
) -> str:
    t_rows = "".join(
        f"<tr><td>{html.escape(c['claim'])}</td><td>{html.escape(c['post'])}</td>{_cell(c)}"
        f"<td>{html.escape(c['rule'])}</td></tr>"
        for c in targets
    )
    s_rows = "".join(
        f"<tr><td>{html.escape(CLAIMS[k].claim)}{' <small>(route)</small>' if CLAIMS[k].tells == ROUTE else ''}"
        f"</td>{_cell(story[k])}"
        f"{_cell(contrast.get(k)) if contrast else '<td>(not run)</td>'}<td>{html.escape(CLAIMS[k].post)}</td>"
        f"<td>{html.escape(CLAIMS[k].rule.text)}</td></tr>"
        for _, k in STORY
    )
    links = " · ".join(f'<a href="{html.escape(f)}">{html.escape(f)}</a>' for f in figs)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>
body{{font-family:sans-serif;margin:2em;max-width:1400px}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:4px 6px;vertical-align:top}}th{{background:#f3f3f3}}</style></head><body>
<h1>{html.escape(title)}</h1><h2>1. The targets</h2>
<table><tr><th>target</th><th>GPT-2 (post)</th><th>this model</th><th>rule</th></tr>{t_rows}</table>
<h2>2. The post's causal story, claim by claim</h2>
<table><tr><th>claim</th><th>this model</th><th>{html.escape(contrast_name)}</th><th>GPT-2 small (post)</th>
<th>rule</th></tr>
{s_rows}</table><p>Figures: {links}</p></body></html>"""


def main(argv=None):
    p = experiment_parser(__doc__)
    p.add_argument("--n-prompts", type=int, default=32, help="held-out text prompts (WikiText-2 held-out split)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per prompt (capped at n_ctx)")
    p.add_argument(
        "--compare",
        default=None,
        help="a second model folder whose latest claim results fill the middle "
        "column (default: the other shipped organism)",
    )
    p.add_argument(
        "--skip-scripts", action="store_true", help="only the targets; reuse the claim scripts' last results"
    )
    args = p.parse_args(argv)
    positive("--n-prompts", args.n_prompts)
    check_model_dir(args.compare)
    exp = setup(args, __file__, prompts=False, ranking=False)
    model, out = exp.model, exp.out
    _, val_docs = split_docs(wikitext_documents(), 0.05, 0)  # the organism's held-out split (never trained on)
    seq = min(args.seq_len, model.cfg.n_ctx)
    stream = heldout_stream(model, val_docs)
    n = min(args.n_prompts, (len(stream) - 1) // seq)
    text = stream[: n * seq].view(n, seq).clone()
    text[:, 0] = model.tokenizer.bos_token_id
    claims, m = organism_targets(model, text, heldout=stream, seed=args.seed)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    out.figure(
        heatmap(
            m["induction_scores"],
            x=list(range(H)),
            y=list(range(L)),
            zmin=0,
            zmax=1,
            colorbar=dict(title="score"),
            xlabel="head",
            ylabel="layer",
            title=f"{exp.label}: induction score<br><sup>attention to the token after the earlier occurrence</sup>",
        ),
        "induction_scores",
    )
    grid = [[float("nan")] * H for _ in range(L)]
    for r in m["ranking_text"].itertuples():
        grid[r.layer][r.head] = r.ratio if r.is_prev_token else float("nan")
    out.figure(
        heatmap(
            grid,
            x=list(range(H)),
            y=list(range(L)),
            zmin=0,
            zmax=1,
            colorscale="Viridis_r",
            colorbar=dict(title="ratio"),
            xlabel="head",
            ylabel="layer",
            title=f"{exp.label}: previous-token ratio on held-out text<br><sup>lower = sharper; blank = not a "
            f"previous-token head</sup>",
        ),
        "prev_token_ratio",
    )
    print(claims_table(claims))

    slug = Path(args.model_dir).resolve().name if args.model_dir else args.model.replace("/", "--")
    if not args.skip_scripts:
        margs = (
            (["--model-dir", args.model_dir] if args.model_dir else ["--model", args.model])
            + (["--device", args.device] if args.device else [])
            + (["--no-png"] if args.no_png else [])
        )
        for i, name in enumerate(MODEL_SCRIPTS, 1):
            print(f"\n=== [{i}/{len(MODEL_SCRIPTS)}] {name}", flush=True)
            if run_experiment(name, margs) == 130:
                raise KeyboardInterrupt
    story = story_rows(slug)
    contrast_dir = args.compare
    contrast_slug = Path(contrast_dir).resolve().name if contrast_dir else None
    contrast = (
        story_rows(contrast_slug)
        if contrast_slug and (results_root() / "rank_prev_heads" / contrast_slug).exists()
        else None
    )
    print("\nthe post's causal story on this model:\n" + claims_table([story[k] for _, k in STORY]))
    figs = [f.name for f in out.written if f.suffix == ".html"]
    report = out.path("report.html")
    report.write_text(
        page(
            f"{exp.label} as a model organism of the GPT-2 post",
            [c.as_dict() for c in claims],
            story,
            contrast,
            contrast_dir or "(no comparison model)",
            figs,
        ),
        encoding="utf-8",
    )
    out.summary(
        {
            **exp.describe(),
            "targets": {k: v for k, v in m.items() if k not in ("induction_scores", "ranking_text")},
            "reference_heldout": REFERENCE_HELDOUT,
            "compare": contrast_dir,
            "story": [{**story[k], "key": k} for _, k in STORY],
        },
        claims,
    )
    out.commit()
