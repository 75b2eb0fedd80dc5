"""Sparse attention 4 (000): a previous-token head from positional embeddings.

V 30, C 4, n_embd 2: copying the previous token fails without positional embeddings and is learned
with them; the previous position separates from the others along a direction s, and
s^T W_Q W_K^T s < 0 (post: -1.1); relative perplexity (ppl-1)/V grows with V and C and falls with
n_embd; lr 0.1 beats 0.01 at V 30 but not at V 100, where loss spikes come with token-order swaps
(animation of the embeddings).

    python experiments/toy_prev_token.py          # ~6 min on 2 cores
    python experiments/toy_prev_token.py --quick
"""
import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from gpt2_posheads.plotting import line_figure
from gpt2_posheads.toy import ToyConfig, relative_perplexity, separation_direction, train_sweep, wq_wk
from gpt2_posheads.toy.analysis import loss_spikes, order_swaps, perplexity_curve
from gpt2_posheads.toy.cli import claim, toy_parser, toy_setup
from gpt2_posheads.toy.metrics import bilinear


def embedding_animation(result, title):
    snaps = result["snapshots"]
    frames = [go.Frame(data=[go.Scatter(x=[e[0] for e in s["W_E"]], y=[e[1] for e in s["W_E"]], mode="markers+text",
                                        text=[str(i) for i in range(len(s["W_E"]))])], name=str(st))
              for s, st in zip(snaps, result["snapshot_steps"])]
    lim = float(np.abs(np.array([s["W_E"] for s in snaps])).max()) * 1.1
    fig = go.Figure(data=frames[0].data, frames=frames)
    fig.update_layout(title=title, xaxis=dict(range=[-lim, lim]), yaxis=dict(range=[-lim, lim]), height=650, width=700,
                      updatemenus=[dict(type="buttons", buttons=[dict(label="play", method="animate",
                                                                      args=[None, {"frame": {"duration": 60}}])])],
                      sliders=[dict(steps=[dict(method="animate", args=[[f.name], {"mode": "immediate"}], label=f.name)
                                           for f in frames], currentvalue=dict(prefix="step "))])
    return fig


