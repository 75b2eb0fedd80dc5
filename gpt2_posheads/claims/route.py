"""One route conclusion per model: which route does its sharpest previous-token head take?

A pure function of one model's claim records (``{claim key: {"verdict", "measured", "head", ...}}``, from
``summary.json`` or :func:`records_from_claims`), written down before it was measured on the generated known-answer
models (``docs/known-answers.md``): one of :data:`ROUTES`, with the rows that decided it. The numbers it reads are
three claims' measurements, each a frozen record that the judging script writes as the claim's ``measured``
(``.measured()``) and the rule reads back (``.read()``), from memory or ``summary.json`` alike, so the fields are
named once.

The rule, with ``A`` the sharpest previous-token head (the aggregator), ``kept`` the share of its previous-token mass
it keeps when ``W_pos`` is averaged in groups of 10 (``avg_prev_heads_unaffected``), ``below`` how much it loses when
what the layers below write is removed (mean-ablated from its query and key inputs) and ``relayed`` how much it loses
when the layers below are fed ``W_pos`` averaged in groups of 10 and their writes patched into its inputs
(``aggregator_above_layer0``); half = 50%, kept = 80% (the post rules' levels, ``claims.gpt2_post``):

1. ``sharp_prev_head`` not held: **none**; not testable (a claim the records lack is): **undetermined**.
2. ``kept`` not measured: **undetermined**.
3. ``kept < 50%`` (A needs ``W_pos``'s fine detail):
   A in layer 0 or ``below < 50%``: **wpos** (reads ``W_pos`` directly);
   ``below >= 50%`` and ``relayed >= 50%``: **relay** (the layers below pass ``W_pos`` on);
   otherwise **undetermined** (it needs ``W_pos`` and the layers below, but not ``W_pos`` through them).
4. ``50% <= kept < 80%``: **undetermined** (partly from ``W_pos``).
5. ``kept >= 80%`` (A does not need ``W_pos``'s fine detail): ``aggregator_above_layer0`` must be held (layer >= 1,
   ``below >= 50%``, ``relayed <= 20%``), and ``sources_upstream`` and ``mask_disrupts`` held (the early heads
   together carry it, and it needs them to see p-1); any of them not held or not testable: **undetermined**, naming
   them. Then ``early_self_suppressing`` held: **post**; not held and at least two, and at least half, of the early
   heads labelled prev-boosting: **boost**; otherwise **undetermined**.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from .gpt2_post import HALF, KEEP, POS_GROUP
from .verdicts import HELD, NOT_HELD, NOT_TESTABLE, Claim, finite

BELOW_DROP, RELAYED_DROP = "relative_drop_without_layers_below", "relative_drop_wpos_averaged_below"


@dataclass(frozen=True)
class PrevMassAveraged:
    """``avg_prev_heads_unaffected``'s measurement: each tracked head's previous-token mass (mean offset-1 diagonal)
    clean and with ``W_pos`` averaged in groups of ``group``, recorded as ``{"<head> clean -> g<group>": pair}``."""

    masses: Mapping[str, tuple[float, float]]
    group: int = POS_GROUP

    def measured(self) -> dict[str, tuple[float, float]]:
        return {f"{head} clean -> g{self.group}": pair for head, pair in self.masses.items()}

    @classmethod
    def read(cls, measured, group: int = POS_GROUP) -> PrevMassAveraged:
        """The pairs of a record's ``measured`` at ``group`` (one not two finite numbers: not measured, left out)."""
        suffix, masses = f" clean -> g{group}", {}
        for key, pair in measured.items() if isinstance(measured, Mapping) else ():
            pair_ok = isinstance(pair, (list, tuple)) and len(pair) == 2 and all(finite(x) for x in pair)
            if isinstance(key, str) and key.endswith(suffix) and pair_ok:
                masses[key[: -len(suffix)]] = (float(pair[0]), float(pair[1]))
        return cls(masses, group)

    def kept(self, head: str) -> float | None:  # averaged / clean; None where not measured or clean <= 0
        clean, averaged = self.masses.get(head, (math.nan, math.nan))
        return averaged / clean if clean > 0 else None


