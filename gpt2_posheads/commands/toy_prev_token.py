"""Sparse attention 4 (000): a previous-token head from positional embeddings.

V 30, C 4, n_embd 2: copying the previous token fails without positional embeddings and is learned
with them; the previous position separates from the others along a direction s, and
s^T W_Q W_K^T s < 0 (post: -1.1); relative perplexity (ppl-1)/V grows with V and C and falls with
n_embd; lr 0.1 beats 0.01 at V 30 but not at V 100, where loss spikes come with token-order swaps
(animation of the embeddings).

    gpt2-posheads toy_prev_token               # the default run (times: docs/posts/000-previous-token-head.md)
    gpt2-posheads toy_prev_token --robustness  # + 720 grid runs: ~30 min on one such core
    gpt2-posheads toy_prev_token --quick
"""

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from gpt2_posheads.claims.toy import (
    COMPARE_SEEDS,
    RULE_FAILS,
    RULE_LEARNED,
    RULE_LR,
    RULE_MONO,
    RULE_SEPARATION,
    RULE_SIGN,
    RULE_SPIKES,
    fails,
    learned,
    lr_compare,
    num,
    nums,
    rel_ppl_floor,
    rel_ppl_trend,
    separated,
    sign_negative,
    spikes_and_swaps,
    spread,
)
from gpt2_posheads.claims.toy import toy_claim as claim
from gpt2_posheads.toy import ToyConfig, relative_perplexity, separation_direction, train_sweep, wq_wk
from gpt2_posheads.toy.analysis import loss_spikes, order_swaps, perplexity_curve
from gpt2_posheads.toy.cli import base_config, robustness_section, toy_parser, toy_setup
from gpt2_posheads.toy.figures import COLOURS, band, log_axis, points_with_sd
from gpt2_posheads.toy.metrics import bilinear
from gpt2_posheads.toy.posts import prev_token_grid


def embedding_animation(result, title):
    """Token embeddings over training: each token's path (static, so the PNG shows the whole trajectory)
    with its final position labelled; the HTML's play button animates the markers frame by frame."""
    snaps = result["snapshots"]
    traj = np.array([s["W_E"] for s in snaps])  # [snapshot, V, 2]
    n_tok = traj.shape[1]
    paths = [
        go.Scatter(
            x=traj[:, t, 0],
            y=traj[:, t, 1],
            mode="lines",
            line=dict(width=1),
            opacity=0.5,
            showlegend=False,
            hoverinfo="skip",
        )
        for t in range(n_tok)
    ]

    def markers(e):
        return go.Scatter(
            x=e[:, 0],
            y=e[:, 1],
            mode="markers+text",
            text=[str(i) for i in range(n_tok)],
            textposition="top center",
            marker=dict(size=7, color="black"),
            name="tokens",
        )

    frames = [
        go.Frame(data=[markers(traj[i])], traces=[n_tok], name=str(st)) for i, st in enumerate(result["snapshot_steps"])
    ]
    lim = float(np.abs(traj).max()) * 1.1
    last = result["snapshot_steps"][-1]
    fig = go.Figure(data=paths + [markers(traj[-1])], frames=frames)
    fig.update_layout(
        # the figure opens on the last frame (the PNG shows it), so the slider starts there too
        title=f"{title}<br><sup>lines: each token's path from step 1; dots: positions at step {last:,} "
        "(play: the whole run)</sup>",
        xaxis=dict(range=[-lim, lim], title="dimension 1"),
        yaxis=dict(range=[-lim, lim], title="dimension 2", scaleanchor="x"),
        height=650,
        width=700,
        updatemenus=[
            dict(
                type="buttons", buttons=[dict(label="play", method="animate", args=[None, {"frame": {"duration": 60}}])]
            )
        ],
        sliders=[
            dict(
                steps=[dict(method="animate", args=[[f.name], {"mode": "immediate"}], label=f.name) for f in frames],
                active=len(frames) - 1,
                currentvalue=dict(prefix="step "),
            )
        ],
    )
    return fig


