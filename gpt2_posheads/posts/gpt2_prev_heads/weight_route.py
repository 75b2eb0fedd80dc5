"""The route read from the weights: the sharpest previous-token head's positional source, with no data run.

    gpt2-posheads weight_route --model route-gpt2
    gpt2-posheads weight_route --model gpt2 --n-positions 256

The post's L4H11 "is best thought of as an aggregator of signals from the preceding previous-token heads", while early
heads compute position themselves; the causal route conclusion (gpt2_posheads.claims.route) tells them apart by
intervening on prompts, this script by the weights alone. Every head's attention from positions alone: W_pos and the
mean token through its layer's LayerNorm at its typical norm, the query-key circuit with its biases, the causal softmax
(direct), and with what every earlier head writes from its own positional pattern through its OV circuit (composed; MLPs
applied to the mean stream, a token copied by an upstream head matched by the head's query). The sharpest previous-token
head by the composed circuit gets a label (route_label, a rule written before anything was measured): reads W_pos
directly, built from earlier heads, or not positional; weight_route_built is held when it is built from earlier heads.
Not testable on rotary, ALiBi or position-free models, or without a sharp previous-token head by the weights. Figure:
each head's previous-token mass by the direct and by the composed circuit.
"""

from __future__ import annotations

import math
from functools import partial

import torch

from ...analysis.weight_route import N_POSITIONS, not_applicable, positional_circuits, upstream_contributions
from ...claims.catalogue import Option
from ...claims.gpt2_post import HALF, ROUTE, SHARP_RATIO, post_claim
from ...claims.route import BUILT, LABELS, NOT_POSITIONAL, READS_WPOS, ROUTE_LABELS  # noqa: F401 - names of this claim
from ...claims.verdicts import Precondition, finite, predicate
from ...model.state import measures_caller_model
from ...report.plotting import heatmap
from ..result import ClaimResult
from ._run import ModelRun, claim_script, unprompted_run

# The levels of route_label, set from the post before anything was measured: sharp is a composed ratio <= SHARP_RATIO
# (0.10; L4H11 0.01), "relies on" at least HALF (50%) of its composed previous-token mass.
DIRECT_SHARE = HALF
HEADS_SHARE = HALF
N_CARRIERS = 3  # the upstream heads named in the record (those whose removal costs the most)


def route_label(
    top_offset: int, ratio: float, direct_prev: float, composed_prev: float, without_heads: float, layer: int
) -> tuple[str, str]:
    """``(label, reason)`` of the sharpest previous-token head by the composed circuit (``top_offset``: its pattern's
    greatest diagonal; ``ratio``: second-greatest over greatest; ``direct_prev``/``composed_prev``: its previous-token
    mass by each circuit; ``without_heads``: by the composed circuit with every upstream head's write removed from its
    input; ``layer``: its layer). A pure function of these numbers:

    1. its greatest diagonal is not the previous token, or its ratio > SHARP_RATIO: **not positional**;
    2. ``direct_prev >= DIRECT_SHARE x composed_prev`` (or layer 0): **reads W_pos directly**;
    3. ``composed_prev - without_heads >= HEADS_SHARE x composed_prev``: **built from earlier heads**;
    4. otherwise **reads W_pos directly**: the layers below build it, but not their heads; the MLPs' writes are a
       function of the embeddings at the head's own position (W_pos read through them)."""
    if top_offset != 1 or not finite(ratio) or ratio > SHARP_RATIO:
        what = "its greatest diagonal is not the previous token" if top_offset != 1 else f"ratio {ratio:.3g}"
        return NOT_POSITIONAL, f"no sharp previous-token head by the weights: {what} (needs <= {SHARP_RATIO:g})"
    share = direct_prev / composed_prev if composed_prev > 0 else math.nan
    shown = f"direct previous-token mass {direct_prev:.3g} of composed {composed_prev:.3g} ({share:.0%})"
    if layer == 0 or share >= DIRECT_SHARE:
        return READS_WPOS, f"{shown}: the embeddings alone give >= {DIRECT_SHARE:.0%} of it"
    heads = 1 - without_heads / composed_prev
    shown += f"; without the upstream heads' writes {without_heads:.3g} ({heads:.0%} lost)"
    if heads >= HEADS_SHARE:
        return BUILT, f"{shown}: earlier heads carry >= {HEADS_SHARE:.0%} of it"
    return READS_WPOS, f"{shown}: the MLPs below build it from the embeddings at its own position, not earlier heads"


@partial(
    predicate,
    f"held if the route label of the sharpest previous-token head by the composed weight circuit (ratio <= "
    f"{SHARP_RATIO:g}) is '{BUILT}': its direct circuit gives < {DIRECT_SHARE:.0%} of its composed previous-token "
    f"mass and removing the upstream heads' writes takes >= {HEADS_SHARE:.0%}",
)
def _built(record) -> tuple[bool, str]:
    return record["label"] == BUILT, f"{record['head']}: {record['label']} ({record['reason']})"