@dataclass(frozen=True)
class LayersBelowRemoved:
    """``aggregator_above_layer0``'s measurement: the head, its layer, and (layer >= 1) the relative drops of its
    previous-token mass without what the layers below write (``below``; None: not measured) and with them fed ``W_pos``
    averaged in groups of 10 (``relayed``; None: no learned ``W_pos``). Read back, a drop not finite is NaN."""

    head: str
    layer: int
    below: float | None = None
    relayed: float | None = None

    def measured(self) -> dict:
        below = {} if self.below is None else {BELOW_DROP: self.below, RELAYED_DROP: self.relayed}
        return {"head": self.head, "layer": self.layer, **below}

    @classmethod
    def read(cls, measured) -> LayersBelowRemoved | None:
        if not isinstance(measured, Mapping) or measured.get("layer") is None:
            return None
        below, relayed = measured.get(BELOW_DROP), measured.get(RELAYED_DROP, math.nan)
        as_float = lambda x: float(x) if finite(x) else math.nan  # noqa: E731
        head = str(measured.get("head") or "")
        return cls(head, int(measured["layer"]), as_float(below), None if relayed is None else as_float(relayed))


EARLY_FIELDS = ("aggregator", "early_prev_heads", "self_suppressing", "prev_boosting")


@dataclass(frozen=True)
class EarlyLabels:
    """``early_self_suppressing``'s measurement: the aggregator, the clear previous-token heads below it, and those
    labelled self-suppressing and prev-boosting by their raw-score profile."""

    aggregator: str
    early: tuple[str, ...]
    self_suppressing: tuple[str, ...]
    prev_boosting: tuple[str, ...]

    def measured(self) -> dict:
        return {k: v if k == "aggregator" else list(v) for k, v in zip(EARLY_FIELDS, asdict(self).values())}

    @classmethod
    def read(cls, measured) -> EarlyLabels:
        m = measured if isinstance(measured, Mapping) else {}
        return cls(str(m.get("aggregator") or ""), *(tuple(m.get(k) or ()) for k in EARLY_FIELDS[1:]))


POST, BOOST, WPOS, RELAY, NONE, UNDETERMINED = "post", "boost", "wpos", "relay", "none", "undetermined"
ROUTES: dict[str, str] = {
    POST: "the post's route: built from what earlier heads computed, with self-suppressing early heads",
    BOOST: "built from what earlier heads computed, with early heads that boost the previous token",
    WPOS: "reads W_pos directly",
    RELAY: "relays W_pos through earlier layers",
    NONE: "no sharp previous-token head",
    UNDETERMINED: "undetermined: the evidence disagrees",
}


# The route read from the weights alone (posts.gpt2_prev_heads.weight_route), and the weight label each causal route
# means (post, boost and a relayed W_pos are all built by earlier heads; undetermined has none).
READS_WPOS, BUILT, NOT_POSITIONAL = "reads W_pos directly", "built from earlier heads", "not positional"
LABELS = (READS_WPOS, BUILT, NOT_POSITIONAL)
ROUTE_LABELS = {POST: BUILT, BOOST: BUILT, RELAY: BUILT, WPOS: READS_WPOS, NONE: NOT_POSITIONAL, UNDETERMINED: None}
WEIGHT_KEY = "weight_route_built"  # the claim whose record holds the weight route (its ``measured``: head, label)


def weight_route_of(records: Mapping[str, Mapping]) -> Mapping | None:  # its head, label, reason; or None
    measured = _measured(records, WEIGHT_KEY)
    return measured if isinstance(measured, Mapping) and measured.get("label") else None


def weights_agree(route: str, label: str) -> bool | None:  # None where the causal route has no weight label
    want = ROUTE_LABELS.get(route)
    return None if want is None else want == label


