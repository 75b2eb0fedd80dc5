"""Rank every head by how previous-token-like it is (GPT-2 post: "a taxonomy of previous-token heads").

    python experiments/rank_prev_heads.py                       # GPT-2 small from the hub
    python experiments/rank_prev_heads.py --model-dir data/mini-gpt2

Writes ranking.csv, summary.json, diagonal masses (heads x offsets) and a layer x head grid of ratios.
"""
import numpy as np
import plotly.graph_objects as go

from gpt2_posheads.claims.gpt2_post import judge_claim
from gpt2_posheads.cli.common import (Output, experiment_parser, is_gpt2_small, main_entry, model_from_args, model_label,
                               positive, postcheck, precheck)
from gpt2_posheads.analysis.diagonals import count_prev_heads, diagonal_attention, rank_from_diagonals
from gpt2_posheads.model.fastpath import ENGINES
from gpt2_posheads.report.plotting import heatmap
from gpt2_posheads.analysis.prompts import documents, make_prompts

SEED_TOP = {"L4H11": 0.01, "L5H6": 0.18, "L3H3": 0.33, "L2H2": 0.33, "L6H8": 0.43, "L7H0": 0.45,
            "L2H4": 0.46, "L1H0": 0.47, "L3H7": 0.50, "L8H7": 0.51, "L3H2": 0.52}


def main(argv=None):
    p = experiment_parser(__doc__)
    p.add_argument("--n-prompts", type=int, default=64, help="natural-text prompts")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per prompt, BOS included (capped at n_ctx)")
    p.add_argument("--prompts", default="auto", help="auto | openwebtext | wikitext | path to .txt/.jsonl")
    p.add_argument("--max-offset", type=int, default=None, help="largest diagonal offset (default: seq_len-1)")
    p.add_argument("--include-bos", action="store_true", help="count attention to key 0 in the diagonals")
    p.add_argument("--batch-size", type=int, default=8, help="prompts per forward pass")
    p.add_argument("--top", type=int, default=15, help="rows of the ranking to print")
    p.add_argument("--bf16", action="store_true",
                   help="bfloat16 matmuls (softmax, LayerNorm, residual in float32): ~3x faster on CPUs with "
                        "AMX/AVX512-BF16, diagonal masses within ~1e-3")
    p.add_argument("--engine", default="auto", choices=ENGINES,
                   help="auto: hook-free fast path when it reproduces the model (checked), else TransformerLens hooks")
    args = p.parse_args(argv)
    precheck(args)
    positive("--batch-size", args.batch_size)
    positive("--top", args.top)
    positive("--max-offset", args.max_offset)
    out = Output.from_args(args, __file__)
    model = model_from_args(args)
    postcheck(args, model)
    seq_len = min(args.seq_len, model.cfg.n_ctx)
    if args.max_offset is not None and args.max_offset >= seq_len:
        from gpt2_posheads.model.validation import UsageError
        raise UsageError("--max-offset", f"{args.max_offset} is out of range", f"allowed 1..{seq_len - 1} (seq_len - 1)")
    docs, source = documents(args.prompts)
    prompts = make_prompts(model.tokenizer, args.n_prompts, seq_len, seed=args.seed, docs=docs)
    print(f"{model_label(args)}: {args.n_prompts} prompts x {seq_len} tokens from {source}")

    diag = diagonal_attention(model, prompts, max_offset=args.max_offset, exclude_bos=not args.include_bos,
                              batch_size=args.batch_size, bf16=args.bf16, engine=args.engine)
    df = rank_from_diagonals(diag)
    n_prev = count_prev_heads(df)
    n_heads = len(df)
    print(df.head(args.top)[["rank", "name", "top_offset", "top_mass", "second_mass", "ratio"]]
          .to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"\n{n_prev} of {n_heads} heads have the previous-token diagonal greatest (GPT-2 post: 69 of 144)")

    out.csv(df, "ranking")
    L, H = model.cfg.n_layers, model.cfg.n_heads
    ratio_grid = np.full((L, H), np.nan)
    for r in df.itertuples():
        ratio_grid[r.layer, r.head] = r.ratio if r.is_prev_token else np.nan
    fig = heatmap(ratio_grid, x=list(range(H)), y=list(range(L)), colorscale="Viridis_r", xlabel="head", ylabel="layer",
                  title=f"{model_label(args)}: second / greatest diagonal mass, previous-token heads only "
                        f"(lower = cleaner; blank = not a previous-token head)",
                  text=[[f"L{l}H{h}" for h in range(H)] for l in range(L)], hovertemplate="%{text}: %{z:.3f}",
                  zmin=0, zmax=1, colorbar=dict(title="ratio"))
    out.figure(fig, "ratio_grid")
    n_show = min(diag.shape[-1], 16)
    order = df["name"].tolist()
    z = np.stack([diag[r.layer, r.head, :n_show].numpy() for r in df.itertuples()])
    fig2 = go.Figure(go.Heatmap(z=z, x=list(range(n_show)), y=order, colorscale="Viridis", zmin=0, zmax=1,
                                colorbar=dict(title="mean attention")))
    fig2.update_layout(title=f"{model_label(args)}: mean attention per diagonal (heads in ranking order)",
                       xaxis_title="offset q - k (1 = previous token)", yaxis_title="head",
                       height=max(500, 12 * len(order)))
    fig2.update_xaxes(dtick=1)
    fig2.update_yaxes(autorange="reversed")
    out.figure(fig2, "diagonal_masses", height=max(500, 12 * len(order)))

    top = df.head(11)
    gpt2 = is_gpt2_small(model)
    prev = df[df.is_prev_token]
    ratios = prev.ratio.tolist()
    claims = [
        judge_claim("sharp_prev_head", {"head": prev.name.iloc[0] if len(prev) else None,
                                        "ratio": ratios[0] if ratios else None},
                    value=ratios[0] if ratios else float("nan")),
        judge_claim("sharpest_stands_alone", {"ratios": ratios[:2]},
                    value=(ratios[1], ratios[0]) if len(ratios) >= 2 else (float("nan"), float("nan"))),
        judge_claim("half_prev_heads", {"n_prev": n_prev, "n_heads": n_heads}, value=n_prev / n_heads),
    ]
    out.summary({
        "model": model_label(args), "prompt_source": source, "n_prompts": args.n_prompts, "seq_len": seq_len,
        "exclude_bos": not args.include_bos, "bf16": args.bf16, "max_offset": int(diag.shape[-1] - 1), "seed": args.seed,
        "n_heads": n_heads, "n_prev_token_heads": n_prev, "seed_post_n_prev_token_heads": 69,
        "is_gpt2_small": gpt2,
        # the post's per-head ratios belong to GPT-2 small's heads only, never to another model's head of that name
        "top": [{"name": r.name, "ratio": r.ratio, "top_offset": r.top_offset,
                 **({"seed_post_ratio": SEED_TOP.get(r.name)} if gpt2 else {})} for r in top.itertuples()],
    }, claims)
    out.report()
    return df


if __name__ == "__main__":
    main_entry(main)