def main(argv=None):
    p = toy_parser(__doc__, steps=5000, quick_steps=300)
    p.add_argument("--lr-steps", type=int, default=None, help="steps of the learning-rate comparison (default 2x --steps)")
    args = p.parse_args(argv)
    out, steps, runs = toy_setup(args, __file__)
    q = args.quick
    base = ToyConfig(task="copy_offset", k=1, V=30, C=4, n_embd=2, pos_emb=True, steps=steps, lr=args.lr,
                     init_std=args.init_std, batch_size=args.batch_size, log_every=max(steps // 100, 1), seed=args.seed)
    mk = lambda **kw: ToyConfig(**{**base.__dict__, **kw})  # noqa: E731
    with_pos = mk(snapshot_every=max(steps // 100, 1))
    no_pos = mk(pos_emb=False)
    sweep = {"V": [mk(V=v) for v in ([10, 30] if q else [10, 30, 100])],
             "C": [mk(C=c) for c in ([3, 4] if q else [3, 4, 8])],
             "n_embd": [mk(n_embd=d) for d in ([2, 4] if q else [2, 4, 8])]}
    lr_steps = args.lr_steps or (steps if q else 2 * steps)
    lr_cfgs = [mk(V=v, lr=lr, steps=lr_steps, log_every=max(lr_steps // 200, 1), snapshot_every=max(lr_steps // 100, 1))
               for v in (30, 100) for lr in (0.1, 0.01)]
    flat = [with_pos, no_pos] + [c for g in sweep.values() for c in g] + lr_cfgs
    res = dict(zip([c.id() for c in flat], train_sweep(flat, runs)))
    R = lambda c: res[c.id()]  # noqa: E731
    claims = {}

    rp, rn = R(with_pos), R(no_pos)
    W_pos = torch.tensor(rp["params"]["W_pos"])
    s = separation_direction(W_pos, 1)
    M = wq_wk(torch.tensor(rp["params"]["0.W_Q"])[0], torch.tensor(rp["params"]["0.W_K"])[0])
    proj = (W_pos.double() @ s.double()).tolist()  # positions 0..C-1; the previous token is C-2
    others = [proj[i] for i in range(len(proj)) if i != base.C - 2]
    fig = make_subplots(rows=1, cols=3, subplot_titles=["perplexity", "positional embeddings over training", "projection on s"])
    fig.add_trace(go.Scatter(x=rn["steps"], y=perplexity_curve(rn), name="no positional embedding"), 1, 1)
    fig.add_trace(go.Scatter(x=rp["steps"], y=perplexity_curve(rp), name="with positional embedding"), 1, 1)
    traj = np.array([sn["W_pos"] for sn in rp["snapshots"]])
    for i in range(base.C):
        fig.add_trace(go.Scatter(x=traj[:, i, 0], y=traj[:, i, 1], mode="lines", name=f"p_{i - base.C + 1}"), 1, 2)
    fig.add_trace(go.Scatter(x=[0, float(s[0])], y=[0, float(s[1])], mode="lines+markers", name="s", line=dict(color="black")), 1, 2)
    fig.add_trace(go.Bar(x=[f"p_{i - base.C + 1}" for i in range(base.C)], y=proj, name="p·s"), 1, 3)
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_layout(title="V=30, C=4, n_embd=2: copying the previous token", height=450)
    out.figure(fig, "positional_embeddings", width=1500)
    claims["fails_without_pos_emb"] = claim("not learned", {"final_ppl_without": rn["final_perplexity"],
                                                            "final_ppl_with": rp["final_perplexity"]},
                                            held=rn["final_perplexity"] > 2 * rp["final_perplexity"])
    claims["separation_direction"] = claim("p_-1 on one side of s, p_0, p_-2, p_-3 on the other",
                                           {"s": s.tolist(), "projections p_-3..p_0": proj},
                                           held=all(np.sign(o) != np.sign(proj[base.C - 2]) for o in others))
    claims["sT_WQWKT_s_negative"] = claim(-1.1, {"W_Q W_K^T": M.tolist(), "s^T W_Q W_K^T s": bilinear(s, M)},
                                          held=bilinear(s, M) < 0)

    hyper = {}
    fig = make_subplots(rows=1, cols=3, subplot_titles=["vs V", "vs C", "vs n_embd"])
    for col, (name, cfgs) in enumerate(sweep.items(), start=1):
        xs = [getattr(c, name) for c in cfgs]
        ys = [relative_perplexity(R(c)["final_loss"], c.V) for c in cfgs]
        hyper[name] = dict(zip(xs, ys))
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=name), 1, col)
    fig.update_layout(title="relative perplexity (ppl - 1) / V", height=420)
    out.figure(fig, "hyperparameters", width=1300)
    mono = lambda d, up: all((b > a) if up else (b < a) for a, b in zip(list(d.values()), list(d.values())[1:]))  # noqa: E731
    claims["rel_ppl_up_with_V"] = claim("increases", hyper["V"], held=mono(hyper["V"], True))
    claims["rel_ppl_up_with_C"] = claim("increases", hyper["C"], held=mono(hyper["C"], True))
    claims["rel_ppl_down_with_n_embd"] = claim("decreases", hyper["n_embd"], held=mono(hyper["n_embd"], False))

    lr_series, lr_stats = {}, {}
    for c in lr_cfgs:
        r = R(c)
        lr_series[f"V={c.V} lr={c.lr}"] = (r["steps"], r["eval_loss"])
        lr_stats[f"V={c.V} lr={c.lr}"] = {"mean_eval_loss": float(np.mean(r["eval_loss"])),
                                          "final_loss": r["final_loss"], "spikes": len(loss_spikes(r["eval_loss"])),
                                          "order_swaps": order_swaps(r["snapshots"])}
    out.figure(line_figure(lr_series, title="learning rate 0.1 vs 0.01", xlabel="step", ylabel="eval loss", log_y=True),
               "learning_rate")
    big = next(c for c in lr_cfgs if c.V == 30 and c.lr == 0.1)
    out.figure(embedding_animation(R(big), "V=30, lr=0.1: token embeddings over training"), "embedding_animation")
    st = lr_stats
    claims["lr0.1_faster_at_V30"] = claim("lr 0.1 learns faster than 0.01", {k: v for k, v in st.items() if "V=30" in k},
                                          held=st["V=30 lr=0.1"]["mean_eval_loss"] < st["V=30 lr=0.01"]["mean_eval_loss"])
    claims["lr0.1_slower_at_V100"] = claim("lr 0.1 learns slower than 0.01", {k: v for k, v in st.items() if "V=100" in k},
                                           held=st["V=100 lr=0.1"]["mean_eval_loss"] > st["V=100 lr=0.01"]["mean_eval_loss"])
    claims["spikes_and_swaps_at_large_lr"] = claim("loss spikes with token-order swaps at lr 0.1",
                                                   {k: (v["spikes"], v["order_swaps"]) for k, v in st.items()},
                                                   held=any(v["spikes"] > 0 and v["order_swaps"] > 0 for k, v in st.items() if "0.1" in k))
    for k, v in claims.items():
        print(f"{k}: held={v['held']}")
    out.summary({"steps": steps, "lr_steps": lr_steps, "init_std": args.init_std, "lr": args.lr, "claims": claims})
    out.report()


if __name__ == "__main__":
    main()