@dataclass(frozen=True)
class Row:  # one claim as the conclusion read it: key, verdict, and the number or reason that counted
    key: str
    verdict: str
    evidence: str


@dataclass(frozen=True)
class RouteConclusion:
    """``route`` (a key of :data:`ROUTES`), its head, why in one sentence, the rows that decided it, and every
    claim record it was drawn from."""

    route: str
    head: str
    why: str
    rows: tuple[Row, ...]
    records: Mapping[str, Mapping] = field(default_factory=dict, compare=False, repr=False)

    @property
    def words(self) -> str:
        return ROUTES[self.route]

    def line(self) -> str:
        on = f" ({self.head})" if self.head else ""
        return f"{self.words}{on}: {self.why} [rows: {', '.join(r.key for r in self.rows)}]"

    def as_dict(self) -> dict:
        rows = [asdict(r) for r in self.rows]
        return dict(route=self.route, words=self.words, head=self.head, why=self.why, rows=rows)


def _record(records: Mapping[str, Mapping], key: str) -> Mapping:  # {} where the records lack the claim
    r = records.get(key)
    return r if isinstance(r, Mapping) else {}


def _verdict(records, key) -> str:  # a claim the records lack is not testable
    return str(_record(records, key).get("verdict", NOT_TESTABLE))


def _said(records, key) -> str:
    """What a row says for a person: its number, else its reason."""
    if not isinstance(r := records.get(key), Mapping):
        return f"not testable: no record of {key} (its command has not run on this model)"
    return str(r.get("readout") or r.get("why") or "")


def _measured(records, key):
    return _record(records, key).get("measured")


def kept_under_wpos_averaging(records: Mapping[str, Mapping], head: str) -> float | None:
    """The share of ``head``'s previous-token mass kept under ``W_pos`` averaged in groups of 10
    (``avg_prev_heads_unaffected``); None if not measured."""
    return PrevMassAveraged.read(_measured(records, "avg_prev_heads_unaffected"), POS_GROUP).kept(head)


