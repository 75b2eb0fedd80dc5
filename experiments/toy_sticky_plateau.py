"""Sparse attention 1 (003): copying the current token with one attention layer (no positions)
gets stuck on a perplexity plateau near V/2; the embeddings branch in two stages; the plateau
disappears with more embedding dimensions and returns with a longer context; effective ranks.

    python experiments/toy_sticky_plateau.py            # 1.1 min on 2 AVX2 cores (AMD EPYC), no bf16 units (--no-png)
    python experiments/toy_sticky_plateau.py --robustness  # + 480 grid runs: under 1 h (C=64 runs: 23 min on 2 cores)
    python experiments/toy_sticky_plateau.py --quick    # smoke test
"""

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpt2_posheads.claims.toy import RULE_BACK, RULE_GONE, RULE_PLATEAU, plateau
from gpt2_posheads.claims.toy import toy_claim as claim
from gpt2_posheads.cli import int_list, main_entry
from gpt2_posheads.report.plotting import line_figure
from gpt2_posheads.toy import ToyConfig, train_sweep
from gpt2_posheads.toy.analysis import pairing, perplexity_curve
from gpt2_posheads.toy.cli import base_config, robustness_section, toy_parser, toy_setup
from gpt2_posheads.toy.posts import plateau_steps, sticky_plateau_grid, v_half


