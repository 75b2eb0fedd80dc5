"""The claim record on disk: one pair of functions writes and reads ``summary.json``.

A verdict is a :class:`~gpt2_posheads.claims.verdicts.Claim` from the moment a rule decides it until a person reads
it. :func:`write_summary` turns a run's claims and numbers into ``summary.json``; :func:`read_summary` turns the file
back into a :class:`Summary` whose ``claims`` are :class:`Claim` objects again. Nothing else parses a summary: the
results page, ``compare_results``, the organism report and the notebooks read through :func:`read_summary`, so a
field is named in one place and a malformed file is refused in one place (:class:`SummaryError`, naming the file).

Beside it, every results folder holds the toolkit's manifest (:data:`MANIFEST`: the files a run wrote there, the
script, and the model the results are of, with its weights fingerprint); :func:`recorded_fingerprint` reads the
fingerprint, which tells whether two folders hold results of one model.

``summary.json``::

    {"schema_version": 2, "script": ..., "model": ..., <the run's own numbers>,
     "claims": [{"claim", "post", "measured", "rule", "verdict", "why", "key"?, "head"?, "readout"?, "role"?, ...}],
     "verdicts": {"held": n, "not held": n, "not testable": n}, "figures": [...], "finished_at": ..., "elapsed_s": ...}

``schema_version`` (:data:`SCHEMA_VERSION`) names the layout above. Version 1 is the same layout with two fields
named otherwise: a claim's ``readout`` was ``shown`` and its ``role`` was ``tells`` (:data:`V1_NAMES`); it is read
with them renamed, so results written by an older toolkit stay readable. A summary without a version was written
before the field existed: version 1. A version above :data:`SCHEMA_VERSION` comes from a later toolkit,
whose layout this one cannot know: :func:`read_summary` refuses it, saying to upgrade, rather than misread it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..model.paths import write_whole_text
from .verdicts import CLAIM_FIELDS, OPTIONAL_FIELDS, VERDICTS, Claim, verdict_counts

SCHEMA_VERSION = 2  # the layout of summary.json this toolkit writes, and the newest it reads
V1_NAMES = {"shown": "readout", "tells": "role"}  # a claim's fields as version 1 named them -> their names now


MANIFEST = ".gpt2_posheads.json"  # in every folder the toolkit writes: {"files", "folders", "script", "model"?, ...}


def read_manifest(folder: str | Path) -> dict:
    """The manifest of ``folder`` (``{"files": [...], "folders": [...], ...}``), empty when there is none."""
    try:
        m = json.loads((Path(folder) / MANIFEST).read_text())
        return m if isinstance(m, dict) else {}
    except (OSError, ValueError):
        return {}


def recorded_fingerprint(folder: str | Path) -> str | None:
    """The weights fingerprint of the model whose results ``folder`` holds, as its manifest records it
    (:mod:`gpt2_posheads.model.folder`; a hub model's is its name), or ``None``: no manifest, no model, or a
    hash of part of the weights (12 hex digits), which no whole-file fingerprint can be compared with."""
    model = read_manifest(folder).get("model")
    fingerprint = model.get("fingerprint") if isinstance(model, dict) else None
    if not isinstance(fingerprint, str) or not fingerprint or re.fullmatch(r"[0-9a-f]{12}", fingerprint):
        return None
    return fingerprint


class SummaryError(ValueError):
    """A ``summary.json`` (or a claim in it) that this toolkit did not write, or that was cut short."""


def jsonable(x):
    """``x`` made JSON-safe: claims as records, tensors and arrays as lists, DataFrames as rows, paths as strings,
    non-finite floats as ``null`` (JSON has no NaN)."""
    import pandas as pd

    if isinstance(x, Claim):
        return jsonable(x.as_dict())
    if hasattr(x, "detach") and hasattr(x, "tolist"):  # a torch tensor, without importing torch here
        return jsonable(x.detach().cpu().tolist())
    if isinstance(x, np.ndarray):
        return jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, pd.DataFrame):
        return jsonable(x.to_dict(orient="records"))
    if isinstance(x, Path):
        return str(x)
    return x


def claim_from_dict(d: dict, where: str = "claim") -> Claim:
    """The :class:`Claim` a record holds; a record without one of :data:`CLAIM_FIELDS`, or with a verdict outside
    ``held`` / ``not held`` / ``not testable``, is a :class:`SummaryError` naming ``where``."""
    if not isinstance(d, dict):
        raise SummaryError(f"{where}: a claim must be a JSON object, got {type(d).__name__}")
    missing = [k for k in CLAIM_FIELDS if k not in d]
    if missing:
        raise SummaryError(f"{where}: a claim without {', '.join(missing)}")
    if d["verdict"] not in VERDICTS:
        raise SummaryError(f"{where}: verdict {d['verdict']!r} is not one of {', '.join(VERDICTS)}")
    as_read = ("post", "measured", "verdict")  # kept as written; the rest are text
    return Claim(
        **{k: d[k] if k in as_read else str(d[k]) for k in CLAIM_FIELDS},
        **{k: str(d.get(k) or "") for k in OPTIONAL_FIELDS},
        extra={k: v for k, v in d.items() if k not in CLAIM_FIELDS + OPTIONAL_FIELDS},
    )


@dataclass
class Summary:
    """A run's ``summary.json``: its claims as :class:`Claim` objects and the rest of its numbers in ``data``.

    ``summary.get(name)`` reads one of the run's own numbers (what a script records beside its claims differs from
    script to script, so those stay a mapping); the fields every summary has are attributes.
    """

    claims: list[Claim]
    data: dict = field(default_factory=dict)
    path: Path | None = None
    schema_version: int = SCHEMA_VERSION

    # the fields every summary has
    script = property(lambda self: str(self.data.get("script", "")))
    model = property(lambda self: str(self.data.get("model") or ""))
    quick = property(lambda self: bool(self.data.get("quick", False)))
    figures = property(lambda self: list(self.data.get("figures", [])))
    finished_at = property(lambda self: str(self.data.get("finished_at", "")))

    def get(self, name: str, default: Any = None) -> Any:
        return self.data.get(name, default)

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    def __contains__(self, name: str) -> bool:
        return name in self.data

    def claim(self, key: str) -> Claim | None:
        """The claim with this key (or, for records without keys, this sentence); ``None`` when absent."""
        return next((c for c in self.claims if (c.key or c.claim) == key), None)

    def by_key(self) -> dict[str, Claim]:
        """``{key: claim}`` in the order written (a claim without a key is named by its sentence)."""
        return {c.key or c.claim: c for c in self.claims}

    def __iter__(self) -> Iterator[Claim]:
        return iter(self.claims)


def write_summary(path: str | Path, data: dict, claims: Sequence[Claim]) -> Path:
    """Write ``summary.json`` at ``path``: :data:`SCHEMA_VERSION` (the writer's: a ``schema_version`` in ``data`` does
    not replace it), ``data``, the claims as records and their verdict counts, whole or not at all (a temporary file of
    this process renamed over it; a full disk or an interruption leaves no temporary behind). The one writer of a
    summary: every script's results folder and every test write through it."""
    for c in claims:
        if not isinstance(c, Claim):
            raise TypeError(f"claims: every claim must be a Claim, got {type(c).__name__}")
    obj = {"schema_version": SCHEMA_VERSION, **{k: v for k, v in data.items() if k != "schema_version"}}
    obj.update(claims=[c.as_dict() for c in claims], verdicts=verdict_counts(list(claims)))
    return write_whole_text(path, json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")


def schema_version(obj: dict, where: str = "summary") -> int:
    """The layout version of a parsed summary: its ``schema_version``, 1 when it has none (written before the field
    existed). A version that is not a whole number >= 1 is a :class:`SummaryError`, and so is one above
    :data:`SCHEMA_VERSION`, saying to upgrade: a later layout read as this one would give wrong verdicts quietly."""
    version = obj.get("schema_version", 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SummaryError(f"{where}: schema_version {version!r} is not a summary version (a whole number >= 1)")
    if version > SCHEMA_VERSION:
        raise SummaryError(
            f"{where}: schema version {version} is newer than this toolkit reads (up to {SCHEMA_VERSION}); "
            "upgrade gpt2_posheads to read it"
        )
    return version


def summary_from_dict(obj: Any, where: str = "summary") -> Summary:
    """A :class:`Summary` from a parsed ``summary.json`` (see :func:`read_summary`)."""
    if not isinstance(obj, dict):
        raise SummaryError(f"{where} is not a JSON object")
    version = schema_version(obj, where)
    if "claims" not in obj:  # every summary this toolkit writes has its claims (a list, empty for no claim)
        raise SummaryError(f"{where} has no 'claims': not a summary of this toolkit, or cut short")
    records = obj["claims"]
    if not isinstance(records, list):
        raise SummaryError(f"{where}: 'claims' is not a list")
    if version == 1:
        records = [{V1_NAMES.get(k, k): v for k, v in d.items()} if isinstance(d, dict) else d for d in records]
    claims = [claim_from_dict(d, f"{where}, claim {i + 1}") for i, d in enumerate(records)]
    data = {k: v for k, v in obj.items() if k not in ("claims", "verdicts", "schema_version")}
    return Summary(claims, data, schema_version=version)


def read_summary(path: str | Path) -> Summary:
    """The :class:`Summary` in ``path``; a file that cannot be read, is not JSON, holds a claim that is not a
    record of this toolkit, or was written by a later toolkit (:func:`schema_version`) is a :class:`SummaryError`
    naming the file. The one reader of a summary."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SummaryError(f"{path} cannot be read ({type(e).__name__}: {str(e)[:80]})") from None
    s = summary_from_dict(obj, str(path))
    s.path = path
    return s