def conclude(records: Mapping[str, Mapping]) -> RouteConclusion:
    """The route conclusion of one model from its claim records (the module doc's rule)."""
    sharp = _record(records, "sharp_prev_head")
    head = str(sharp.get("head") or (sharp.get("measured") or {}).get("head") or "")

    def row(key: str, evidence: str | None = None) -> Row:
        return Row(key, _verdict(records, key), _said(records, key) if evidence is None else evidence)

    rows: list[Row] = [row("sharp_prev_head")]

    def done(route: str, why: str, keys: Iterable[str] = ()) -> RouteConclusion:
        rows.extend(row(k) for k in keys if k not in {r.key for r in rows})
        return RouteConclusion(route, head if route != NONE else "", why, tuple(rows), dict(records))

    if rows[0].verdict == NOT_HELD:
        return done(NONE, "no previous-token head is sharp (ratio <= 0.1)")
    if rows[0].verdict != HELD:
        return done(UNDETERMINED, f"whether a head is sharp is {rows[0].verdict}: {rows[0].evidence}")

    kept = kept_under_wpos_averaging(records, head)
    kept_words = f"{head} keeps {{:.0%}} of its previous-token mass under W_pos averaged in groups of {POS_GROUP}"
    rows.append(row("avg_prev_heads_unaffected", None if kept is None else kept_words.format(kept)))
    if kept is None:
        return done(UNDETERMINED, f"{head}'s previous-token mass under W_pos averaging was not measured")

    # (layer, drop without the layers below, drop with W_pos averaged below): a drop not measured is NaN, and the
    # second is None on a model with no learned W_pos
    above = LayersBelowRemoved.read(_measured(records, "aggregator_above_layer0"))
    layer, below, relayed = (above.layer, above.below, above.relayed) if above else (None, math.nan, math.nan)
    rows.append(row("aggregator_above_layer0", _above_words(layer, below, relayed)))
    if layer is None:
        return done(UNDETERMINED, f"{head}'s layer and inputs were not measured (aggregator_above_layer0)")

    if layer > 0 and not finite(below):
        return done(UNDETERMINED, f"{head} sits in layer {layer}, and removing the layers below was not measured")
    if kept < HALF:
        if layer == 0 or below < HALF:
            return done(
                WPOS,
                f"{head} loses {1 - kept:.0%} of its previous-token mass when W_pos is averaged, and "
                + ("sits in layer 0" if layer == 0 else f"only {below:.0%} without what the layers below write"),
            )
        if relayed is not None and finite(relayed) and relayed >= HALF:
            return done(
                RELAY,
                f"{head} loses {1 - kept:.0%} when W_pos is averaged, {below:.0%} without what the layers below "
                f"write, and {relayed:.0%} when only they are fed averaged W_pos: they pass W_pos on",
            )
        return done(
            UNDETERMINED,
            f"{head} needs W_pos (keeps {kept:.0%}) and what the layers below write (loses {below:.0%} without "
            "it), but not W_pos through them" + ("" if relayed is None else f" (loses {relayed:.0%})"),
        )
    if kept < KEEP:
        partly = f"{head} keeps {kept:.0%} under W_pos averaging: partly from W_pos (neither < 50% nor >= 80%)"
        return done(UNDETERMINED, partly)

    # kept >= 80%: not W_pos's fine detail; built from what the layers below computed, from the early heads?
    built = ("aggregator_above_layer0", "sources_upstream", "mask_disrupts")
    against = ", ".join(f"{k} is {_verdict(records, k)}" for k in built if _verdict(records, k) != HELD)
    if against:
        return done(
            UNDETERMINED, f"{head} keeps {kept:.0%} under W_pos averaging (not from W_pos), but {against}", built
        )
    keys, labels = (*built, "early_self_suppressing"), _verdict(records, "early_self_suppressing")
    early = EarlyLabels.read(_measured(records, "early_self_suppressing"))
    n, n_self, n_boost = len(early.early), len(early.self_suppressing), len(early.prev_boosting)
    boosting = n_boost >= 2 and 2 * n_boost >= n
    if labels == HELD and not boosting:
        return done(POST, f"built from the early heads below it, {n_self} of {n} of them self-suppressing", keys)
    if labels == NOT_HELD and boosting:
        return done(BOOST, f"built from the early heads below it, {n_boost} of {n} of them prev-boosting", keys)
    neither = f"({n_self} and {n_boost} of {n}; early_self_suppressing is {labels})"
    why = "built from the early heads below it, but they are neither mostly self-suppressing nor mostly prev-boosting"
    return done(UNDETERMINED, f"{why} {neither}", keys)


def _percent(x: float) -> str:  # a rounding of zero is "0%", whatever the sign of what was rounded
    return "0%" if (s := f"{x:.0%}") == "-0%" else s


def _above_words(layer, below, relayed) -> str:
    if layer is None:
        return "not measured"
    if layer == 0:
        return "layer 0: nothing below it"
    out = f"layer {layer}; {_percent(below)} lower without the layers below" if finite(below) else f"layer {layer}"
    if relayed is None:
        return out + "; no learned W_pos to relay"
    if finite(relayed):
        return out + f"; {_percent(relayed)} lower with W_pos averaged only in what feeds them"
    return out


def records_from_claims(claims: Iterable[Claim]) -> dict[str, Mapping]:
    """``{claim key: record}`` from judged claims (a key met twice: the last)."""
    return {c.key: c.as_dict() for c in claims if c.key}


def route_conclusion_from_summaries(summaries: Iterable) -> RouteConclusion:
    """The conclusion of one model from its scripts' summaries (a claim key met twice: the last)."""
    return conclude(records_from_claims(c for s in summaries for c in s.claims))
