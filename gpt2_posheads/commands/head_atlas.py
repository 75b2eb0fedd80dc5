"""A head atlas across models: every head's previous-token ratio and top offset, induction and duplicate-token
scores, under one stated protocol; one table per model and one mosaic across models.

    gpt2-posheads head_atlas --models mini-gpt2 --model-dirs path/to/another-model
    gpt2-posheads head_atlas --models gpt2,gpt2-medium,EleutherAI/pythia-160m      # needs the hub
    gpt2-posheads head_atlas --models gpt2 --protocol ood-composition              # + the published protocol
    gpt2-posheads head_atlas --models route-gpt2,lookalike-wpos --route weights     # + each route read from the weights

The protocols are gpt2_posheads.analysis.atlas's ("toolkit"; "ood-composition" adds the per-head scores of the
protocol released with "Out-of-distribution generalization via composition"). Where a model has learned W_pos, its
sharpest previous-token head's previous-token mass under W_pos averaged in groups of 10 is measured too; --route
weights adds each model's route read from the weights (no data run: weight_route.route_record). Writes
atlas_<model>.csv per model, mosaic.html and summary.json.
"""

import math

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..analysis.atlas import OOD_PROTOCOL, TOOLKIT_PROTOCOL, head_table
from ..analysis.diagonals import diagonal_attention
from ..analysis.interventions import average_pos_embed
from ..claims.catalogue import Command, Option
from ..cli.args import DEVICE, name_list, output_options, prompt_options
from ..cli.checks import check_device, check_hub_names, check_model_dirs
from ..cli.declared import parse
from ..cli.experiment import check_engine_args, check_model_names, corpus_prompts, engine_options, load_engine_model
from ..cli.output import Output, default_target
from ..model.loading import ModelLoadError, has_learned_positions, load_model, position_kind
from ..model.paths import SHIPPED_MODELS
from ..model.validation import UsageError, positive
from ..posts.gpt2_prev_heads.weight_route import route_record

PROTOCOLS = ("toolkit", "ood-composition")
METRICS = (("sharpness", "previous-token: 1 - ratio"), ("induction", "induction"), ("duplicate", "duplicate-token"))


COMMAND = Command(
    "head_atlas",
    usage=__doc__,
    options=(
        Option("--model-dirs", "", "comma-separated local Hugging Face model folders"),
        Option("--models", "", "comma-separated shipped models (mini-gpt2, route-gpt2, ...) or hub names"),
        Option(
            "--protocol", "toolkit", "ood-composition adds that paper's per-head scores to the table", choices=PROTOCOLS
        ),
        Option("--route", "none", "weights: each model's route read from the weights", choices=("none", "weights")),
        *prompt_options(n_prompts=16, seq_len=256),
        DEVICE,
        *output_options(
            "output folder (default: results/head_atlas)", "random seed of the prompts and repeated sequences"
        ),
        *engine_options(("auto",), "auto: TransformerLens"),
    ),
)


