"""Post 003 ("Sparse attention 1"): copying the current token with one attention layer gets stuck on a plateau
(what the post finds: the command's usage, below; on the plateau at V = 4 the embeddings split into two groups of two,
and only after it into four); :func:`sticky_plateau_grid`: its claims on the ``--robustness`` grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ...claims.catalogue import Option, declare
from ...claims.toy import (
    margin_words,
    near_half_runs,
    num,
    nums,
    pair_rule,
    plateau,
    seeds_words,
    spread,
    toy_claim,
    toy_post,
    v_half_plateau,
)
from ...claims.verdicts import Rule
from ...model.validation import UsageError
from ...toy.analysis import pairing, perplexity_curve
from ...toy.figures import COLOURS, axis_titles, band, perplexity_bands, perplexity_by_vocab, titled
from ...toy.posts import GridClaim, ToyRun
from ..result import ClaimResult

POST = toy_post(
    "003",
    "Sparse attention 1: sticky plateau and rank collapse",
    "2026-01-08",
    "003_6c0dc1ca34b13b48.txt",
    "sticky_plateau",
    1,
)

PLATEAU_WORDS = "the longest plateau (logged steps within ±10% of its first value, above perplexity 1.5)"
RESOLUTION_WORDS = "and more than one logging interval (the resolution of a plateau length)"


@toy_claim("plateau_near_V/2", "a sticky plateau at perplexity V/2", "perplexity V/2", tol=0.2, min_points=5, below=0.8)
def PLATEAU(tol: float, min_points: int, below: float) -> Rule:
    """A plateau at V/2: after perplexity first falls below ``below`` V, >= ``min_points`` consecutive logged steps
    within ``±tol`` of V/2. Value: ``(steps, perplexity curve, V)``."""

    def decide(value):
        steps, ppl, V = value
        steps, ppl = np.asarray(steps), np.asarray(ppl, dtype=float)
        band = f"±{tol:.0%} of V/2 = {V / 2:g} (perplexity {num(V / 2 * (1 - tol))}–{num(V / 2 * (1 + tol))})"
        found = v_half_plateau(steps, ppl, V, tol=tol, min_points=min_points, below=below)
        if found:
            return True, (
                f"{found['n_points']} consecutive logged steps (steps {found['start_step']}–{found['end_step']}, "
                f"median perplexity {num(found['perplexity'])}) within {band}, needs >= {min_points}"
            )
        first, runs = near_half_runs(steps, ppl, V, tol, below)
        final, fall = f"final perplexity {num(ppl[-1])}", f"{below:g} V = {num(below * V)}"
        if first is None:
            return False, (
                f"perplexity never fell below {fall} ({final}), so no stay within {band} could count (needs >= "
                f"{min_points} consecutive logged steps there after falling below {below:g} V)"
            )
        longest = max((j - i + 1 for i, j in runs), default=0)
        return False, (
            f"after first falling below {fall} at step {int(steps[first])}, at most {longest} consecutive logged "
            f"steps within {band}, needs >= {min_points} ({final})"
        )

    return Rule(
        f"held if, after perplexity first falls below {below:g} V, at least {min_points} consecutive logged steps "
        f"lie within ±{tol:.0%} of V/2",
        decide,
    )


@toy_claim(
    "two_stage_branching",
    "tokens split in two groups on the plateau, then all four separate",
    "2 groups of 2, then 4",
    first=2,
    then=4,
)
def BRANCHING(first: int, then: int) -> Rule:
    """Value: ``(clusters mid-plateau or None without a plateau, clusters at the end, their steps)``."""

    def decide(value):
        mid, end, mid_step, end_step = value
        if mid is None:
            return None, "not testable here: the V=4 run has no plateau (no stretch within ±10% above perplexity 1.5)"
        return mid == first and end == then, (
            f"{mid} direction cluster(s) (cos > 0.95) at step {mid_step}, mid-plateau (needs {first}); "
            f"{end} at step {end_step}, the end (needs {then})"
        )

    return Rule(
        f"held if the embeddings form {first} direction clusters (cos > 0.95) mid-plateau and {then} at the end", decide
    )


@toy_claim(
    "rank_dynamics", "Q/K stay low-rank (sticky) during the plateau and grow after it", "sticky Q/K", min_seeds=2
)
def RANK(min_seeds: int) -> Rule:
    """W_Q's effective rank rises from mid-plateau to the end. Value: ``(mid-plateau ranks, end ranks, seeds without
    a plateau)``, over the seeds that have one."""

    def few(value):
        mid, _, no_plateau = value
        if len(mid) < min_seeds:
            return None, f"not testable here: fewer than {min_seeds} seeds have a plateau (none in seeds {no_plateau})"

    text = "held if W_Q's effective rank, mean over seeds, is higher at the end of training than mid-plateau "
    read, sides = lambda v: (v[0], v[1], {}), ("mid-plateau", "the end")
    return pair_rule(text + margin_words(), "W_Q's effective rank", True, read, sides, few)


def lengths(value) -> tuple:
    """A plateau comparison's value ``(lengths, lengths, log_every)`` (steps over seeds) as :func:`pair_rule` reads
    it: one logging interval is the resolution of a plateau length."""
    return value[0], value[1], {"resolution": value[2]}


@toy_claim(
    "plateau_gone_for_larger_n_embd",
    "the plateau disappears at n_embd {big} (vs 2)",
    "no plateau",
    big=8,
    one_seed=False,
)
def GONE(big: int, one_seed: bool) -> Rule:
    """The plateau shorter at n_embd ``big`` than at 2 (C = 4). Value: ``(lengths at 2, lengths at big, log_every)``."""

    def nothing_to_lose(value):
        if spread(value[0])[0] <= 0:
            return None, f"not testable here: no plateau at n_embd=2, C=4 either ({nums(np.ravel(value[0]))} steps)"

    return pair_rule(
        f"{seeds_words(one_seed)}held if {PLATEAU_WORDS}, mean over seeds, is shorter at n_embd={big} than at n_embd=2 "
        f"(C=4) {margin_words()} {RESOLUTION_WORDS}; not testable when n_embd=2 has no plateau (nothing to disappear)",
        "longest plateau",
        False,
        lengths,
        ("n_embd=2", f"n_embd={big}"),
        nothing_to_lose,
        unit=" steps",
    )


@toy_claim(
    "plateau_back_for_larger_C", "the plateau returns at C = {C} (vs 4)", "plateau returns", big=8, C=64, one_seed=False
)
def BACK(big: int, C: int, one_seed: bool) -> Rule:
    """The plateau longer at n_embd ``big``, context ``C`` than at C = 4. Value: ``(lengths at C = 4, lengths at C,
    log_every)``."""
    text = f"{seeds_words(one_seed)}held if {PLATEAU_WORDS}, mean over seeds, is longer at n_embd={big}, C={C} than at "
    text += f"C=4 {margin_words()} {RESOLUTION_WORDS}"
    return pair_rule(text, "longest plateau", True, lengths, ("C=4", f"C={C}"), unit=" steps")


SPECS = (PLATEAU, BRANCHING, RANK, GONE, BACK)

VOCAB = (4, 8, 16, 32)
STEPS, QUICK_STEPS = 5000, 300


def longest(result: dict) -> dict:
    """A run's longest plateau (:func:`~gpt2_posheads.claims.toy.plateau`)."""
    return plateau(result["steps"], perplexity_curve(result))


