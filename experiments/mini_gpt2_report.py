"""One page on what the trained mini GPT-2 shows, next to the GPT-2 post's claims.

    python experiments/mini_gpt2_report.py --model-dir data/mini-gpt2

Previous-token heads (ratio of the best head), induction heads (TransformerLens's head detector on
repeated random sequences), whether averaging W_pos in groups of 10 leaves the previous-token heads
intact, and whether early heads suppress self-attention. Writes report.html (figures + table) and
summary.json.
"""
import html
import random

import pandas as pd
import plotly.express as px
import torch

from gpt2_posheads.cli import (Output, add_prompt_args, corpus_prompts, experiment_parser, model_from_args,
                               model_label)
from gpt2_posheads.diagonals import diagonal_attention, rank_from_diagonals
from gpt2_posheads.geometry import pca, principal_angles
from gpt2_posheads.interventions import average_pos_embed
from gpt2_posheads.plotting import heatmap, heatmap_grid, scatter3d_positions
from gpt2_posheads.posembed import extended_pos_embeddings_by_layer
from gpt2_posheads.scores import attention_scores, classify_prev_heads, score_profile


def induction_scores(model, n_tokens: int = 40, n_seqs: int = 4, seed: int = 0) -> torch.Tensor:
    """TransformerLens's ``detect_head(..., "induction_head")`` on strings of random words repeated twice."""
    from transformer_lens.head_detector import detect_head

    rng = random.Random(seed)
    vocab = [t for t in model.tokenizer.get_vocab() if t.startswith("Ġ") and t[1:].isalpha() and len(t) > 3]
    seqs = []
    for _ in range(n_seqs):
        words = " ".join(model.tokenizer.convert_tokens_to_string([w]).strip() for w in rng.sample(vocab, n_tokens))
        seqs.append(f"{words} {words}")
    with torch.inference_mode():
        return detect_head(model, seqs, "induction_head")


def main(argv=None):
    p = experiment_parser(__doc__)
    add_prompt_args(p, n_prompts=16, seq_len=256)
    args = p.parse_args(argv)
    out = Output.from_args(args, __file__)
    model = model_from_args(args)
    prompts, source = corpus_prompts(model, args)
    L, H = model.cfg.n_layers, model.cfg.n_heads

    diag = diagonal_attention(model, prompts, max_offset=32)
    rank = rank_from_diagonals(diag)
    best = rank.iloc[0]
    top = [(int(r.layer), int(r.head)) for r in rank.head(3).itertuples()]
    avg = diagonal_attention(model, prompts, max_offset=32, fwd_hooks=average_pos_embed(10).hooks(model), progress=False)
    keep = {f"L{l}H{h}": (float(diag[l, h, 1]), float(avg[l, h, 1])) for l, h in top}
    ind = induction_scores(model, seed=args.seed)
    il, ih = divmod(int(ind.flatten().argmax()), H)
    cls = classify_prev_heads(score_profile(model, prompts))
    early = cls[(cls.layer < max(1, L // 2 + 1)) & cls.name.isin(rank[rank.is_prev_token].name)]
    ext = extended_pos_embeddings_by_layer(model, [0, min(2, L)], seed=args.seed)
    ang = principal_angles(ext[0], ext[min(2, L)]).tolist()

    rows = [
        ("a head attends almost only to the previous token", "L4H11, ratio 0.01",
         f"{best['name']}, ratio {best['ratio']:.2f}", bool(best.is_prev_token and best.ratio < 0.2)),
        ("about half the heads have the previous diagonal greatest", "69 of 144",
         f"{int(rank.is_prev_token.sum())} of {len(rank)}", abs(rank.is_prev_token.mean() - 69 / 144) < 0.15),
        ("induction heads exist", "yes (L5H1, L6H9, ... in GPT-2)",
         f"best L{il}H{ih}, score {float(ind.max()):.2f}", float(ind.max()) > 0.3),
        ("averaging W_pos in groups of 10 leaves previous-token heads intact", "L2H2, L3H3, L4H11 unaffected",
         "; ".join(f"{k}: {a:.3f} → {b:.3f}" for k, (a, b) in keep.items()),
         all(b > 0.8 * a for a, b in keep.values())),
        ("early previous-token heads suppress self-attention", "six of them (dark main diagonal)",
         f"{int((early.label == 'self_suppressing').sum())} of {len(early)} early previous-token heads",
         bool((early.label == "self_suppressing").any())),
        ("extended embeddings at layer 2 span nearly W_pos's top-3 subspace", "8°, 9°, 10°",
         ", ".join(f"{a:.0f}°" for a in ang), max(ang) < 15),
    ]
    table = pd.DataFrame(rows, columns=["claim", "GPT-2 post", model_label(args), "agrees"])
    print(table.to_string(index=False))

    ratio = torch.full((L, H), float("nan"))
    for r in rank.itertuples():
        ratio[r.layer, r.head] = r.ratio if r.is_prev_token else float("nan")
    figs = {
        "ranking": heatmap(ratio, xlabel="head", ylabel="layer", colorscale="Viridis_r",
                           title="second/greatest diagonal mass of previous-token heads"),
        "induction": heatmap(ind, xlabel="head", ylabel="layer", title="induction score (TransformerLens head detector)"),
        "raw_scores": heatmap_grid({f"L{l}H{h}": attention_scores(model, prompts[0], l, h)["raw"][40:90, 40:90]
                                    for l, h in top}, cols=3, colorscale="Greys_r", shared_scale=False, x0=40, y0=40,
                                   title="raw scores of the top previous-token heads (positions 40-89)"),
        "taxonomy": px.scatter(cls, x="dip", y="peak", color="label", text="name", title="score-profile taxonomy"),
        "helix": scatter3d_positions({"layer 2": pca(ext[min(2, L)], 3)[2]}, title="extended positional embeddings, layer 2"),
    }
    parts = [f"<h1>{html.escape(model_label(args))}: previous-token heads and positions</h1>",
             f"<p>{len(prompts)} prompts x {prompts.shape[1]} tokens from {html.escape(source)}.</p>",
             table.to_html(index=False, escape=True)]
    for i, (name, fig) in enumerate(figs.items()):
        parts.append(fig.to_html(full_html=False, include_plotlyjs=(i == 0)))
        out.figure(fig, name)
    page = out.out_dir / "report.html"
    page.write_text("<html><head><meta charset='utf-8'><title>mini GPT-2 report</title></head><body>"
                    + "\n".join(parts) + "</body></html>")
    out.written.append(page)
    out.csv(table, "claims")
    out.summary({"model": model_label(args), "prompt_source": source, "claims": table, "ranking_top10": rank.head(10),
                 "induction_best": {"head": f"L{il}H{ih}", "score": float(ind.max())}})
    out.report()


if __name__ == "__main__":
    main()
