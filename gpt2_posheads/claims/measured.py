"""What the route conclusion (:mod:`gpt2_posheads.claims.route`) reads of three claims' measurements: one frozen
record each, which the judging script writes as the claim's ``measured`` (:meth:`measured`) and the route reads back
(:meth:`read`), from memory or ``summary.json`` alike, so the fields are named once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from .gpt2_post import POS_GROUP
from .verdicts import finite

BELOW_DROP = "relative_drop_without_layers_below"
RELAYED_DROP = "relative_drop_wpos_averaged_below"


@dataclass(frozen=True)
class PrevMassAveraged:
    """``avg_prev_heads_unaffected``'s measurement: each tracked head's previous-token mass (mean offset-1 diagonal)
    clean and with ``W_pos`` averaged in groups of ``group``, recorded as ``{"<head> clean -> g<group>": pair}``."""

    masses: Mapping[str, tuple[float, float]]
    group: int = POS_GROUP

    @staticmethod
    def _suffix(group: int) -> str:
        return f" clean -> g{group}"

    def measured(self) -> dict[str, tuple[float, float]]:
        return {head + self._suffix(self.group): pair for head, pair in self.masses.items()}

    @classmethod
    def read(cls, measured, group: int = POS_GROUP) -> PrevMassAveraged:
        """The pairs of a record's ``measured`` at ``group`` (one not two finite numbers: not measured, left out)."""
        suffix, masses = cls._suffix(group), {}
        for key, pair in measured.items() if isinstance(measured, Mapping) else ():
            if not (isinstance(key, str) and key.endswith(suffix) and isinstance(pair, (list, tuple))):
                continue
            if len(pair) == 2 and all(finite(x) for x in pair):
                masses[key[: -len(suffix)]] = (float(pair[0]), float(pair[1]))
        return cls(masses, group)

    def kept(self, head: str) -> float | None:
        """averaged / clean of ``head``; None where not measured or clean <= 0."""
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
        out = {"head": self.head, "layer": self.layer}
        if self.below is not None:
            out.update({BELOW_DROP: self.below, RELAYED_DROP: self.relayed})
        return out

    @classmethod
    def read(cls, measured) -> LayersBelowRemoved | None:
        if not isinstance(measured, Mapping) or measured.get("layer") is None:
            return None
        below, relayed = measured.get(BELOW_DROP), measured.get(RELAYED_DROP, math.nan)
        return cls(
            str(measured.get("head") or ""),
            int(measured["layer"]),
            float(below) if finite(below) else math.nan,
            None if relayed is None else float(relayed) if finite(relayed) else math.nan,
        )


@dataclass(frozen=True)
class EarlyLabels:
    """``early_self_suppressing``'s measurement: the aggregator, the clear previous-token heads below it, and those
    labelled self-suppressing and prev-boosting by their raw-score profile."""

    aggregator: str
    early: tuple[str, ...]
    self_suppressing: tuple[str, ...]
    prev_boosting: tuple[str, ...]

    def measured(self) -> dict:
        return {
            "aggregator": self.aggregator,
            "early_prev_heads": list(self.early),
            "self_suppressing": list(self.self_suppressing),
            "prev_boosting": list(self.prev_boosting),
        }

    @classmethod
    def read(cls, measured) -> EarlyLabels:
        m = measured if isinstance(measured, Mapping) else {}
        return cls(
            str(m.get("aggregator") or ""),
            *(tuple(m.get(k) or ()) for k in ("early_prev_heads", "self_suppressing", "prev_boosting")),
        )
