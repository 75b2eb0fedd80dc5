"""Post 000 ("Sparse attention 4"): a previous-token head from positional embeddings (what the post finds: the
command's usage, below); :func:`prev_token_grid`: its claims on the ``--robustness`` grid. The separation and the
sign are not testable when the model with positional embeddings did not learn the task.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import plotly.graph_objects as go
import torch
from plotly.subplots import make_subplots

from ...claims.catalogue import Option, declare
from ...claims.toy import (
    FLOOR_WORDS,
    margin_words,
    num,
    nums,
    pair_rule,
    rel_ppl_floor,
    seeds_words,
    spread,
    sweep_trend,
    toy_claim,
    toy_post,
)
from ...claims.verdicts import Precondition, Rule
from ...toy import ToyConfig, relative_perplexity, separation_direction, wq_wk
from ...toy.analysis import bilinear, loss_spikes, order_swaps, perplexity_curve
from ...toy.figures import COLOURS, axis_titles, band, log_axis, points_with_sd, titled
from ...toy.posts import GridClaim, ToyRun
from ..result import ClaimResult

POST = toy_post(
    "000", "Sparse attention 4: previous token head", "2026-01-13", "000_0f0fdff7da957e3e.txt", "prev_token_toy", 3
)


@toy_claim(
    "learned_with_pos_emb",
    "the task can be reasonably learned with positional embeddings",
    "learned (plot: perplexity near 1)",
    max_ppl=1.5,
    max_rel=0.05,
)
def LEARNED(max_ppl: float, max_rel: float) -> Rule:
    """Learned: final perplexity <= ``max_ppl``, or relative perplexity (ppl - 1) / V <= ``max_rel``. Value:
    ``(final perplexity, V)``."""

    def decide(value):
        ppl, V = value
        rel = (ppl - 1) / V
        return bool(ppl <= max_ppl or rel <= max_rel), (
            f"final perplexity {num(ppl, 4)} {'<=' if ppl <= max_ppl else '>'} {max_ppl:g}; relative perplexity "
            f"(ppl-1)/V {num(rel)} {'<=' if rel <= max_rel else '>'} {max_rel:g} (needs either)"
        )

    return Rule(
        f"held if the final perplexity with positional embeddings is <= {max_ppl:g} or its relative perplexity "
        f"(ppl-1)/V <= {max_rel:g}",
        decide,
    )


@toy_claim("fails_without_pos_emb", "it cannot be learned without positional embeddings", "not learned", min_rel=0.5)
def FAILS(min_rel: float) -> Rule:
    """Not learned: relative perplexity (ppl - 1) / V >= ``min_rel``. Value: ``(final perplexity, V)``."""

    def decide(value):
        ppl, V = value
        rel = (ppl - 1) / V
        ok = bool(rel >= min_rel)
        return ok, (
            f"relative perplexity (ppl-1)/V {num(rel)} {'>=' if ok else '<'} {min_rel:g} (needs >= {min_rel:g}; "
            f"final perplexity {num(ppl)} of V = {V})"
        )

    return Rule(
        f"held if the final relative perplexity (ppl-1)/V without positional embeddings is >= {min_rel:g}", decide
    )


@toy_claim("separation_direction", "p_-1 lies on one side of a direction s, p_0, p_-2, p_-3 on the other", "s ~ (1, 1)")
def SEPARATION() -> Rule:
    """Value: ``(each position's projection on s (positions 0..C-1), the previous token's position C-2)``."""

    def decide(value):
        proj, prev = value
        C = len(proj)
        others = {f"p_{i - C + 1}": proj[i] for i in range(C) if i != prev}
        ok = all(np.sign(o) != np.sign(proj[prev]) for o in others.values())
        return ok, (
            f"p_-1 projects to {num(proj[prev], 2)} on s; {', '.join(f'{k} {num(v, 2)}' for k, v in others.items())} "
            f"(each needs the opposite sign)"
        )

    return Rule("held if the projection of p_-1 on s has the opposite sign of every other position's", decide)


@toy_claim("sT_WQWKT_s_negative", "s^T W_Q W_K^T s < 0", -1.1, learned=False)
def SIGN(learned: bool) -> Rule:
    """s^T W_Q W_K^T s < 0. Value: the number; with ``learned`` (the grid, where learning is part of the rule, not a
    precondition): ``(final perplexity, V, the number)``."""

    def negative(value):
        ok = bool(value < 0)
        return ok, f"s^T W_Q W_K^T s = {num(value)} {'<' if ok else '>='} 0 (needs < 0; the post: -1.1)"

    def decide(value):
        if not learned:
            return negative(value)
        ppl, V, value = value
        ok, why = LEARNED.rule.decide((ppl, V))
        return negative(value) if ok else (False, f"the task is not learned: {why}")

    return Rule(
        f"held if {'the model learned the task (rule above) and ' if learned else ''}s^T W_Q W_K^T s < 0", decide
    )


def mono_rule(up: bool, name: str, values: tuple, one_seed: bool) -> Rule:
    """(ppl - 1) / V rises (``up``) or falls along the sweep of ``name``. Value: ``(relative perplexity of each seed
    at each x, the xs, the vocabulary at each x)``."""

    def decide(value):
        rel, xs, Vs = value
        return sweep_trend(rel, xs, up, "relative perplexity", name, floor=[rel_ppl_floor(V) for V in Vs])

    sweep = f"{name} ({', '.join(map(str, values))})" if values else name
    return Rule(
        f"{seeds_words(one_seed)}held if (ppl-1)/V, mean over seeds, {'rises' if up else 'falls'} at every step of "
        f"the {sweep} sweep {margin_words()}; {FLOOR_WORDS}",
        decide,
    )


def lr_rule(V: int, faster: bool) -> Rule:
    """Mean eval loss over training lower (``faster``) or higher at lr 0.1 than at 0.01. Value: ``(values at lr 0.1,
    values at lr 0.01)`` over seeds."""
    return pair_rule(
        f"held if the mean eval loss over training, mean over seeds, is {'lower' if faster else 'higher'} at lr 0.1 "
        f"than at 0.01 (V={V}) {margin_words()}",
        "mean eval loss over training",
        not faster,
        lambda v: (v[1], v[0], {}),
        ("lr 0.01", "lr 0.1"),
        unit=" nats",
    )


@toy_claim(
    "spikes_and_swaps_at_large_lr",
    "at lr 0.1 loss spikes come with token-order swaps",
    "a spike around step 6000 with a swap",
    seed=0,
)
def SPIKES(seed: int) -> Rule:
    """Value: ``{run label: (loss spikes, order swaps)}`` of the lr-0.1 runs of ``seed``."""

    def decide(stats):
        ok = any(s > 0 and w > 0 for s, w in stats.values())
        listed = "; ".join(f"{k}: {s} loss spike(s), {w} order swap(s)" for k, (s, w) in stats.items())
        return ok, f"{listed} (needs both in one run)"

    return Rule(
        f"held if some lr-0.1 run (seed {seed}) has both a loss spike and a token-order swap (swaps counted once "
        "tokens are separated)",
        decide,
    )


MONO = {
    name: toy_claim(
        f"rel_ppl_{'up' if up else 'down'}_with_{name}",
        f"relative perplexity {'rises' if up else 'falls'} with {name}",
        "increases" if up else "decreases",
        mono_rule,
        up=up,
        name=name,
        values=(),
        one_seed=False,
    )
    for name, up in (("V", True), ("C", True), ("n_embd", False))
}
LR = {
    v: toy_claim(
        f"lr0.1_{'faster' if faster else 'slower'}_at_V{v}",
        f"lr 0.1 learns {'faster' if faster else 'slower'} than 0.01",
        "faster" if faster else "slower",
        lr_rule,
        V=v,
        faster=faster,
    )
    for v, faster in ((30, True), (100, False))
}
SPECS = (LEARNED, FAILS, SEPARATION, SIGN, *MONO.values(), *LR.values(), SPIKES)


STEPS, QUICK_STEPS = 5000, 300
LR_COMPARED = (0.1, 0.01)  # the post's two learning rates, each at V 30 and V 100
LR_VOCAB = (30, 100)
SWEEPS = {"V": (10, 30, 100), "C": (3, 4, 8), "n_embd": (2, 4, 8)}  # --quick: the first two of each


def previous_direction(result: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """A run's direction s ``[n_embd]`` separating the previous position's embedding from the others, and
    ``W_Q W_K^T`` ``[n_embd, n_embd]`` (its sign on s)."""
    W_pos, W_Q, W_K = (torch.tensor(result["params"][n]) for n in ("W_pos", "0.W_Q", "0.W_K"))
    return separation_direction(W_pos, 1), wq_wk(W_Q[0], W_K[0])


def rel_ppl(result: dict) -> float:
    return relative_perplexity(result["final_loss"], result["config"]["V"])


def judge(rp, rn, base: ToyConfig, proj, sweeps: dict, lr_stats: dict, seed: int, n_cmp: int) -> list[tuple]:
    """The claims' rows (:meth:`~gpt2_posheads.toy.posts.ToyRun.finish`) from the runs with (``rp``) and without
    (``rn``) positional embeddings, each position's projection on s ``proj`` (positions 0..C-1, the previous token at
    C-2), the ``sweeps`` and the learning-rate ``lr_stats`` (per (V, lr), over ``n_cmp`` seeds)."""
    s, M = previous_direction(rp)
    (p_with, rel_with), (p_without, rel_without) = ((r["final_perplexity"], rel_ppl(r)) for r in (rp, rn))
    one = f"V = 30, C = 4, n_embd = 2 (seed {seed})"
    ok, why = LEARNED.rule.decide((p_with, base.V))
    failed = f"the model with positional embeddings did not learn the task ({why})"
    learned_ok = [Precondition("the model with positional embeddings learned the task", ok, failed)]
    sign, prev, st = bilinear(s, M), base.C - 2, {f"V={v} lr={lr}": x for (v, lr), x in lr_stats.items()}
    first = {f"V = {v}": (lr_stats[(v, 0.1)]["spikes"][0], lr_stats[(v, 0.1)]["order_swaps"][0]) for v in LR_VOCAB}
    others = ", ".join(num(x, 2) for i, x in enumerate(proj) if i != prev)
    shown_sep = f"p_-1·s {num(proj[prev], 2)}; others {others} (s = ({num(float(s[0]), 2)}, {num(float(s[1]), 2)}))"
    shown_fails = f"relative perplexity {num(rel_without, 2)} (final perplexity {num(p_without)})"
    rows = [
        (LEARNED, {"final_ppl": p_with, "relative": rel_with}, (p_with, base.V), f"final perplexity {num(p_with, 4)}"),
        (FAILS, {"final_ppl": p_without, "relative": rel_without}, (p_without, base.V), shown_fails),
        (SEPARATION, {"s": s.tolist(), "projections p_-3..p_0": proj}, (proj, prev), shown_sep, learned_ok),
        (SIGN, {"W_Q W_K^T": M.tolist(), "s^T W_Q W_K^T s": sign}, sign, f"s^T W_Q W_K^T s = {num(sign)}", learned_ok),
    ]
    rows = [(spec.at(setting=one), *rest) for spec, *rest in rows]
    for name, spec in MONO.items():
        h, xs = sweeps[name], ", ".join(map(str, sweeps[name]["x"]))
        fixed = ", ".join(f"{k} = {x}" for k, x in (("V", 30), ("C", 4), ("n_embd", 2)) if k != name)
        readout = f"(ppl-1)/V {nums(spread(y)[0] for y in h['relative_perplexity'])} at {name} = {xs} (floor "
        floor = nums(dict.fromkeys(rel_ppl_floor(v) for v in h["V"]), 2)
        at = spec.at(setting=f"{name} = {xs} ({fixed}; {n_cmp} seeds)")
        rows.append((at, h, (h["relative_perplexity"], h["x"], h["V"]), f"{readout}{floor})"))
    for v, spec in LR.items():
        fast, slow = lr_stats[(v, 0.1)]["mean_eval_loss"], lr_stats[(v, 0.01)]["mean_eval_loss"]
        readout = f"mean eval loss {num(spread(fast)[0])} nats at lr 0.1 vs {num(spread(slow)[0])} at 0.01 (mean of "
        measured = {k: x for k, x in st.items() if k.startswith(f"V={v} ")}
        rows.append((spec.at(setting=f"V = {v} ({n_cmp} seeds)"), measured, (fast, slow), f"{readout}{n_cmp} seeds)"))
    spikes = {k: {"spikes": x["spikes"], "order_swaps": x["order_swaps"]} for k, x in st.items()}
    shown = "lr 0.1: " + "; ".join(f"{k}: {a} spike(s), {b} swap(s)" for k, (a, b) in first.items())
    return rows + [(SPIKES.at(setting=f"V = 30 and 100 (seed {seed})", seed=seed), spikes, first, shown)]


def figures(rp, rn, base: ToyConfig, proj, sweeps: dict, lr_runs: dict, seed: int, n_cmp: int) -> dict:
    """``{stem: (figure, PNG size)}`` of :func:`judge`'s numbers and ``lr_runs`` (per (V, lr), a run per seed)."""
    s = previous_direction(rp)[0]
    titles = ["perplexity", "positional embeddings over training", "projection on s"]
    fig = make_subplots(rows=1, cols=3, subplot_titles=titles, horizontal_spacing=0.09)
    fig.add_trace(go.Scatter(x=rn["steps"], y=perplexity_curve(rn), name="no positional embedding"), 1, 1)
    fig.add_trace(go.Scatter(x=rp["steps"], y=perplexity_curve(rp), name="with positional embedding"), 1, 1)
    traj = np.array([sn["W_pos"] for sn in rp["snapshots"]])
    for i in range(base.C):
        fig.add_trace(go.Scatter(x=traj[:, i, 0], y=traj[:, i, 1], mode="lines", name=f"p_{i - base.C + 1}"), 1, 2)
    arrow = go.Scatter(x=[0, float(s[0])], y=[0, float(s[1])], mode="lines+markers", name="s", line=dict(color="black"))
    fig.add_trace(arrow, 1, 2)
    fig.add_trace(go.Bar(x=[f"p_{i - base.C + 1}" for i in range(base.C)], y=proj, name="p·s"), 1, 3)
    log_axis(fig, "y", [1, base.V], row=1, col=1)
    axis_titles(fig, ("step", "perplexity (eval)"), ("dimension 1", "dimension 2"))
    axis_titles(fig, ("position (0: the current token)", "projection p·s"), col=3)
    fig.update_layout(title=f"V=30, C=4, n_embd=2, seed {seed}: copying the previous token", height=450)
    out = {"positional_embeddings": (fig, {"width": 1500})}

    fig = make_subplots(rows=1, cols=3, subplot_titles=["vs V", "vs C", "vs n_embd"], horizontal_spacing=0.08)
    for col, (name, h) in enumerate(sweeps.items(), start=1):
        xs, ys = h["x"], h["relative_perplexity"]  # [x, seed]
        fig.add_trace(points_with_sd(xs, list(zip(*ys)), f"(ppl-1)/V vs {name}", COLOURS[col - 1]), 1, col)
        floors = [rel_ppl_floor(v) for v in h["V"]]
        floor = dict(mode="lines", line=dict(color="grey", dash="dot"), name="the floor (one eval sequence at chance)")
        fig.add_trace(go.Scatter(x=xs, y=floors, showlegend=col == 1, **floor), 1, col)
        lows = [max(min(spread(y)[0] - spread(y)[1], min(y)), 1e-12) for y in ys]
        log_axis(fig, "y", [*lows, *[max(y) for y in ys], *floors], row=1, col=col)
        fig.update_xaxes(title_text=name, type="log" if name != "C" else None, row=1, col=col)
        fig.update_xaxes(tickvals=xs, ticktext=[str(x) for x in xs], row=1, col=col)
        fig.update_yaxes(title_text="relative perplexity (ppl-1)/V", row=1, col=col)
    fig.update_layout(
        title=f"relative perplexity (ppl - 1) / V, mean ± sd of {n_cmp} seeds (dotted: the floor)", height=450
    )
    out["hyperparameters"] = (fig, {"width": 1400})

    fig = go.Figure()
    for i, ((v, lr), rs) in enumerate(lr_runs.items()):
        band(fig, rs[0]["steps"], [r["eval_loss"] for r in rs], f"V={v} lr={lr}", COLOURS[i])
    losses = [x for rs in lr_runs.values() for r in rs for x in r["eval_loss"]]
    titled(fig, f"learning rate 0.1 vs 0.01 ({n_cmp} seeds)", "step", "eval loss (nats)")
    log_axis(fig, "y", [max(min(losses), 1e-6), max(losses)])
    out["learning_rate"] = (fig, {})
    big = lr_runs[(30, 0.1)][0]
    out["embedding_animation"] = (embedding_animation(big, f"V=30, lr=0.1, seed {seed}: token embeddings"), {})
    return out


