"""Sparse attention 4 (000): a previous-token head from positional embeddings.

V 30, C 4, n_embd 2: copying the previous token fails without positional embeddings and is learned
with them; the previous position separates from the others along a direction s, and
s^T W_Q W_K^T s < 0 (post: -1.1); relative perplexity (ppl-1)/V grows with V and C and falls with
n_embd; lr 0.1 beats 0.01 at V 30 but not at V 100, where loss spikes come with token-order swaps
(animation of the embeddings).

    python experiments/toy_prev_token.py               # the default run (times: docs/benchmarks.md)
    python experiments/toy_prev_token.py --robustness  # + 720 grid runs: ~30 min on one such core
    python experiments/toy_prev_token.py --quick
"""

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from gpt2_posheads.claims.toy import RULE_FAILS, RULE_LEARNED, RULE_MONO, RULE_SIGN, fails, learned, monotone
from gpt2_posheads.claims.toy import toy_claim as claim
from gpt2_posheads.cli import main_entry
from gpt2_posheads.report.plotting import line_figure
from gpt2_posheads.toy import ToyConfig, relative_perplexity, separation_direction, train_sweep, wq_wk
from gpt2_posheads.toy.analysis import loss_spikes, order_swaps, perplexity_curve
from gpt2_posheads.toy.cli import base_config, robustness_section, toy_parser, toy_setup
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
    fig = go.Figure(data=paths + [markers(traj[-1])], frames=frames)
    fig.update_layout(
        title=f"{title} (lines: paths from step 0; labels: final positions)",
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
    mk = lambda **kw: ToyConfig(**{**base.__dict__, **kw})  # noqa: E731
    with_pos = mk(snapshot_every=max(steps // 100, 1))
    no_pos = mk(pos_emb=False)
    sweep = {
        "V": [mk(V=v) for v in ([10, 30] if q else [10, 30, 100])],
        "C": [mk(C=c) for c in ([3, 4] if q else [3, 4, 8])],
        "n_embd": [mk(n_embd=d) for d in ([2, 4] if q else [2, 4, 8])],
    }
    lr_steps = args.lr_steps or (steps if q else 2 * steps)
    lr_cfgs = [
        mk(V=v, lr=lr, steps=lr_steps, log_every=max(lr_steps // 200, 1), snapshot_every=max(lr_steps // 100, 1))
        for v in (30, 100)
        for lr in (0.1, 0.01)
    ]
    flat = [with_pos, no_pos] + [c for g in sweep.values() for c in g] + lr_cfgs
    res = dict(zip([c.id() for c in flat], train_sweep(flat, runs, workers=args.workers)))
    R = lambda c: res[c.id()]  # noqa: E731
    claims = []
    Q = args.quick

    rp, rn = R(with_pos), R(no_pos)
    W_pos = torch.tensor(rp["params"]["W_pos"])
    s = separation_direction(W_pos, 1)
    M = wq_wk(torch.tensor(rp["params"]["0.W_Q"])[0], torch.tensor(rp["params"]["0.W_K"])[0])
    proj = (W_pos.double() @ s.double()).tolist()  # positions 0..C-1; the previous token is C-2
    others = [proj[i] for i in range(len(proj)) if i != base.C - 2]
    fig = make_subplots(
        rows=1, cols=3, subplot_titles=["perplexity", "positional embeddings over training", "projection on s"]
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
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_layout(title="V=30, C=4, n_embd=2: copying the previous token", height=450)
    out.figure(fig, "positional_embeddings", width=1500)
    rel_with, rel_without = (relative_perplexity(r["final_loss"], base.V) for r in (rp, rn))
    claims.append(
        claim(
            "learned_with_pos_emb",
            "the task can be reasonably learned with positional embeddings",
            "learned (plot: perplexity near 1)",
            RULE_LEARNED,
            {"final_ppl": rp["final_perplexity"], "relative": rel_with},
            held=learned(rp["final_perplexity"], base.V),
            quick=Q,
        )
    )
    claims.append(
        claim(
            "fails_without_pos_emb",
            "it cannot be learned without positional embeddings",
            "not learned",
            RULE_FAILS,
            {"final_ppl": rn["final_perplexity"], "relative": rel_without},
            held=fails(rn["final_perplexity"], base.V),
            quick=Q,
        )
    )
    learned_ok = (learned(rp["final_perplexity"], base.V), "the model with positional embeddings learned the task")
    claims.append(
        claim(
            "separation_direction",
            "p_-1 lies on one side of a direction s, p_0, p_-2, p_-3 on the other",
            "s ~ (1, 1)",
            "held if the projection of p_-1 on s has the opposite sign of every other position's",
            {"s": s.tolist(), "projections p_-3..p_0": proj},
            held=all(np.sign(o) != np.sign(proj[base.C - 2]) for o in others),
            quick=Q,
            precondition=learned_ok,
        )
    )
    claims.append(
        claim(
            "sT_WQWKT_s_negative",
            "s^T W_Q W_K^T s < 0",
            -1.1,
            RULE_SIGN,
            {"W_Q W_K^T": M.tolist(), "s^T W_Q W_K^T s": bilinear(s, M)},
            held=bilinear(s, M) < 0,
            quick=Q,
            precondition=learned_ok,
        )
    )

    hyper = {}
    fig = make_subplots(rows=1, cols=3, subplot_titles=["vs V", "vs C", "vs n_embd"])
    for col, (name, cfgs) in enumerate(sweep.items(), start=1):
        xs = [getattr(c, name) for c in cfgs]
        ys = [relative_perplexity(R(c)["final_loss"], c.V) for c in cfgs]
        hyper[name] = dict(zip(xs, ys))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name), 1, col)
    fig.update_layout(title="relative perplexity (ppl - 1) / V", height=420)
    out.figure(fig, "hyperparameters", width=1300)
    for name, up in (("V", True), ("C", True), ("n_embd", False)):
        claims.append(
            claim(
                f"rel_ppl_{'up' if up else 'down'}_with_{name}",
                f"relative perplexity {'rises' if up else 'falls'} with {name}",
                "increases" if up else "decreases",
                RULE_MONO.format(verb="rises" if up else "falls", name=name),
                hyper[name],
                held=monotone(list(hyper[name].values()), up),
                quick=Q,
            )
        )

    lr_series, lr_stats = {}, {}
    for c in lr_cfgs:
        r = R(c)
        lr_series[f"V={c.V} lr={c.lr}"] = (r["steps"], r["eval_loss"])
        lr_stats[f"V={c.V} lr={c.lr}"] = {
            "mean_eval_loss": float(np.mean(r["eval_loss"])),
            "final_loss": r["final_loss"],
            "spikes": len(loss_spikes(r["eval_loss"])),
            "order_swaps": order_swaps(r["snapshots"]),
        }
    out.figure(
        line_figure(lr_series, title="learning rate 0.1 vs 0.01", xlabel="step", ylabel="eval loss", log_y=True),
        "learning_rate",
    )
    big = next(c for c in lr_cfgs if c.V == 30 and c.lr == 0.1)
    out.figure(embedding_animation(R(big), "V=30, lr=0.1: token embeddings over training"), "embedding_animation")
    st = lr_stats
    claims.append(
        claim(
            "lr0.1_faster_at_V30",
            "at V=30, lr 0.1 learns faster than 0.01",
            "faster",
            "held if the mean eval loss over training is lower at lr 0.1 than at 0.01 (V=30)",
            {k: v for k, v in st.items() if "V=30" in k},
            held=st["V=30 lr=0.1"]["mean_eval_loss"] < st["V=30 lr=0.01"]["mean_eval_loss"],
            quick=Q,
        )
    )
    claims.append(
        claim(
            "lr0.1_slower_at_V100",
            "at V=100, lr 0.1 learns slower than 0.01",
            "slower",
            "held if the mean eval loss over training is higher at lr 0.1 than at 0.01 (V=100)",
            {k: v for k, v in st.items() if "V=100" in k},
            held=st["V=100 lr=0.1"]["mean_eval_loss"] > st["V=100 lr=0.01"]["mean_eval_loss"],
            quick=Q,
        )
    )
    claims.append(
        claim(
            "spikes_and_swaps_at_large_lr",
            "at lr 0.1 loss spikes come with token-order swaps",
            "a spike around step 6000 with a swap",
            "held if some lr-0.1 run has both a loss spike and a "
            "token-order swap (swaps counted once tokens are separated)",
            {k: (v["spikes"], v["order_swaps"]) for k, v in st.items()},
            held=any(v["spikes"] > 0 and v["order_swaps"] > 0 for k, v in st.items() if "0.1" in k),
            quick=Q,
        )
    )
    robust = robustness_section(out, prev_token_grid(), base, args, runs, "000: previous-token copying")
    out.summary(
        {
            "steps": steps,
            "lr_steps": lr_steps,
            "init_std": args.init_std,
            "lr": args.lr,
            **({"robustness": robust} if robust else {}),
        },
        claims,
    )
    out.commit()


if __name__ == "__main__":
    main_entry(main)
