"""Score the route conclusion on generated known-answer models: one model at a time, then the confusion matrix.

The route is measured by the function :func:`score` is handed (the post's claims on one run,
:func:`gpt2_posheads.posts.gpt2_prev_heads.route.route_records`, a layer above this one) and compared with the card.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

import pandas as pd

from ..claims.route import NONE, ROUTES
from ..claims.verdicts import HELD
from .generator import Generated, write

N_PROMPTS, SEQ_LEN = 4, 256  # WikiText-2 prompts each model is measured on (compiled mechanisms need few)
N_PATTERN_PROMPTS = 2  # of them, the prompts the masking compares pattern by pattern
# (model, prompts, n_pattern_prompts=...) -> {claim key: record}: the claims the route conclusion reads
MeasureRecords = Callable[..., Mapping[str, Mapping]]


@dataclass
class Scored:
    """One generated model, measured: its card's answer beside the conclusion and the head the toolkit found."""

    name: str
    kind: str
    route: str  # the true route (the card's)
    ambiguous: bool
    aggregator: str | None  # the card's
    concluded: str
    found: str | None  # the sharp previous-token head the toolkit found (None: no head was sharp)
    seconds: float = 0.0  # wall time: write, load, measure
    causal_seconds: float = 0.0  # of it, the causal route conclusion's: its claims measured and concluded
    weight: str = ""  # the route label read from the weights (``weigh``), "" when not asked for
    weight_head: str = ""  # the head it is about
    weight_seconds: float = 0.0  # the weight route's wall time (the model already loaded)
    conclusion: dict = field(default_factory=dict)  # RouteConclusion.as_dict()
    records: dict = field(default_factory=dict)  # every claim record the conclusion read

    right = property(lambda self: self.concluded == self.route)
    aggregator_right = property(lambda self: self.found == self.aggregator)

    def as_dict(self) -> dict:  # every field but records, in their order
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "records"}


def prompts_for(tokenizer, n_prompts: int = N_PROMPTS, seq_len: int = SEQ_LEN):
    """``[n_prompts, seq_len]`` WikiText-2 prompts (shipped with the repository), BOS first."""
    from ..analysis.prompts import make_prompts, wikitext_documents

    return make_prompts(tokenizer, n_prompts, seq_len, docs=wikitext_documents())


def score(
    g: Generated,
    workdir: Path,
    n_prompts: int = N_PROMPTS,
    seq_len: int = SEQ_LEN,
    keep: bool = False,
    *,
    measure: MeasureRecords,
    weigh: Callable[..., Mapping] | None = None,
) -> Scored:
    """Write ``g`` under ``workdir`` (removed afterwards unless ``keep``), measure its route conclusion (``measure``:
    the claims it reads, as records) and, with ``weigh`` (model -> a record with ``label`` and ``head``:
    :func:`gpt2_posheads.posts.gpt2_prev_heads.weight_route.measure`'s), its weight route, each timed apart."""
    from ..claims.route import conclude
    from ..model.loading import load_model

    start = time.perf_counter()
    folder = write(g, Path(workdir) / g.name)
    try:
        model = load_model(folder, device="cpu")
        weight, t_weight = {}, 0.0
        if weigh is not None:
            t0 = time.perf_counter()
            weight = dict(weigh(model))
            t_weight = time.perf_counter() - t0
        t0 = time.perf_counter()
        prompts = prompts_for(model.tokenizer, n_prompts, seq_len)
        records = dict(measure(model, prompts, n_pattern_prompts=N_PATTERN_PROMPTS))
        c = conclude(records)
        t_causal = time.perf_counter() - t0
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    sharp = records["sharp_prev_head"]
    found = (sharp.get("head") or None) if sharp["verdict"] == HELD else None
    answer = [g.card[k] for k in ("kind", "route", "ambiguous")] + [g.card.get("aggregator")]
    weights = dict(weight=weight.get("label", ""), weight_head=weight.get("head", ""), weight_seconds=t_weight)
    timed = dict(seconds=time.perf_counter() - start, causal_seconds=t_causal)
    return Scored(g.name, *answer, c.route, found, conclusion=c.as_dict(), records=records, **timed, **weights)


def confusion(scored: Sequence[Scored]) -> pd.DataFrame:
    """True route (rows) x concluded route (columns), every route of :data:`~gpt2_posheads.claims.route.ROUTES`."""
    return label_confusion([(s.route, s.concluded) for s in scored], list(ROUTES), ("true", "concluded"))


def label_confusion(
    pairs: Sequence[tuple[str, str]], labels: Sequence[str], names: tuple[str, str] = ("expected", "weights")
) -> pd.DataFrame:
    """``(expected, got)`` label pairs counted: expected (rows) x got (columns), over ``labels`` (any other value
    gets its own row or column); ``names``: the two axes'."""
    rows = list(dict.fromkeys([*labels, *(e for e, _ in pairs)]))
    cols = list(dict.fromkeys([*labels, *(g for _, g in pairs)]))
    m = pd.DataFrame(0, index=pd.Index(rows, name=names[0]), columns=pd.Index(cols, name=names[1]))
    for e, g in pairs:
        m.loc[e, g] += 1
    return m


def aggregator_found(scored: Sequence[Scored]) -> tuple[int, int, int, int]:
    """``(found, with an aggregator, no sharp head found, without one)``: models with an aggregator that had it found
    as their sharpest previous-token head, and models without one that had no sharp head."""
    with_agg = [s for s in scored if s.aggregator is not None]
    without = [s for s in scored if s.aggregator is None]
    return sum(s.aggregator_right for s in with_agg), len(with_agg), sum(s.found is None for s in without), len(without)


def report(scored: Sequence[Scored]) -> str:
    """The confusion matrix, the aggregator-found rate, and each model off the diagonal with its deciding rows."""
    m = confusion(scored)
    found, n_agg, none_ok, n_none = aggregator_found(scored)
    lines = [
        f"{len(scored)} generated models: {sum(s.right for s in scored)} on the diagonal",
        "",
        "true \\ concluded  " + "  ".join(f"{c:>12}" for c in m.columns),
        *(f"{r:>16}  " + "  ".join(f"{int(v):>12}" for v in m.loc[r]) for r in m.index),
        "",
        f"aggregator found: {found} of {n_agg} models that have one; no sharp head found: {none_ok} of {n_none} "
        f"models without one ({NONE})",
    ]
    for s in scored:
        if not s.right or not s.aggregator_right:
            lines += [
                f"  {s.name} ({s.kind}): true {s.route}, concluded {s.concluded}; aggregator {s.aggregator}, "
                f"found {s.found}",
                *(f"      {row['key']}: {row['verdict']}: {row['evidence']}" for row in s.conclusion.get("rows", [])),
                f"      why: {s.conclusion.get('why', '')}",
            ]
    return "\n".join(lines)
