"""Sparse attention 1 (003): copying the current token with one attention layer (no positions)
gets stuck on a perplexity plateau near V/2; the embeddings branch in two stages; the plateau
disappears with more embedding dimensions and returns with a longer context; effective ranks.
The comparisons (plateau lengths, ranks) are judged on 3 seeds per setting.

    gpt2-posheads toy_sticky_plateau            # times: docs/posts/003-sticky-plateau.md
    gpt2-posheads toy_sticky_plateau --robustness  # + 480 grid runs: under 1 h (C=64 runs: 23 min on 2 cores)
    gpt2-posheads toy_sticky_plateau --quick    # smoke test
"""

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gpt2_posheads.claims.toy import (
    COMPARE_SEEDS,
    RULE_BACK,
    RULE_BRANCHING,
    RULE_GONE,
    RULE_PLATEAU,
    RULE_RANK,
    branching,
    num,
    nums,
    plateau,
    plateau_at_half,
    plateau_back,
    plateau_gone,
    plateau_shown,
    rank_rises,
    spread,
)
from gpt2_posheads.claims.toy import toy_claim as claim
from gpt2_posheads.cli import int_list
from gpt2_posheads.toy import ToyConfig, train_sweep
from gpt2_posheads.toy.analysis import pairing, perplexity_curve
from gpt2_posheads.toy.cli import base_config, robustness_section, toy_parser, toy_setup
from gpt2_posheads.toy.figures import COLOURS, band, log_axis, perplexity_by_vocab
from gpt2_posheads.toy.posts import plateau_steps, sticky_plateau_grid, v_half