def mid_plateau(steps, pl: dict) -> int | None:
    """The index of the logged ``steps`` nearest the middle of the plateau ``pl`` (None without a plateau)."""
    if pl["start_step"] is None:
        return None
    return int(np.argmin(np.abs(np.asarray(steps) - (pl["start_step"] + pl["end_step"]) / 2)))


def branching(r4s: list[dict], seed: int) -> tuple[dict, dict] | tuple[None, None]:
    """The V = 4 run of ``seed``: its embeddings ``[snapshot, V, 2]``, their direction clusters and its plateau; W_Q's
    effective rank mid-plateau and at the end of every V = 4 run with a plateau (``(None, None)``: no such run)."""
    r4 = next((r for r in r4s if r["config"]["seed"] == seed), None)
    if not (r4 and r4["snapshots"]):
        return None, None
    emb = np.array([s["W_E"] for s in r4["snapshots"]])  # [snap, V, 2]
    clusters = [pairing(e) for e in emb]
    pl = longest(r4)
    at = mid_plateau(r4["snapshot_steps"], pl)
    mid = (clusters[at], r4["snapshot_steps"][at]) if at is not None else (None, None)
    found = dict(run=r4, embeddings=emb, clusters=clusters, plateau=pl, clusters_mid=mid[0], mid_step=mid[1])
    found["end_step"] = r4["snapshot_steps"][-1]
    ranks = {"mid": [], "end": [], "runs": [], "no_plateau": []}
    for r in r4s:
        er = r["effective_rank"]
        ranks["runs"].append(er)
        at_r = mid_plateau(er["step"], longest(r))
        if at_r is None:
            ranks["no_plateau"].append(r["config"]["seed"])
        else:
            ranks["mid"].append(er["W_Q"][at_r])
            ranks["end"].append(er["W_Q"][-1])
    return found, ranks