def embedding_animation(result: dict, title: str) -> go.Figure:
    """Token embeddings over training: each token's path (static, so the PNG shows the whole trajectory)
    with its final position labelled; the HTML's play button animates the markers frame by frame."""
    snaps = result["snapshots"]
    traj = np.array([s["W_E"] for s in snaps])  # [snapshot, V, 2]
    n_tok = traj.shape[1]
    faint = dict(mode="lines", line=dict(width=1), opacity=0.5, showlegend=False, hoverinfo="skip")
    paths = [go.Scatter(x=traj[:, t, 0], y=traj[:, t, 1], **faint) for t in range(n_tok)]
    labelled = dict(mode="markers+text", text=[str(i) for i in range(n_tok)], textposition="top center")

    def markers(e):
        return go.Scatter(x=e[:, 0], y=e[:, 1], marker=dict(size=7, color="black"), name="tokens", **labelled)

    frames = [
        go.Frame(data=[markers(e)], traces=[n_tok], name=str(st)) for e, st in zip(traj, result["snapshot_steps"])
    ]
    lim = float(np.abs(traj).max()) * 1.1
    last = result["snapshot_steps"][-1]
    fig = go.Figure(data=paths + [markers(traj[-1])], frames=frames)
    play = dict(label="play", method="animate", args=[None, {"frame": {"duration": 60}}])
    slider = [dict(method="animate", args=[[f.name], {"mode": "immediate"}], label=f.name) for f in frames]
    fig.update_layout(
        # the figure opens on the last frame (the PNG shows it), so the slider starts there too
        title=f"{title}<br><sup>lines: each token's path from step 1; dots: positions at step {last:,} "
        "(play: the whole run)</sup>",
        xaxis=dict(range=[-lim, lim], title="dimension 1"),
        yaxis=dict(range=[-lim, lim], title="dimension 2", scaleanchor="x"),
        height=650,
        width=700,
        updatemenus=[dict(type="buttons", buttons=[play])],
        sliders=[dict(steps=slider, active=len(frames) - 1, currentvalue=dict(prefix="step "))],
    )
    return fig


