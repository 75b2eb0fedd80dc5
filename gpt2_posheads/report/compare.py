"""Two results folders side by side, claim by claim: did a change move any number or verdict?

Each claim's ``measured`` value is flattened to scalar leaves (``ratios[0]``, ``L0H1 clean -> g10[1]``, ...); two
leaves agree when both are NaN, or equal, or floats within ``rtol``/``atol``. Only results of one model are compared
(the same weights fingerprint, or without one the same folder name); folders that hold different models are refused
in one line naming the first pair, unless the caller asks anyway: numbers of two models moving apart is not a change
that moved them.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..claims.record import Summary, recorded_fingerprint
from ..claims.verdicts import leaves
from ..model.validation import UsageError
from .index import collect_summaries


def flatten(x, prefix: str = "") -> dict[str, object]:
    """Scalar leaves of nested dicts and lists, keyed by their path (``a.b[2]``)."""
    return dict(leaves(x, prefix))


def same(a, b, rtol: float = 1e-6, atol: float = 1e-9) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        a, b = float(a), float(b)
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=rtol, abs_tol=atol)
    return a == b


def compare_claims(before: Summary, after: Summary, rtol: float = 1e-6, atol: float = 1e-9) -> pd.DataFrame:
    """One row per claim of either summary: ``key``, ``verdict_before``/``_after``, ``n_numbers`` (leaves compared),
    ``n_moved``/``moved`` (up to three ``path: before -> after``), ``n_added``/``added`` (up to three paths one side
    records and the other does not: a field a newer version adds is not a number that moved)."""
    b, a = before.by_key(), after.by_key()
    rows = []
    for key in list(b) + [k for k in a if k not in b]:
        cb, ca = b.get(key), a.get(key)
        fb = flatten(cb.measured) if cb else {}
        fa = flatten(ca.measured) if ca else {}
        moved = [f"{p}: {fb[p]} -> {fa[p]}" for p in fb if p in fa and not same(fb[p], fa[p], rtol, atol)]
        added = [f"+{p}" for p in fa if p not in fb] + [f"-{p}" for p in fb if p not in fa] if cb and ca else []
        rows.append(
            _row(key, cb.verdict if cb else "-", ca.verdict if ca else "-", len(set(fb) | set(fa)), moved, added)
        )
    return pd.DataFrame(rows)


ROW = ("key", "verdict_before", "verdict_after", "n_numbers", "n_moved", "moved", "n_added", "added")


def _row(key: str, before: str, after: str, n_numbers: int = 0, moved=(), added=()) -> dict:
    counted = (len(moved), "; ".join(moved[:3]), len(added), "; ".join(added[:3]))
    return dict(zip(ROW, (key, before, after, n_numbers, *counted)))


def _summaries(root: Path) -> dict[str, tuple[Path, Summary]]:
    return {str(p.relative_to(root)): (p, s) for p, s in collect_summaries(root)}


def different_models(before: Path, after: Path, found: list[dict] | None = None) -> list[str]:
    """``"<path>: <name> (weights <fingerprint>) in before, <name> (...) in after"`` for each summary path both
    folders hold with results of different models (``found``: the two folders' summaries, when read already)."""
    found = found or [_summaries(before), _summaries(after)]
    out = []
    for rel in sorted(set(found[0]) & set(found[1])):
        a, b = ((found[i][rel][1].model, recorded_fingerprint(found[i][rel][0].parent)) for i in (0, 1))
        # one model: their fingerprints agree where both are recorded, else their names name the same folder
        # (mini-gpt2 and gpt2_posheads/data/mini-gpt2 do)
        if not (a[1] == b[1] if a[1] is not None and b[1] is not None else Path(a[0]).name == Path(b[0]).name):
            named = [(name or "no model") + (f" (weights {fp})" if fp and fp != name else "") for name, fp in (a, b)]
            out.append(f"{rel}: {named[0]} in {before}, {named[1]} in {after}")
    return out


def differing_models_line(before: Path, after: Path, differ: list[str]) -> str:
    n = len(differ)
    more = f" (and {n - 1} more)" if n > 1 else ""
    return f"{before} and {after} hold different models in {n} summar{'y' if n == 1 else 'ies'}; {differ[0]}{more}"


def compare_folders(
    before: Path, after: Path, rtol: float = 1e-6, atol: float = 1e-9, allow_different_models: bool = False
) -> pd.DataFrame:
    """:func:`compare_claims` for every ``summary.json`` under both folders (matched by relative path; one side only:
    ``"(no summary)"``), with a ``summary`` column. Two folders with no claim in common, or holding different models
    (unless ``allow_different_models``), are a :class:`UsageError`."""
    read = [_summaries(before), _summaries(after)]
    differ = different_models(before, after, read)
    if differ and not allow_different_models:
        raise UsageError(
            "folders",
            differing_models_line(before, after, differ),
            "two results folders of the same model",
            "compare each with a run of its own model, or pass --allow-different-models to compare them anyway",
        )
    found = [{rel: s for rel, (_, s) in side.items()} for side in read]
    frames = []
    for rel in sorted(set(found[0]) | set(found[1])):
        pb, pa = found[0].get(rel), found[1].get(rel)
        if pb is None or pa is None:
            missing = ["(no summary)" if side is None else "-" for side in (pb, pa)]
            frames.append(pd.DataFrame([_row("-", *missing)]))
        else:
            frames.append(compare_claims(pb, pa, rtol, atol))
        frames[-1].insert(0, "summary", rel)
    common = [rel for rel in set(found[0]) & set(found[1]) if set(found[0][rel].by_key()) & set(found[1][rel].by_key())]
    if not common:  # nothing compared is not "nothing moved"
        raise UsageError(
            "folders",
            f"{before} and {after} have no claim in common ({len(found[0])} and {len(found[1])} summaries)",
            "two results folders of the same scripts",
            "compare a folder with another run of the same scripts and models",
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