def judged_rows(run: ToyRun, curves, r4s, b, rk, glens, settings, every) -> list[tuple]:
    """The claims' rows (:meth:`~gpt2_posheads.toy.posts.ToyRun.finish`): the V/2 plateau of every curve, the V = 4
    branching ``b`` and ranks ``rk``, the plateau lengths ``glens`` per (n_embd, C) of ``settings``."""
    rows = []
    for r in curves:
        V, seed, ppl = r["config"]["V"], r["config"]["seed"], perplexity_curve(r)
        setting = f"V = {V}" + (f" (seed {seed})" if run.seeds > 1 else "")
        at = PLATEAU.at(f"V={V} seed={seed}", setting, post=f"perplexity V/2 = {V / 2:g}")
        found = v_half_plateau(r["steps"], ppl, V, **dict(PLATEAU.params))  # as PLATEAU states it
        shown = f"no plateau at V/2 = {V / 2:g}; final perplexity {num(np.asarray(ppl)[-1])}"
        if found:
            shown = f"perplexity {num(found['perplexity'])} (V/2 = {V / 2:g}) for steps {found['start_step']}–"
            shown += f"{found['end_step']}"
        rows.append((at, {"plateau": found, "final_perplexity": r["final_perplexity"]}, (r["steps"], ppl, V), shown))
    if b is not None:
        at_mid, mid_step, end_step, last = b["clusters_mid"], b["mid_step"], b["end_step"], b["clusters"][-1]
        mids, ends, no_plateau = rk["mid"], rk["end"], rk["no_plateau"]
        ranks = f"W_Q effective rank {num(spread(mids)[0])} mid-plateau vs {num(spread(ends)[0])} at the end (mean of "
        ranks = f"{ranks}{len(mids)} seeds)" if mids else "no plateau"
        clusters = f"{at_mid} clusters at step {mid_step} (mid-plateau), {last} at step {end_step}"
        clusters = clusters if at_mid is not None else "no plateau"
        measured = {"clusters_mid_plateau": at_mid, "step_mid_plateau": mid_step, "clusters_end": last}
        rank = dict(effective_rank_W_Q_mid_plateau=mids, effective_rank_W_Q_end=ends, seeds_without_plateau=no_plateau)
        at_b, at_r = BRANCHING.at("V=4", f"V = 4 (seed {run.seed})"), RANK.at("V=4", f"V = 4 ({len(r4s)} seeds)")
        rows += [
            (at_b, measured, (at_mid, last, mid_step, end_step), clusters),
            (at_r, rank, (mids, ends, no_plateau), ranks),
        ]
    n_cmp = len(run.comparison_seeds)
    big = max(d for d, _ in settings)
    long_c = max(c for d, c in settings if d == big)

    def lens(d, c):
        return f"{num(spread(glens[(d, c)])[0])} steps at n_embd={d}, C={c}"

    each = f"{nums(glens[(big, long_c)])} vs {nums(glens[(big, 4)])}"
    gone = {f"plateau_steps n_embd={d} C=4": glens[(d, 4)] for d, c in settings if c == 4}
    back = {f"plateau_steps n_embd={big} C={c}": glens[(big, c)] for d, c in settings if d == big}
    shown_gone = f"longest plateau {lens(big, 4)} vs {lens(2, 4)} (mean of {n_cmp} seeds)"
    shown_back = f"longest plateau {lens(big, long_c)} vs {lens(big, 4)} (mean of {n_cmp} seeds; each seed: {each})"
    at_gone = GONE.at(setting=f"V = 16, C = 4 ({n_cmp} seeds)", big=big)
    at_back = BACK.at(setting=f"V = 16, n_embd = {big} ({n_cmp} seeds)", big=big, C=long_c)
    rows.append((at_gone, gone, (glens[(2, 4)], glens[(big, 4)], every), shown_gone))
    return rows + [(at_back, back, (glens[(big, 4)], glens[(big, long_c)], every), shown_back)]


