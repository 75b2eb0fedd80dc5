"""The claim record on disk: :func:`write_summary` and :func:`read_summary` alone write and parse ``summary.json``,
so a field is named, and a malformed file refused (:class:`SummaryError`, naming the file), in one place. Beside it,
every results folder holds the manifest (:data:`MANIFEST`), whose weights fingerprint tells whether two folders hold
results of one model.

``summary.json``::

    {"schema_version": 2, "script": ..., "model": ..., <the run's own numbers>,
     "claims": [{"claim", "post", "measured", "rule", "verdict", "why", "key"?, "head"?, "readout"?, "role"?, ...}],
     "verdicts": {"held": n, "not held": n, "not testable": n}, "figures": [...], "finished_at": ..., "elapsed_s": ...}

``schema_version`` (:data:`SCHEMA_VERSION`) names the layout above. Version 1 (also a summary without one) named a
claim's ``readout`` ``shown`` and its ``role`` ``tells`` (:data:`V1_NAMES`) and is read with them renamed. A version
above :data:`SCHEMA_VERSION` comes from a later toolkit: refused, saying to upgrade, rather than misread.
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


def read_manifest(folder: str | Path) -> dict:  # {"files": [...], "folders": [...], ...}, empty when there is none
    try:
        m = json.loads((Path(folder) / MANIFEST).read_text())
        return m if isinstance(m, dict) else {}
    except (OSError, ValueError):
        return {}


def recorded_fingerprint(folder: str | Path) -> str | None:
    """The weights fingerprint (a hub model's: its name) its manifest records, or ``None``: none recorded, or a hash
    of part of the weights (12 hex digits), which no whole-file fingerprint can be compared with."""
    model = read_manifest(folder).get("model")
    fingerprint = model.get("fingerprint") if isinstance(model, dict) else None
    if not isinstance(fingerprint, str) or not fingerprint or re.fullmatch(r"[0-9a-f]{12}", fingerprint):
        return None
    return fingerprint


class SummaryError(ValueError):
    """A ``summary.json`` (or a claim in it) that this toolkit did not write, or that was cut short."""


def jsonable(x):
    """``x`` made JSON-safe; non-finite floats become ``null`` (JSON has no NaN)."""
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
    """The :class:`Claim` a record holds; a field missing or another verdict: :class:`SummaryError` naming ``where``."""
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
    """A run's ``summary.json``: its claims as :class:`Claim` objects and the rest in ``data``, a mapping (what a
    script records beside its claims differs from script to script); the fields every summary has are attributes."""

    claims: list[Claim]
    data: dict = field(default_factory=dict)
    path: Path | None = None
    schema_version: int = SCHEMA_VERSION

    script = property(lambda self: str(self.data.get("script", "")))
    model = property(lambda self: str(self.data.get("model") or ""))
    quick = property(lambda self: bool(self.data.get("quick", False)))
    figures = property(lambda self: list(self.data.get("figures", [])))
    finished_at = property(lambda self: str(self.data.get("finished_at", "")))

    get = property(lambda self: self.data.get)  # (name, default=None)

    def __getitem__(self, name: str) -> Any:
        return self.data[name]

    def __contains__(self, name: str) -> bool:
        return name in self.data

    def claim(self, key: str) -> Claim | None:
        """The claim with this key (without keys: this sentence), or ``None``."""
        return next((c for c in self.claims if (c.key or c.claim) == key), None)

    def by_key(self) -> dict[str, Claim]:  # {key (or sentence): claim} in the order written
        return {c.key or c.claim: c for c in self.claims}

    def __iter__(self) -> Iterator[Claim]:
        return iter(self.claims)


def write_summary(path: str | Path, data: dict, claims: Sequence[Claim]) -> Path:
    """Write ``summary.json`` at ``path``, whole or not at all: :data:`SCHEMA_VERSION` (not ``data``'s own), ``data``,
    the claims and their verdict counts."""
    for c in claims:
        if not isinstance(c, Claim):
            raise TypeError(f"claims: every claim must be a Claim, got {type(c).__name__}")
    obj = {"schema_version": SCHEMA_VERSION, **{k: v for k, v in data.items() if k != "schema_version"}}
    obj.update(claims=[c.as_dict() for c in claims], verdicts=verdict_counts(list(claims)))
    return write_whole_text(path, json.dumps(jsonable(obj), indent=2, allow_nan=False) + "\n")


def schema_version(obj: dict, where: str = "summary") -> int:
    """A parsed summary's ``schema_version`` (none: 1); one not a whole number >= 1, or above :data:`SCHEMA_VERSION`
    (a later layout read as this one would give wrong verdicts quietly), is a :class:`SummaryError`."""
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
    """The :class:`Summary` in ``path``; a file that cannot be read or parsed is a :class:`SummaryError` naming it."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise SummaryError(f"{path} cannot be read ({type(e).__name__}: {str(e)[:80]})") from None
    s = summary_from_dict(obj, str(path))
    s.path = path
    return s