def main(argv=None):
    p = toy_parser(__doc__, steps=5000, quick_steps=300)
    p.add_argument("--vocab", default="4,8,16,32", help="comma-separated vocabulary sizes V")
    args = p.parse_args(argv)
    out, steps, runs = toy_setup(args, __file__)
    vocab = int_list("--vocab", args.vocab, 2)[: 2 if args.quick else None]
    base = base_config(
        args,
        steps,
        log_points=200,
        task="copy_current",
        C=4,
        n_embd=2,
        snapshot_every=max(steps // 100, 1),
    )
    seeds = range(args.seed, args.seed + args.seeds)
    v_cfgs = [ToyConfig(**{**base.__dict__, "V": v, "seed": s}) for v in vocab for s in seeds]
    gen_settings = [(2, 4), (8, 4), (8, 32)] if args.quick else [(2, 4), (4, 4), (8, 4), (8, 16), (8, 64)]
    g_cfgs = [
        ToyConfig(**{**base.__dict__, "V": 16, "n_embd": d, "C": c, "seed": args.seed, "snapshot_every": 0})
        for d, c in gen_settings
    ]
    res = train_sweep(v_cfgs + g_cfgs, runs, workers=args.workers)
    v_res, g_res = res[: len(v_cfgs)], res[len(v_cfgs) :]

    claims, series, Q = [], {}, args.quick
    for r in v_res:
        c = r["config"]
        ppl = perplexity_curve(r)
        found = v_half(r)
        key = f"V={c['V']} seed={c['seed']}"
        series[key] = (r["steps"], ppl)
        claims.append(
            claim(
                f"plateau_near_V/2 ({key})",
                f"a sticky plateau at perplexity V/2 (V={c['V']})",
                c["V"] / 2,
                RULE_PLATEAU,
                {"plateau": found, "final_perplexity": r["final_perplexity"]},
                held=found is not None,
                quick=Q,
            )
        )
    fig = line_figure(
        series, title="perplexity, n_embd=2, C=4 (dotted: V/2)", xlabel="step", ylabel="perplexity", log_y=True
    )
    for v in vocab:
        fig.add_hline(y=v / 2, line_dash="dot", opacity=0.4)
    out.figure(fig, "sticky_plateau")

    # two-stage branching of the V=4 embeddings
    r4 = next((r for r in v_res if r["config"]["V"] == 4), None)
    if r4 and r4["snapshots"]:
        emb = np.array([s["W_E"] for s in r4["snapshots"]])  # [snap, V, 2]
        clusters = [pairing(e) for e in emb]
        fig = make_subplots(
            rows=1,
            cols=2,
            subplot_titles=[
                "token embeddings over training (start: small dot)",
                "direction clusters (cos > 0.95) vs step",
            ],
        )
        for t in range(emb.shape[1]):
            fig.add_trace(
                go.Scatter(
                    x=emb[:, t, 0], y=emb[:, t, 1], mode="lines+markers", name=f"token {t}", marker=dict(size=3)
                ),
                1,
                1,
            )
        fig.add_trace(go.Scatter(x=r4["snapshot_steps"], y=clusters, name="clusters", mode="lines"), 1, 2)
        fig.update_layout(title="V=4: two-stage branching of the embeddings", height=480)
        out.figure(fig, "branching", width=1200)
        pl = plateau(r4["steps"], perplexity_curve(r4))
        mid = (pl["start_step"] + pl["end_step"]) / 2 if pl["start_step"] is not None else None
        at_mid = clusters[int(np.argmin(np.abs(np.array(r4["snapshot_steps"]) - mid)))] if mid else None
        claims.append(
            claim(
                "two_stage_branching (V=4)",
                "tokens split in two groups on the plateau, then all four separate",
                "2 groups of 2, then 4",
                "held if the embeddings form 2 direction clusters (cos > 0.95) mid-plateau and 4 at the end",
                {"clusters_mid_plateau": at_mid, "clusters_end": clusters[-1]},
                held=at_mid == 2 and clusters[-1] == 4,
                quick=Q,
            )
        )
        er = r4["effective_rank"]
        out.figure(
            line_figure(
                {k: (er["step"], er[k]) for k in ("W_E", "W_Q", "W_K")},
                title="V=4: effective rank (exp entropy of normalised singular values)",
                xlabel="step",
                ylabel="effective rank",
            ),
            "effective_rank",
        )
        claims.append(
            claim(
                "rank_dynamics (V=4)",
                "Q/K stay low-rank (sticky) during the plateau and grow after it",
                "sticky Q/K",
                "held if W_Q's effective rank mid-plateau is below its final effective rank",
                {
                    "effective_rank_W_Q_mid_plateau": er["W_Q"][
                        int(np.argmin(np.abs(np.array(er["step"]) - (mid or 0))))
                    ],
                    "effective_rank_W_Q_end": er["W_Q"][-1],
                },
                held=er["W_Q"][int(np.argmin(np.abs(np.array(er["step"]) - (mid or 0))))] < er["W_Q"][-1],
                quick=Q,
            )
        )

    gseries, glens = {}, {}
    for r in g_res:
        c = r["config"]
        gseries[f"n_embd={c['n_embd']} C={c['C']}"] = (r["steps"], perplexity_curve(r))
        glens[(c["n_embd"], c["C"])] = plateau_steps(r)
    out.figure(
        line_figure(
            gseries,
            title="V=16: plateau vs embedding dimension and context length",
            xlabel="step",
            ylabel="perplexity",
            log_y=True,
        ),
        "generality",
    )
    big = max(d for d, _ in gen_settings)
    longest_c = max(c for d, c in gen_settings if d == big)
    claims.append(
        claim(
            "plateau_gone_for_larger_n_embd",
            "the plateau disappears at larger n_embd",
            "no plateau",
            RULE_GONE.format(big=big),
            {f"plateau_steps n_embd={d} C=4": glens[(d, 4)] for d, c in gen_settings if c == 4},
            held=glens[(big, 4)] < glens[(2, 4)],
            quick=Q,
        )
    )
    claims.append(
        claim(
            "plateau_back_for_larger_C",
            "the plateau returns at larger C",
            "plateau returns",
            RULE_BACK.format(big=big, C=longest_c),
            {f"plateau_steps n_embd={big} C={c}": glens[(big, c)] for d, c in gen_settings if d == big},
            held=glens[(big, longest_c)] > glens[(big, 4)],
            quick=Q,
        )
    )
    robust = robustness_section(out, sticky_plateau_grid(), base, args, runs, "003: sticky plateau")
    out.summary(
        {"steps": steps, "init_std": args.init_std, "lr": args.lr, **({"robustness": robust} if robust else {})}, claims
    )
    out.commit()


if __name__ == "__main__":
    main_entry(main)