def nearest(steps, at) -> int:
    return int(np.argmin(np.abs(np.asarray(steps) - at)))


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
    seeds = list(range(args.seed, args.seed + args.seeds))
    n_cmp = max(args.seeds, 2 if args.quick else COMPARE_SEEDS)  # seeds per side of a comparison
    cmp_seeds = list(range(args.seed, args.seed + n_cmp))
    gen_settings = [(2, 4), (8, 4), (8, 32)] if args.quick else [(2, 4), (4, 4), (8, 4), (8, 16), (8, 64)]
    print(
        f"toy_sticky_plateau: V {', '.join(map(str, vocab))} ({len(seeds)} seed(s)), V=4 and "
        f"{len(gen_settings)} (n_embd, C) settings at V=16 ({n_cmp} seeds each), {steps:,} steps",
        flush=True,
    )
    v_cfgs = [ToyConfig(**{**base.__dict__, "V": v, "seed": s}) for v in vocab for s in seeds]
    v_cfgs += [ToyConfig(**{**base.__dict__, "V": 4, "seed": s}) for s in cmp_seeds if s not in seeds and 4 in vocab]
    g_cfgs = [
        ToyConfig(**{**base.__dict__, "V": 16, "n_embd": d, "C": c, "seed": s, "snapshot_every": 0})
        for d, c in gen_settings
        for s in cmp_seeds
    ]
    res = train_sweep(v_cfgs + g_cfgs, runs, workers=args.workers)
    v_res, g_res = res[: len(v_cfgs)], res[len(v_cfgs) :]

    claims, Q = [], args.quick
    curves = [r for r in v_res if r["config"]["seed"] in seeds]
    for r in curves:
        c = r["config"]
        ppl = perplexity_curve(r)
        seed_words = f" (seed {c['seed']})" if len(seeds) > 1 else ""
        claims.append(
            claim(
                f"plateau_near_V/2 (V={c['V']} seed={c['seed']})",
                f"V = {c['V']}{seed_words}: a sticky plateau at perplexity V/2",
                f"perplexity V/2 = {c['V'] / 2:g}",
                RULE_PLATEAU,
                {"plateau": v_half(r), "final_perplexity": r["final_perplexity"]},
                plateau_at_half(r["steps"], ppl, c["V"]),
                quick=Q,
                shown=plateau_shown(r["steps"], ppl, c["V"]),
            )
        )
    fig = perplexity_by_vocab(curves, vocab, "copying the current token, n_embd=2, C=4")
    out.figure(fig, "sticky_plateau")

    # two-stage branching of the V=4 embeddings, effective ranks over seeds
    r4s = [r for r in v_res if r["config"]["V"] == 4]
    r4 = next((r for r in r4s if r["config"]["seed"] == args.seed), None)
    if r4 and r4["snapshots"]:
        emb = np.array([s["W_E"] for s in r4["snapshots"]])  # [snap, V, 2]
        clusters = [pairing(e) for e in emb]
        fig = make_subplots(
            rows=1,
            cols=2,
            subplot_titles=["token embeddings over training (start: small dot)", "direction clusters (cos > 0.95)"],
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
        pl = plateau(r4["steps"], perplexity_curve(r4))
        mid = (pl["start_step"] + pl["end_step"]) / 2 if pl["start_step"] is not None else None
        if mid is not None:
            fig.add_vrect(
                x0=pl["start_step"], x1=pl["end_step"], fillcolor="grey", opacity=0.15, line_width=0, row=1, col=2
            )
        fig.update_xaxes(title_text="embedding dimension 1", row=1, col=1)
        fig.update_yaxes(title_text="embedding dimension 2", row=1, col=1)
        fig.update_xaxes(title_text="step (grey: the plateau)", row=1, col=2)
        fig.update_yaxes(title_text="number of clusters", dtick=1, tick0=0, range=[0, 4.5], row=1, col=2)
        fig.update_layout(title=f"V=4, seed {args.seed}: two-stage branching of the embeddings", height=480)
        out.figure(fig, "branching", width=1200)
        at_mid = clusters[nearest(r4["snapshot_steps"], mid)] if mid is not None else None
        mid_step = r4["snapshot_steps"][nearest(r4["snapshot_steps"], mid)] if mid is not None else None
        end_step = r4["snapshot_steps"][-1]
        claims.append(
            claim(
                "two_stage_branching (V=4)",
                f"V = 4 (seed {args.seed}): tokens split in two groups on the plateau, then all four separate",
                "2 groups of 2, then 4",
                RULE_BRANCHING,
                {"clusters_mid_plateau": at_mid, "step_mid_plateau": mid_step, "clusters_end": clusters[-1]},
                branching(at_mid, clusters[-1], mid_step, end_step),
                quick=Q,
                shown=f"{at_mid} clusters at step {mid_step} (mid-plateau), {clusters[-1]} at step {end_step}"
                if at_mid is not None
                else "no plateau",
            )
        )
        mids, ends, er_runs, no_plateau = [], [], [], []
        for r in r4s:
            er = r["effective_rank"]
            er_runs.append(er)
            pl_r = plateau(r["steps"], perplexity_curve(r))
            if pl_r["start_step"] is None:
                no_plateau.append(r["config"]["seed"])
                continue
            mids.append(er["W_Q"][nearest(er["step"], (pl_r["start_step"] + pl_r["end_step"]) / 2)])
            ends.append(er["W_Q"][-1])
        fig = go.Figure()
        for i, name in enumerate(("W_E", "W_Q", "W_K")):
            band(fig, er_runs[0]["step"], [e[name] for e in er_runs], name, COLOURS[i])
        fig.update_layout(
            title="V=4: effective rank (exp entropy of the normalised singular values)",
            xaxis_title="step",
            yaxis_title="effective rank (1 to 2)",
        )
        out.figure(fig, "effective_rank")
        if len(mids) >= 2:
            decided = rank_rises(mids, ends)
        else:
            decided = (None, f"not testable here: fewer than 2 seeds have a plateau (none in seeds {no_plateau})")
        claims.append(
            claim(
                "rank_dynamics (V=4)",
                f"V = 4 ({len(r4s)} seeds): Q/K stay low-rank (sticky) during the plateau and grow after it",
                "sticky Q/K",
                RULE_RANK,
                {
                    "effective_rank_W_Q_mid_plateau": mids,
                    "effective_rank_W_Q_end": ends,
                    "seeds_without_plateau": no_plateau,
                },
                decided,
                quick=Q,
                shown=f"W_Q effective rank {num(spread(mids)[0])} mid-plateau vs {num(spread(ends)[0])} at the end "
                f"(mean of {len(mids)} seeds)"
                if mids
                else "no plateau",
            )
        )

    by_setting: dict[tuple[int, int], list[dict]] = {}
    for r in g_res:
        by_setting.setdefault((r["config"]["n_embd"], r["config"]["C"]), []).append(r)
    glens = {k: [plateau_steps(r) for r in rs] for k, rs in by_setting.items()}
    fig = go.Figure()
    for i, ((d, c), rs) in enumerate(by_setting.items()):
        band(fig, rs[0]["steps"], [perplexity_curve(r) for r in rs], f"n_embd={d}, C={c}", COLOURS[i % len(COLOURS)])
    fig.update_layout(
        title="V=16: the plateau against embedding dimension and context length",
        xaxis_title="step",
        yaxis_title="perplexity (eval)",
    )
    log_axis(fig, "y", [1, 16])
    out.figure(fig, "generality")
    big = max(d for d, _ in gen_settings)
    longest_c = max(c for d, c in gen_settings if d == big)

    def lens(d, c):
        return f"{num(spread(glens[(d, c)])[0])} steps at n_embd={d}, C={c}"

    claims.append(
        claim(
            "plateau_gone_for_larger_n_embd",
            f"V = 16, C = 4 ({n_cmp} seeds): the plateau disappears at n_embd {big} (vs 2)",
            "no plateau",
            RULE_GONE.format(big=big),
            {f"plateau_steps n_embd={d} C=4": glens[(d, 4)] for d, c in gen_settings if c == 4},
            plateau_gone(glens[(2, 4)], glens[(big, 4)], big, base.log_every),
            quick=Q,
            shown=f"longest plateau {lens(big, 4)} vs {lens(2, 4)} (mean of {n_cmp} seeds)",
        )
    )
    claims.append(
        claim(
            "plateau_back_for_larger_C",
            f"V = 16, n_embd = {big} ({n_cmp} seeds): the plateau returns at C = {longest_c} (vs 4)",
            "plateau returns",
            RULE_BACK.format(big=big, C=longest_c),
            {f"plateau_steps n_embd={big} C={c}": glens[(big, c)] for d, c in gen_settings if d == big},
            plateau_back(glens[(big, 4)], glens[(big, longest_c)], longest_c, base.log_every),
            quick=Q,
            shown=f"longest plateau {lens(big, longest_c)} vs {lens(big, 4)} (mean of {n_cmp} seeds; each seed: "
            f"{nums(glens[(big, longest_c)])} vs {nums(glens[(big, 4)])})",
        )
    )
    robust = robustness_section(out, sticky_plateau_grid(), base, args, runs, "003: sticky plateau")
    out.summary(
        {
            "steps": steps,
            "init_std": args.init_std,
            "lr": args.lr,
            "seeds": seeds,
            "comparison_seeds": cmp_seeds,
            **({"robustness": robust} if robust else {}),
        },
        claims,
    )
    out.commit()