def branching_figures(b: dict, rk: dict, seed: int) -> dict[str, tuple[go.Figure, dict]]:
    """The V = 4 run's embeddings over training beside their direction clusters; the effective ranks."""
    emb, r4, pl = b["embeddings"], b["run"], b["plateau"]
    titles = ["token embeddings over training (start: small dot)", "direction clusters (cos > 0.95)"]
    fig = make_subplots(rows=1, cols=2, subplot_titles=titles)
    for t in range(emb.shape[1]):
        path = go.Scatter(x=emb[:, t, 0], y=emb[:, t, 1], mode="lines+markers", name=f"token {t}", marker=dict(size=3))
        fig.add_trace(path, 1, 1)
    fig.add_trace(go.Scatter(x=r4["snapshot_steps"], y=b["clusters"], name="clusters", mode="lines"), 1, 2)
    if pl["start_step"] is not None:
        grey = dict(fillcolor="grey", opacity=0.15, line_width=0, row=1, col=2)
        fig.add_vrect(x0=pl["start_step"], x1=pl["end_step"], **grey)
    axis_titles(fig, ("embedding dimension 1", "embedding dimension 2"))
    fig.update_xaxes(title_text="step (grey: the plateau)", row=1, col=2)
    fig.update_yaxes(title_text="number of clusters", dtick=1, tick0=0, range=[0, 4.5], row=1, col=2)
    fig.update_layout(title=f"V=4, seed {seed}: two-stage branching of the embeddings", height=480)
    ranks = go.Figure()
    for i, name in enumerate(("W_E", "W_Q", "W_K")):
        band(ranks, rk["runs"][0]["step"], [e[name] for e in rk["runs"]], name, COLOURS[i])
    titled(
        ranks, "V=4: effective rank (exp entropy of the normalised singular values)", "step", "effective rank (1 to 2)"
    )
    return {"branching": (fig, {"width": 1200}), "effective_rank": (ranks, {})}


