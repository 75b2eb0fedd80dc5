"""The verdict every claim must get on every compiled model and on ``mini-gpt2``, from how each model is built.

Written down before any claim was measured on the models; ``tests/organism/test_known_answers.py`` runs every claim
script of the GPT-2 post and the organism report on them and asserts this table. Where a verdict differs, a rule or a
construction is wrong and is fixed; the table is never edited to match a measurement. ``mini-gpt2``, the trained
organism (a layer-0 previous-token head reading an alternating ``W_pos``, the toy post's route), has no geometry set by
hand: those rows are ``None``. The table is data, ``known_answers.json`` beside this module, with the answers of the
GPT-2-small stand-in (:mod:`~gpt2_posheads.organism.standin`): where they differ from route-gpt2's, the heads each
script measures with its defaults, its route.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..claims.catalogue import claims

MODELS = ("route-gpt2", "lookalike-wpos", "lookalike-boost", "lookalike-decoy", "lookalike-none", "mini-gpt2")
_TABLE = json.loads(Path(__file__).with_name("known_answers.json").read_text(encoding="utf-8"))
# claim key -> {model: (verdict, reason from the construction)}, None where it is not set
KNOWN: dict[str, dict[str, tuple[str, str] | None]] = {
    k: {m: v if v is None else tuple(v) for m, v in row.items()} for k, row in _TABLE["known"].items()
}
# model -> (its route conclusion, claims.route.conclude, and why)
ROUTE_CONCLUSIONS: dict[str, tuple[str, str]] = {m: tuple(v) for m, v in _TABLE["route_conclusions"].items()}
_STANDIN_DIFFERS: dict[str, tuple[str, str]] = {k: tuple(v) for k, v in _TABLE["standin_differs"].items()}
STANDIN_HEADS: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in _TABLE["standin_heads"].items()}
STANDIN_ROUTE: tuple[str, str] = tuple(_TABLE["standin_route"])

REPORT = "mini_gpt2_report"  # the command that judges the organism's targets (claims.organism)


def script_of(key: str) -> str:  # its declaration's, else the organism report's (a behaviour target)
    declared = claims().get(key)
    return declared.script if declared else REPORT


def standin_expected() -> dict[tuple[str, str], tuple[str, str]]:
    """``{(script, claim key): (verdict, reason)}`` for the stand-in: route-gpt2's (the same route; the organism report
    is not run on it), with ``standin_differs`` where its shape or its head names change the answer."""
    out = {k: v[MODELS[0]] for k, v in KNOWN.items() if v.get(MODELS[0]) is not None and script_of(k) != REPORT}
    out.update(_STANDIN_DIFFERS)
    return {(script_of(k), k): v for k, v in out.items()}


def expected(model: str) -> dict[tuple[str, str], tuple[str, str]]:
    """``{(script, claim key): (verdict, reason)}`` for ``model``, leaving out what its construction does not set."""
    return {(script_of(k), k): v[model] for k, v in KNOWN.items() if v.get(model) is not None}