@declare(
    POST,
    "toy_prev_token",
    claims=SPECS,
    usage="""Sparse attention 4 (000): a previous-token head from positional embeddings.

V 30, C 4, n_embd 2: copying the previous token fails without positional embeddings and is learned
with them; the previous position separates from the others along a direction s, and
s^T W_Q W_K^T s < 0 (post: -1.1); relative perplexity (ppl-1)/V grows with V and C and falls with
n_embd; lr 0.1 beats 0.01 at V 30 but not at V 100, where loss spikes come with token-order swaps
(animation of the embeddings).

    gpt2-posheads toy_prev_token               # the default run (times: docs/posts/000-previous-token-head.md)
    gpt2-posheads toy_prev_token --robustness  # + 720 grid runs: ~30 min on one such core
    gpt2-posheads toy_prev_token --quick

The claim as a function: gpt2_posheads.posts.prev_token_toy.prev_token (gpt2_posheads/posts/prev_token_toy/copying.py).
""",
    options=(
        ToyRun.steps_option(STEPS, QUICK_STEPS),
        Option("--lr-steps", None, "steps of the learning-rate comparison (default 2x --steps)", int, low=1),
    ),
)
def prev_token(*, lr_steps: int | None = None, **options) -> ClaimResult:
    """Train post 000's toy models and judge its claims (``toy_prev_token``'s defaults). ``lr_steps``: the
    learning-rate comparison's (default twice ``steps``; ``quick``: ``steps``). ``options``:
    :class:`~gpt2_posheads.toy.posts.ToyRun`'s (``quick``: also two values per sweep); the runs with and without
    positional embeddings train at ``seed``, every comparison (the sweeps, the learning rates) at the comparison seeds.
    """
    run = ToyRun.of("prev_token", options, STEPS, QUICK_STEPS)
    steps, quick, cmp_seeds = run.steps, run.quick, run.comparison_seeds
    base = run.base(task="copy_offset", k=1, V=30, C=4, n_embd=2, pos_emb=True, seed=run.seed)
    sweep_values = {n: xs[: 2 if quick else None] for n, xs in SWEEPS.items()}
    lr_steps = lr_steps or (steps if quick else 2 * steps)
    with_pos, no_pos = replace(base, snapshot_every=max(base.steps // 100, 1)), replace(base, pos_emb=False)
    sweep = {n: [[replace(base, **{n: x}, seed=s) for s in cmp_seeds] for x in xs] for n, xs in sweep_values.items()}
    at_lr = replace(base, steps=lr_steps, log_every=max(lr_steps // 200, 1), snapshot_every=max(lr_steps // 100, 1))
    lr_cfgs = {(v, lr): [replace(at_lr, V=v, lr=lr, seed=s) for s in cmp_seeds] for v in LR_VOCAB for lr in LR_COMPARED}
    flat = [with_pos, no_pos, *(c for g in sweep.values() for row in g for c in row)]
    flat += [c for row in lr_cfgs.values() for c in row]
    print(
        f"toy_prev_token: {len({c.id() for c in flat})} models: with and without positions ({steps:,} steps), "
        f"the V, C and n_embd sweeps ({len(cmp_seeds)} seeds each, {steps:,} steps) and lr 0.1 vs 0.01 at V 30 and "
        f"100 ({len(cmp_seeds)} seeds each, {lr_steps:,} steps)",
        flush=True,
    )
    res = run.train(flat)
    rp, rn = res[with_pos.id()], res[no_pos.id()]
    sweeps = {}  # {V|C|n_embd: {x, seeds, relative_perplexity [x, seed], V}}
    for name, rows in sweep.items():
        xs, rel = [getattr(row[0], name) for row in rows], [[rel_ppl(res[c.id()]) for c in row] for row in rows]
        sweeps[name] = dict(x=xs, seeds=cmp_seeds, relative_perplexity=rel, V=[row[0].V for row in rows])
    lr_runs = {k: [res[c.id()] for c in cs] for k, cs in lr_cfgs.items()}
    lr_stats = {}  # per (V, lr), over seeds
    for k, rs in lr_runs.items():
        ev, swaps = [r["eval_loss"] for r in rs], [order_swaps(r["snapshots"]) for r in rs]
        lr_stats[k] = dict(mean_eval_loss=[float(np.mean(e)) for e in ev], final_loss=[r["final_loss"] for r in rs])
        lr_stats[k] |= dict(spikes=[len(loss_spikes(e)) for e in ev], order_swaps=swaps)
    proj = (torch.tensor(rp["params"]["W_pos"]).double() @ previous_direction(rp)[0].double()).tolist()
    n_cmp = len(cmp_seeds)
    rows = judge(rp, rn, base, proj, sweeps, lr_stats, run.seed, n_cmp)
    figs = figures(rp, rn, base, proj, sweeps, lr_runs, run.seed, n_cmp)
    numbers = dict(lr_steps=lr_steps, comparison_seeds=cmp_seeds)
    title = "000: previous-token copying"
    return run.finish(ClaimResult("prev_token"), rows, figs, base, prev_token_grid(), title, **numbers)


# --- the --robustness grid --------------------------------------------------------------------------------------


def prev_token_grid() -> list[GridClaim]:
    """000's headline claims (base: V 30, C 4, n_embd 2, positional embeddings; one seed per test)."""

    def final(r, name):
        return r[name]["final_perplexity"], r[name]["config"]["V"]

    def trend(name: str) -> GridClaim:  # (ppl-1)/V along the sweep of name, the vocabulary of each run for its floor
        xs = SWEEPS[name]

        def value(r):
            runs = [r[f"{name}={x}"] for x in xs]
            return [[rel_ppl(run)] for run in runs], xs, [run["config"]["V"] for run in runs]

        def configs(b):
            return {f"{name}={x}": replace(b, **{name: x}) for x in xs}

        return GridClaim(MONO[name].at(values=xs, one_seed=True), configs, value)

    return [
        GridClaim(LEARNED.at(), lambda b: {"pos": b}, lambda r: final(r, "pos")),
        GridClaim(FAILS.at(), lambda b: {"no_pos": replace(b, pos_emb=False)}, lambda r: final(r, "no_pos")),
        GridClaim(
            SIGN.at(learned=True),
            lambda b: {"pos": b},
            lambda r: (*final(r, "pos"), bilinear(*previous_direction(r["pos"]))),
        ),
        *map(trend, ("V", "C")),
    ]