@declare(
    POST,
    "toy_sticky_plateau",
    claims=SPECS,
    usage="""Sparse attention 1 (003): copying the current token with one attention layer (no positions)
gets stuck on a perplexity plateau near V/2; the embeddings branch in two stages; the plateau
disappears with more embedding dimensions and returns with a longer context; effective ranks.
The comparisons (plateau lengths, ranks) are judged on 3 seeds per setting.

    gpt2-posheads toy_sticky_plateau            # times: docs/posts/003-sticky-plateau.md
    gpt2-posheads toy_sticky_plateau --robustness  # + 480 grid runs: under 1 h (C=64 runs: 23 min on 2 cores)
    gpt2-posheads toy_sticky_plateau --quick    # smoke test

The claim as a function: gpt2_posheads.posts.sticky_plateau.sticky_plateau
(gpt2_posheads/posts/sticky_plateau/plateau.py).
""",
    options=(
        ToyRun.steps_option(STEPS, QUICK_STEPS),
        Option("--vocab", ",".join(map(str, VOCAB)), "comma-separated vocabulary sizes V", parse="int_list", low=2),
    ),
)
def sticky_plateau(*, vocab: Sequence[int] = VOCAB, **options) -> ClaimResult:
    """Train post 003's toy models and judge its claims (``toy_sticky_plateau``'s defaults). ``vocab``: the V of the
    perplexity curves (``quick``: the first two), each at the run's seeds (V = 4 also at the comparison seeds: the
    ranks); V = 16 trains at each (n_embd, C) setting at the comparison seeds (the plateau lengths). ``options``:
    :class:`~gpt2_posheads.toy.posts.ToyRun`'s (``quick``: also fewer settings)."""
    run = ToyRun.of("sticky_plateau", options, STEPS, QUICK_STEPS)
    vocab = list(vocab)
    if not vocab or any(not isinstance(v, int) or v < 2 for v in vocab):
        raise UsageError("vocab", f"{vocab!r} is out of range", "allowed one or more integers >= 2", "e.g. (4, 8)")
    vocab = vocab[: 2 if run.quick else None]
    base = run.base(log_points=200, task="copy_current", C=4, n_embd=2, snapshot_every=max(run.steps // 100, 1))
    seeds, cmp_seeds = run.run_seeds, run.comparison_seeds
    settings = [(2, 4), (8, 4), (8, 32)] if run.quick else [(2, 4), (4, 4), (8, 4), (8, 16), (8, 64)]
    print(
        f"toy_sticky_plateau: V {', '.join(map(str, vocab))} ({len(seeds)} seed(s)), V=4 and "
        f"{len(settings)} (n_embd, C) settings at V=16 ({len(cmp_seeds)} seeds each), {run.steps:,} steps",
        flush=True,
    )
    v_cfgs = [replace(base, V=v, seed=s) for v in vocab for s in seeds]
    v_cfgs += [replace(base, V=4, seed=s) for s in cmp_seeds if s not in seeds and 4 in vocab]
    g_cfgs = [replace(base, V=16, n_embd=d, C=c, seed=s, snapshot_every=0) for d, c in settings for s in cmp_seeds]
    res = run.train(v_cfgs + g_cfgs)
    v_res = [res[c.id()] for c in v_cfgs]
    r4s = [r for r in v_res if r["config"]["V"] == 4]
    by_setting: dict[tuple[int, int], list[dict]] = {}  # the V = 16 runs per (n_embd, C)
    for c in g_cfgs:
        by_setting.setdefault((c.n_embd, c.C), []).append(res[c.id()])
    glens = {k: [longest(r)["length_steps"] for r in rs] for k, rs in by_setting.items()}
    curves = [r for r in v_res if r["config"]["seed"] in seeds]
    b, rk = branching(r4s, run.seed)
    rows = judged_rows(run, curves, r4s, b, rk, glens, settings, base.log_every)
    figures = {"sticky_plateau": (perplexity_by_vocab(curves, vocab, "copying the current token, n_embd=2, C=4"), {})}
    if b is not None:
        figures.update(branching_figures(b, rk, run.seed))
    by_name = {f"n_embd={d}, C={c}": rs for (d, c), rs in by_setting.items()}
    title = "V=16: the plateau against embedding dimension and context length"
    figures["generality"] = (perplexity_bands(by_name, 16, title), {})
    result, numbers = ClaimResult("sticky_plateau"), dict(seeds=seeds, comparison_seeds=cmp_seeds)
    return run.finish(result, rows, figures, base, sticky_plateau_grid(), "003: sticky plateau", **numbers)


# --- the --robustness grid --------------------------------------------------------------------------------------

# The grid tests "the plateau returns at larger C" at the default run's C=64 and at C=16 (30 models, n_embd 8, one
# AVX2 core: ~0.05 s per step, the last layer attending from the last query alone; ~0.55 s with the full pattern).
GRID_LONG_CS = (16, 64)


def sticky_plateau_grid() -> list[GridClaim]:
    """003's headline claims (base: V 16, C 4, n_embd 2, no positions; one seed per test)."""

    def dims(b):
        named = {"d2": (2, 4), "d8": (8, 4), **{f"d8C{c}": (8, c) for c in GRID_LONG_CS}}
        return {k: replace(b, V=16, n_embd=d, C=c) for k, (d, c) in named.items()}

    def compared(r, a, b):
        return [longest(r[a])["length_steps"]], [longest(r[b])["length_steps"]], r[a]["config"]["log_every"]

    v16 = GridClaim(
        PLATEAU.at("V=16"), lambda b: {"v": replace(b, V=16)}, lambda r: (r["v"]["steps"], perplexity_curve(r["v"]), 16)
    )
    back = [
        GridClaim(BACK.at(f"C={c}", big=8, C=c, one_seed=True), dims, lambda r, c=c: compared(r, "d8", f"d8C{c}"))
        for c in GRID_LONG_CS
    ]
    return [v16, GridClaim(GONE.at(big=8, one_seed=True), dims, lambda r: compared(r, "d2", "d8")), *back]