def main(argv=None):
    args = parse(COMMAND, argv)
    check_engine_args(args, "--model-dirs")
    dirs = check_model_dirs(args.model_dirs)
    hub = name_list(args.models)
    if not dirs and not hub:
        raise UsageError("--model-dirs", "no model given", "--model-dirs and/or --models", "e.g. --models mini-gpt2")
    check_hub_names([m for m in hub if m not in SHIPPED_MODELS])  # shipped models load offline by name
    labels = check_model_names([("--model-dir", d) for d in dirs] + [("--model", m) for m in hub])
    check_device(args.device)
    positive("--n-prompts", args.n_prompts)
    positive("--seq-len", args.seq_len, 2)
    out = Output.open(args.out or default_target("head_atlas"), "head_atlas", png=not args.no_png, force=args.force)
    protocol = TOOLKIT_PROTOCOL + (f"; ood-composition: {OOD_PROTOCOL}" if args.protocol == "ood-composition" else "")
    tables, summary = {}, {"protocol": protocol, "seed": args.seed, "models": {}}
    for name in dirs + hub:
        label = labels[name][0]
        if label in tables:  # one model given twice (the same weights): measured once
            print(f"note: {name} is the model measured as {label}: measured once")
            continue
        try:
            model = load_engine_model(name, args, "--models") or load_model(name, device=args.device)
        except ModelLoadError as e:
            raise UsageError("--models", str(e)) from None
        prompts, source = corpus_prompts(model, args)
        df = head_table(model, prompts, protocol=args.protocol, seed=args.seed, model_name=name, engine=args.engine)
        tables[label] = df
        out.csv(df, f"atlas_{label}")
        prev = df[df.is_prev_token].sort_values("prev_ratio")
        top = prev.iloc[0] if len(prev) else None
        info = {"model": name, "source": source, "positions": position_kind(model)}  # model: as the user gave it
        info["n_prev_token_heads"] = int(len(prev))  # (the key is the name its files are filed under)
        info["sharpest_prev_head"] = None if top is None else top["name"]
        info["sharpest_prev_ratio"] = None if top is None else float(top.prev_ratio)
        for key in ("induction", "duplicate"):
            info[f"top_{key}"] = df.nlargest(5, key)[["name", key]].to_dict("records")
        if top is not None and has_learned_positions(model):
            avg = diagonal_attention(model, prompts, edits=[average_pos_embed(10)], progress=False)
            info["wpos_avg10_keep"] = float(avg[int(top["layer"]), int(top["head"]), 1]) / float(top.prev_mass)
        if args.route == "weights":
            info["weight_route"] = w = route_record(model)
            print(f"{label}: by the weights, {w['label']} {w['head']} ({w['reason']})")
        summary["models"][label] = info
        ratio = "n/a" if top is None else f"{info['sharpest_prev_ratio']:.4f}"
        keep = f", keeps {info['wpos_avg10_keep']:.0%} under W_pos averaged /10" if "wpos_avg10_keep" in info else ""
        best = f"best induction {info['top_induction'][0]['name']} {info['top_induction'][0]['induction']:.3f}"
        print(f"{label}: sharpest previous-token head {info['sharpest_prev_head']} (ratio {ratio}{keep}); {best}")

    labels = list(tables)
    titles = [f"{m}: {t}" for t, _ in METRICS for m in labels]
    grid = dict(rows=len(METRICS), cols=len(labels), vertical_spacing=0.08, horizontal_spacing=0.05)
    fig = make_subplots(subplot_titles=titles, **grid)
    cell = dict(zmin=0, zmax=1, colorscale="Viridis", colorbar=dict(title="score"))
    cell["hovertemplate"] = "%{text}: %{z:.3f}<extra></extra>"
    for c, label in enumerate(labels, start=1):
        df = tables[label]
        L, H = int(df["layer"].max()) + 1, int(df["head"].max()) + 1
        for r, (key, _) in enumerate(METRICS, start=1):
            vals = np.where(df.is_prev_token, 1 - df.prev_ratio, 0.0) if key == "sharpness" else df[key].to_numpy()
            z, at = np.asarray(vals, dtype=float).reshape(L, H), dict(row=r, col=c)
            fig.add_trace(
                go.Heatmap(z=z, showscale=(r == 1 and c == 1), text=df.name.to_numpy().reshape(L, H), **cell), **at
            )
            layer = "layer" if c == 1 else None
            fig.update_yaxes(autorange="reversed", title_text=layer, dtick=max(1, math.ceil(L / 12)), **at)
            fig.update_xaxes(title_text="head" if r == len(METRICS) else None, dtick=max(1, math.ceil(H / 12)), **at)
    title = "Head atlas<br><sup>1 - ratio for previous-token heads (0 for the others)</sup>"
    fig.update_layout(title=title, height=330 * len(METRICS) + 100)
    out.figure(fig, "mosaic", width=max(500, 380 * len(labels)))
    out.summary(summary)
    out.commit()