def main(argv=None):
    p = toy_parser(__doc__, steps=5000, quick_steps=300)
    p.add_argument(
        "--lr-steps", type=int, default=None, help="steps of the learning-rate comparison (default 2x --steps)"
    )
    args = p.parse_args(argv)
    out, steps, runs = toy_setup(args, __file__)
    q = args.quick
    base = base_config(args, steps, task="copy_offset", k=1, V=30, C=4, n_embd=2, pos_emb=True, seed=args.seed)
    cmp_seeds = list(range(args.seed, args.seed + max(args.seeds, 2 if q else COMPARE_SEEDS)))
    mk = lambda **kw: ToyConfig(**{**base.__dict__, **kw})  # noqa: E731
    with_pos = mk(snapshot_every=max(steps // 100, 1))
    no_pos = mk(pos_emb=False)
    sweep_values = {
        "V": [10, 30] if q else [10, 30, 100],
        "C": [3, 4] if q else [3, 4, 8],
        "n_embd": [2, 4] if q else [2, 4, 8],
    }
    sweep = {name: [[mk(**{name: x}, seed=s) for s in cmp_seeds] for x in xs] for name, xs in sweep_values.items()}
    lr_steps = args.lr_steps or (steps if q else 2 * steps)
    lr_cfgs = {
        (v, lr): [
            mk(
                V=v,
                lr=lr,
                seed=s,
                steps=lr_steps,
                log_every=max(lr_steps // 200, 1),
                snapshot_every=max(lr_steps // 100, 1),
            )
            for s in cmp_seeds
        ]
        for v in (30, 100)
        for lr in (0.1, 0.01)
    }
    flat = [with_pos, no_pos] + [c for g in sweep.values() for row in g for c in row]
    flat += [c for row in lr_cfgs.values() for c in row]
    print(
        f"toy_prev_token: {len({c.id() for c in flat})} models: with and without positions ({steps:,} steps), the "
        f"V, C and n_embd sweeps ({len(cmp_seeds)} seeds each, {steps:,} steps) and lr 0.1 vs 0.01 at V 30 and "
        f"100 ({len(cmp_seeds)} seeds each, {lr_steps:,} steps)",
        flush=True,
    )
    res = dict(zip([c.id() for c in flat], train_sweep(flat, runs, workers=args.workers)))
    R = lambda c: res[c.id()]  # noqa: E731
    claims = []
    Q = args.quick

    rp, rn = R(with_pos), R(no_pos)
    W_pos = torch.tensor(rp["params"]["W_pos"])
    s = separation_direction(W_pos, 1)
    M = wq_wk(torch.tensor(rp["params"]["0.W_Q"])[0], torch.tensor(rp["params"]["0.W_K"])[0])
    proj = (W_pos.double() @ s.double()).tolist()  # positions 0..C-1; the previous token is C-2
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=["perplexity", "positional embeddings over training", "projection on s"],
        horizontal_spacing=0.09,
    )
    fig.add_trace(go.Scatter(x=rn["steps"], y=perplexity_curve(rn), name="no positional embedding"), 1, 1)
    fig.add_trace(go.Scatter(x=rp["steps"], y=perplexity_curve(rp), name="with positional embedding"), 1, 1)
    traj = np.array([sn["W_pos"] for sn in rp["snapshots"]])
    for i in range(base.C):
        fig.add_trace(go.Scatter(x=traj[:, i, 0], y=traj[:, i, 1], mode="lines", name=f"p_{i - base.C + 1}"), 1, 2)
    fig.add_trace(
        go.Scatter(x=[0, float(s[0])], y=[0, float(s[1])], mode="lines+markers", name="s", line=dict(color="black")),
        1,
        2,
    )
    fig.add_trace(go.Bar(x=[f"p_{i - base.C + 1}" for i in range(base.C)], y=proj, name="p·s"), 1, 3)
    log_axis(fig, "y", [1, base.V], row=1, col=1)
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_yaxes(title_text="perplexity (eval)", row=1, col=1)
    fig.update_xaxes(title_text="dimension 1", row=1, col=2)
    fig.update_yaxes(title_text="dimension 2", row=1, col=2)
    fig.update_xaxes(title_text="position (0: the current token)", row=1, col=3)
    fig.update_yaxes(title_text="projection p·s", row=1, col=3)
    fig.update_layout(title=f"V=30, C=4, n_embd=2, seed {args.seed}: copying the previous token", height=450)
    out.figure(fig, "positional_embeddings", width=1500)
    rel_with, rel_without = (relative_perplexity(r["final_loss"], base.V) for r in (rp, rn))
    one = f"V = 30, C = 4, n_embd = 2 (seed {args.seed})"
    claims.append(
        claim(
            "learned_with_pos_emb",
            f"{one}: the task can be reasonably learned with positional embeddings",
            "learned (plot: perplexity near 1)",
            RULE_LEARNED,
            {"final_ppl": rp["final_perplexity"], "relative": rel_with},
            learned(rp["final_perplexity"], base.V),
            quick=Q,
            shown=f"final perplexity {num(rp['final_perplexity'], 4)}",
        )
    )
    claims.append(
        claim(
            "fails_without_pos_emb",
            f"{one}: it cannot be learned without positional embeddings",
            "not learned",
            RULE_FAILS,
            {"final_ppl": rn["final_perplexity"], "relative": rel_without},
            fails(rn["final_perplexity"], base.V),
            quick=Q,
            shown=f"relative perplexity {num(rel_without, 2)} (final perplexity {num(rn['final_perplexity'])})",
        )
    )
    ok, why = learned(rp["final_perplexity"], base.V)
    learned_ok = (ok, f"the model with positional embeddings did not learn the task ({why})")
    claims.append(
        claim(
            "separation_direction",
            f"{one}: p_-1 lies on one side of a direction s, p_0, p_-2, p_-3 on the other",
            "s ~ (1, 1)",
            RULE_SEPARATION,
            {"s": s.tolist(), "projections p_-3..p_0": proj},
            separated(proj, base.C - 2),
            quick=Q,
            precondition=learned_ok,
            shown=f"p_-1·s {num(proj[base.C - 2], 2)}; others "
            + ", ".join(num(x, 2) for i, x in enumerate(proj) if i != base.C - 2)
            + f" (s = ({num(float(s[0]), 2)}, {num(float(s[1]), 2)}))",
        )
    )
    claims.append(
        claim(
            "sT_WQWKT_s_negative",
            f"{one}: s^T W_Q W_K^T s < 0",
            -1.1,
            RULE_SIGN,
            {"W_Q W_K^T": M.tolist(), "s^T W_Q W_K^T s": bilinear(s, M)},
            sign_negative(bilinear(s, M)),
            quick=Q,
            precondition=learned_ok,
            shown=f"s^T W_Q W_K^T s = {num(bilinear(s, M))}",
        )
    )

    hyper = {}
    fig = make_subplots(rows=1, cols=3, subplot_titles=["vs V", "vs C", "vs n_embd"], horizontal_spacing=0.08)
    for col, (name, rows) in enumerate(sweep.items(), start=1):
        xs = sweep_values[name]
        ys = [[relative_perplexity(R(c)["final_loss"], c.V) for c in row] for row in rows]  # [x, seed]
        hyper[name] = {"x": xs, "seeds": cmp_seeds, "relative_perplexity": ys, "V": [row[0].V for row in rows]}
        fig.add_trace(points_with_sd(xs, list(zip(*ys)), f"(ppl-1)/V vs {name}", COLOURS[col - 1]), 1, col)
        floors = [rel_ppl_floor(row[0].V) for row in rows]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=floors,
                mode="lines",
                line=dict(color="grey", dash="dot"),
                name="the floor (one eval sequence at chance)",
                showlegend=col == 1,
            ),
            1,
            col,
        )
        lows = [max(min(spread(y)[0] - spread(y)[1], min(y)), 1e-12) for y in ys]
        log_axis(fig, "y", [*lows, *[max(y) for y in ys], *floors], row=1, col=col)
        fig.update_xaxes(title_text=name, type="log" if name != "C" else None, row=1, col=col)
        fig.update_xaxes(tickvals=xs, ticktext=[str(x) for x in xs], row=1, col=col)
        fig.update_yaxes(title_text="relative perplexity (ppl-1)/V", row=1, col=col)
    fig.update_layout(
        title=f"relative perplexity (ppl - 1) / V, mean ± sd of {len(cmp_seeds)} seeds (dotted: the floor)",
        height=450,
    )
    out.figure(fig, "hyperparameters", width=1400)
    for name, up in (("V", True), ("C", True), ("n_embd", False)):
        h = hyper[name]
        claims.append(
            claim(
                f"rel_ppl_{'up' if up else 'down'}_with_{name}",
                f"{name} = {', '.join(map(str, h['x']))} ("
                + ", ".join(f"{k} = {x}" for k, x in (("V", 30), ("C", 4), ("n_embd", 2)) if k != name)
                + f"; {len(cmp_seeds)} seeds): relative perplexity {'rises' if up else 'falls'} with {name}",
                "increases" if up else "decreases",
                RULE_MONO.format(verb="rises" if up else "falls", name=name),
                h,
                rel_ppl_trend(h["relative_perplexity"], h["x"], up, name, h["V"]),
                quick=Q,
                shown=f"(ppl-1)/V {nums(spread(y)[0] for y in h['relative_perplexity'])} at {name} = "
                f"{', '.join(map(str, h['x']))} (floor {nums(dict.fromkeys(rel_ppl_floor(v) for v in h['V']), 2)})",
            )
        )

    lr_stats = {}
    fig = go.Figure()
    for i, ((v, lr), cfgs) in enumerate(lr_cfgs.items()):
        rs = [R(c) for c in cfgs]
        band(fig, rs[0]["steps"], [r["eval_loss"] for r in rs], f"V={v} lr={lr}", COLOURS[i])
        lr_stats[(v, lr)] = {
            "mean_eval_loss": [float(np.mean(r["eval_loss"])) for r in rs],
            "final_loss": [r["final_loss"] for r in rs],
            "spikes": [len(loss_spikes(r["eval_loss"])) for r in rs],
            "order_swaps": [order_swaps(r["snapshots"]) for r in rs],
        }
    losses = [x for rs in lr_cfgs.values() for c in rs for x in R(c)["eval_loss"]]
    fig.update_layout(
        title=f"learning rate 0.1 vs 0.01 ({len(cmp_seeds)} seeds)",
        xaxis_title="step",
        yaxis_title="eval loss (nats)",
    )
    log_axis(fig, "y", [max(min(losses), 1e-6), max(losses)])
    out.figure(fig, "learning_rate")
    big = lr_cfgs[(30, 0.1)][0]
    out.figure(embedding_animation(R(big), f"V=30, lr=0.1, seed {args.seed}: token embeddings"), "embedding_animation")
    st = {f"V={v} lr={lr}": x for (v, lr), x in lr_stats.items()}

    def mean_losses(v):
        return f"mean eval loss {num(spread(lr_stats[(v, 0.1)]['mean_eval_loss'])[0])} nats at lr 0.1 vs " + (
            f"{num(spread(lr_stats[(v, 0.01)]['mean_eval_loss'])[0])} at 0.01 (mean of {len(cmp_seeds)} seeds)"
        )

    for v, faster in ((30, True), (100, False)):
        claims.append(
            claim(
                f"lr0.1_{'faster' if faster else 'slower'}_at_V{v}",
                f"V = {v} ({len(cmp_seeds)} seeds): lr 0.1 learns {'faster' if faster else 'slower'} than 0.01",
                "faster" if faster else "slower",
                RULE_LR.format(how="lower" if faster else "higher", V=v),
                {k: x for k, x in st.items() if k.startswith(f"V={v} ")},
                lr_compare(lr_stats[(v, 0.1)]["mean_eval_loss"], lr_stats[(v, 0.01)]["mean_eval_loss"], v, faster),
                quick=Q,
                shown=mean_losses(v),
            )
        )
    first = {f"V = {v}": (lr_stats[(v, 0.1)]["spikes"][0], lr_stats[(v, 0.1)]["order_swaps"][0]) for v in (30, 100)}
    claims.append(
        claim(
            "spikes_and_swaps_at_large_lr",
            f"V = 30 and 100 (seed {args.seed}): at lr 0.1 loss spikes come with token-order swaps",
            "a spike around step 6000 with a swap",
            RULE_SPIKES.format(seed=args.seed),
            {k: {"spikes": x["spikes"], "order_swaps": x["order_swaps"]} for k, x in st.items()},
            spikes_and_swaps(first),
            quick=Q,
            shown="lr 0.1: " + "; ".join(f"{k}: {a} spike(s), {b} swap(s)" for k, (a, b) in first.items()),
        )
    )
    robust = robustness_section(out, prev_token_grid(), base, args, runs, "000: previous-token copying")
    out.summary(
        {
            "steps": steps,
            "lr_steps": lr_steps,
            "init_std": args.init_std,
            "lr": args.lr,
            "comparison_seeds": cmp_seeds,
            **({"robustness": robust} if robust else {}),
        },
        claims,
    )
    out.commit()