BUILT_SPEC = post_claim(
    "weight_route_built",
    "the sharpest previous-token head reads the previous position from earlier heads, not directly from W_pos "
    "(by the weights)",
    "L4H11: an aggregator of the earlier heads' signals",
    _built,
    ROUTE,
    "a head that reads W_pos finds p-1 in its direct circuit",
)
SPECS = (BUILT_SPEC,)


def measure(model, n_positions: int = N_POSITIONS) -> dict:
    """``{"circuits", "table", "record", "upstream"}``: the circuits, their per-head table, the route record of the
    sharpest previous-token head by the composed circuit (``head``, ``label``, ``reason``, its numbers and
    ``carried_by``: the upstream heads whose removal costs it the most) and the upstream table (``None`` in layer 0)."""
    c = positional_circuits(model, n_positions)
    table = c.table()
    prev = table[table.composed_top == 1]
    pick = (prev if len(prev) else table).sort_values(["composed_ratio", "composed_prev"], ascending=[True, False])
    row = pick.iloc[0]
    layer, upstream, without = int(row.layer), None, float(row.composed_prev)
    if layer > 0:
        upstream, without = upstream_contributions(model, c, layer, int(row["index"]))
    x = {k: float(row[k]) for k in ("direct_prev", "composed_prev", "composed_ratio")}
    label, reason = route_label(
        int(row.composed_top), x["composed_ratio"], x["direct_prev"], x["composed_prev"], without, layer
    )
    carried = [] if upstream is None else [(r.source, float(r.drop)) for r in upstream.head(N_CARRIERS).itertuples()]
    record = dict(head=str(row["head"]), label=label, reason=reason, **x, without_heads=without, carried_by=carried)
    record["n_positions"] = int(c.patterns.shape[-1])
    return {"circuits": c, "table": table, "record": record, "upstream": upstream}


def route_record(model, n_positions: int = N_POSITIONS) -> dict:
    """The route record of :func:`measure` (``head``, ``label``, ``reason`` and its numbers), or on a model without
    learned absolute positions ``{"head": "", "label": "not testable", "reason": why}``: one model's line of an atlas
    (``head_atlas --route weights``)."""
    why = not_applicable(model)
    return {"head": "", "label": "not testable", "reason": why} if why else measure(model, n_positions)["record"]


def figure(table, n_layers: int, n_heads: int, label: str):
    """The previous-token mass of every head by the direct and by the composed circuit, ``[layer, head]`` each."""
    grid = lambda col: torch.tensor(table[col].to_numpy()).reshape(n_layers, n_heads)  # noqa: E731
    z = torch.cat([grid("direct_prev"), torch.full((n_layers, 1), float("nan")), grid("composed_prev")], dim=1)
    x = [f"direct H{h}" for h in range(n_heads)] + [" "] + [f"composed H{h}" for h in range(n_heads)]
    title = f"{label}: previous-token mass by the weights"
    return heatmap(z, x, list(range(n_layers)), title, ylabel="layer", zmin=0, zmax=1)


def _console(result: ClaimResult, options: dict) -> None:
    r = result.numbers.get("record")
    print(f"{r['head']}: {r['label']} ({r['reason']})" if r else f"not applicable: {result.numbers['not_applicable']}")


@claim_script(
    "weight_route",
    order=10,
    claims=SPECS,
    options=(Option("--n-positions", N_POSITIONS, "positions the circuits span (capped at n_ctx)", int, low=3),),
    ranking=False,
    console=_console,
)
@measures_caller_model
def weight_route(model=None, *, n_positions: int = N_POSITIONS, run: ModelRun | None = None) -> ClaimResult:
    """The route of the sharpest previous-token head read from the weights, judged as ``weight_route_built``.

    ``run``: its model and label (nothing runs on prompts); ``n_positions``: capped at the context. ``numbers``:
    ``record`` (the head, its label, the reason and its numbers) or ``not_applicable``; ``tables``: ``circuits`` (every
    head's direct and composed statistics) and ``upstream`` (each upstream head's contribution).
    """
    run = unprompted_run(model, run)
    model, result = run.model, ClaimResult("weight_route", run.label)
    if (why := not_applicable(model)) is not None:
        result.numbers["not_applicable"] = why
        no_wpos = [Precondition("learned W_pos", False, why)]
        result.claims = [BUILT_SPEC.judge({"not_applicable": why}, preconditions=no_wpos)]
        return result
    m = measure(model, n_positions)
    r = m["record"]
    result.numbers.update(record=r, n_positions=r["n_positions"])
    result.table(m["table"], "circuits")
    if m["upstream"] is not None:
        result.table(m["upstream"], "upstream")
    result.figure(figure(m["table"], model.cfg.n_layers, model.cfg.n_heads, run.label), "prev_mass_by_weights")
    sharp = f"{r['head']}: {r['reason']}"
    pre = [Precondition("a sharp previous-token head by the weights", r["label"] != NOT_POSITIONAL, sharp)]
    result.claims = [BUILT_SPEC.judge(r, r, pre, head=r["head"], readout=f"{r['head']}: {r['label']}")]
    return result
