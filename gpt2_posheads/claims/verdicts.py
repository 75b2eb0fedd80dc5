"""One verdict vocabulary for every claim of every script: ``held``, ``not held``, ``not testable``.

A claim is judged by a :class:`Rule` — a sentence written down *before* the measurement and a small
pure function that applies it to the measured numbers. Preconditions come first: if the model does
not copy, a head is not a previous-token head, or the run is a ``--quick`` smoke test, the claim is
``not testable`` and says why, instead of a verdict that would look good on a model where the
phenomenon is absent. Every record has the same keys::

    {"claim", "post", "measured", "rule", "verdict", "why"}

Usage::

    rule = at_most(0.10, "ratio of the sharpest previous-token head")
    c = judge("a head attends almost only to the previous token", post="L4H11: 0.01",
              rule=rule, measured={"ratio": 0.04}, value=0.04)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

Verdict = Literal["held", "not held", "not testable"]
HELD, NOT_HELD, NOT_TESTABLE = "held", "not held", "not testable"
VERDICTS: tuple[str, ...] = (HELD, NOT_HELD, NOT_TESTABLE)


@dataclass(frozen=True)
class Rule:
    """A decision rule: ``text`` says it in words, ``decide(value) -> (held, why)`` applies it."""

    text: str
    decide: Callable[[Any], tuple[bool, str]]
    allow_quick: bool = False  # a --quick run can still test it (e.g. a property of a fixed matrix)


@dataclass(frozen=True)
class Precondition:
    """Something that must be true for a claim to be testable on this model or run.

    ``text`` states the requirement; ``found`` says, when it fails, what was found instead, as a sentence
    that reads on its own ("L2H1 is not a previous-token head (ratio 0.95 > 0.5)").
    """

    text: str
    ok: bool
    found: str = ""

    def failure(self) -> str:
        return self.found or f"not met: {self.text}"


@dataclass
class Claim:
    """One verdict with its rule and reason: the record every claim of every post is, from the rule that decides it
    to ``summary.json`` (:mod:`gpt2_posheads.claims.record`) and the page."""

    claim: str
    post: str
    measured: Any
    rule: str
    verdict: Verdict
    why: str
    key: str = ""
    head: str = ""  # the head the claim was measured on ("" for a claim about the whole model)
    shown: str = ""  # the measured number for a person: 3 significant digits, units
    tells: str = ""  # what the claim can tell apart (the GPT-2 post's "route" / "describes"; "" for the toys)
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = {
            "claim": self.claim,
            "post": self.post,
            "measured": self.measured,
            "rule": self.rule,
            "verdict": self.verdict,
            "why": self.why,
        }
        for k in ("key", "head", "shown", "tells"):
            if getattr(self, k):
                d[k] = getattr(self, k)
        d.update(self.extra)
        return d


def finite(x) -> bool:
    """``x`` is a number and finite (``None``, a string or NaN are not)."""
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def judge(
    claim: str,
    post: str,
    rule: Rule,
    measured: Any,
    value: Any = None,
    preconditions: Sequence[Precondition] = (),
    quick: bool = False,
    key: str = "",
    head: str = "",
    shown: str = "",
) -> Claim:
    """Apply ``rule`` to ``value`` (default: ``measured``) unless a precondition fails, the run is quick, or ``value``
    holds no measurement (a NaN: :func:`not_measured`); each of those is ``not testable`` with the reason.

    ``head``: the head the claim was measured on; ``shown``: the measured number for a person (default: ``value``
    at 3 significant digits when it is a number).
    """
    value = measured if value is None else value
    if not shown and finite(value) and not isinstance(value, bool):
        shown = fmt(value)
    failed = [p for p in preconditions if not p.ok]
    if failed:
        reasons = (_bare(p.failure()) for p in failed)
        why = "not testable here: " + "; ".join(dict.fromkeys(reasons))
        # no number beside a claim that was not tested: it would read as a result (the measurement stays in measured)
        return Claim(claim, post, measured, rule.text, NOT_TESTABLE, why, key, head, "")
    if quick and not rule.allow_quick:
        return Claim(
            claim,
            post,
            measured,
            rule.text,
            NOT_TESTABLE,
            "--quick run: too short or too small to test this claim; run without --quick",
            key,
            head,
            "",
        )
    empty = not_measured(value)
    if empty:  # a rule sees only finite, measured numbers: this is the one place that makes sure
        return Claim(claim, post, measured, rule.text, NOT_TESTABLE, f"not testable here: {empty}", key, head, "")
    held, why = rule.decide(value)
    return Claim(claim, post, measured, rule.text, HELD if held else NOT_HELD, why, key, head, shown)


def _bare(reason: str) -> str:
    """A failure's reason without a "not testable" prefix of its own (the verdict's reason adds one)."""
    for prefix in ("not testable here: ", "not testable: "):
        reason = reason.removeprefix(prefix)
    return reason


def _numbers(value, path: str = ""):
    """``(where, number)`` for every number in ``value`` (nested tuples, lists, dicts, arrays, tensors)."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # tensors, arrays, NumPy scalars
        value = value.tolist()
    if isinstance(value, bool) or value is None or isinstance(value, (str, bytes)):
        return
    if isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{path}[{i}]")


def not_measured(value) -> str:
    """Why ``value`` is not a measurement a rule may judge (``""`` when it is): a NaN anywhere in it, the mark of an
    empty measurement (the mean of no entries, 0/0). ``None`` (a part absent by design: "no other previous-token head",
    a head in layer 0 with nothing below it), an empty list (a measured "none of them") and infinities (a measured
    extreme: the loss of a probability of 0) are left to the rule, which needs finite numbers to hold. :func:`judge`
    applies it to every rule's value; a claim whose value holds a NaN is ``not testable`` with this reason, never
    ``not held``."""
    nan = [where for where, x in _numbers(value) if x != x]
    if nan:
        where = f" {', '.join(nan[:3])}{', ...' if len(nan) > 3 else ''}" if nan != [""] else ""
        return f"nothing was measured (the value{where} is NaN)"
    return ""


def fmt(x, digits: int = 3) -> str:
    """A number for a person: ``digits`` significant digits, no exponent between 1e-4 and 1e6."""
    if isinstance(x, int) and not isinstance(x, bool):
        return str(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if not math.isfinite(v):
        return str(v)
    if v == 0:
        return "0"
    if 1e-4 <= abs(v) < 1e6:
        s = f"{v:.{max(digits - 1 - math.floor(math.log10(abs(v))), 0)}f}"
        return s
    return f"{v:.{digits - 1}e}"


# --- rule builders: each returns a Rule whose text is fixed before anything is measured ---------------


def at_most(threshold: float, what: str) -> Rule:
    def decide(v):
        if not finite(v):
            return False, f"{what} is {v}, not a finite number"
        return float(v) <= threshold, f"{what} = {float(v):.4g} {'<=' if float(v) <= threshold else '>'} {threshold:g}"

    return Rule(f"held if {what} <= {threshold:g}", decide)


def at_least(threshold: float, what: str) -> Rule:
    def decide(v):
        if not finite(v):
            return False, f"{what} is {v}, not a finite number"
        return float(v) >= threshold, f"{what} = {float(v):.4g} {'>=' if float(v) >= threshold else '<'} {threshold:g}"

    return Rule(f"held if {what} >= {threshold:g}", decide)


def within(low: float, high: float, what: str) -> Rule:
    def decide(v):
        if not finite(v):
            return False, f"{what} is {v}, not a finite number"
        ok = low <= float(v) <= high
        return ok, f"{what} = {float(v):.4g} is {'inside' if ok else 'outside'} [{low:g}, {high:g}]"

    return Rule(f"held if {low:g} <= {what} <= {high:g}", decide)


def ratio_at_least(factor: float, num: str, den: str) -> Rule:
    """Held if ``value[0] >= factor * value[1]`` (value = ``(num, den)``)."""

    def decide(v):
        a, b = v
        if not (finite(a) and finite(b)):
            return False, f"{num} = {a}, {den} = {b}: not finite"
        ok = float(a) >= factor * float(b)
        return ok, f"{num} = {float(a):.4g} {'>=' if ok else '<'} {factor:g} x {den} = {factor * float(b):.4g}"

    return Rule(f"held if {num} >= {factor:g} x {den}", decide)


def monotone(direction: Literal["up", "down"], what: str, tolerance: float = 0.0) -> Rule:
    """Held if the sequence rises (falls) at every step, allowing a relative slack of ``tolerance``."""

    def decide(v):
        xs = [float(x) for x in v]
        if len(xs) < 2 or not all(math.isfinite(x) for x in xs):
            return False, f"{what}: need two or more finite values, got {xs}"
        bad = [
            (a, b)
            for a, b in zip(xs, xs[1:])
            if (b < a * (1 - tolerance) if direction == "up" else b > a * (1 + tolerance))
        ]
        shown = ", ".join(f"{x:.3g}" for x in xs)
        return (not bad), f"{what}: {shown} ({'monotone' if not bad else f'{len(bad)} step(s) against the trend'})"

    slack = f" (each step may go against it by at most {tolerance:.0%})" if tolerance else ""
    return Rule(f"held if {what} {'rises' if direction == 'up' else 'falls'} at every step{slack}", decide)


def predicate(text: str, fn: Callable[[Any], tuple[bool, str]], allow_quick: bool = False) -> Rule:
    """A rule from any pure function ``value -> (held, why)``."""
    return Rule(text, fn, allow_quick)


# --- presentation ------------------------------------------------------------------------------------


def _short(x, width: int = 48) -> str:
    if hasattr(x, "tolist"):  # tensors, numpy arrays and scalars
        x = x.tolist()
    if isinstance(x, float):
        s = f"{x:.4g}"
    elif isinstance(x, dict):
        s = ", ".join(f"{k}={_short(v, 16)}" for k, v in x.items())
    elif isinstance(x, (list, tuple)):
        s = "[" + ", ".join(_short(v, 12) for v in x) + "]"
    else:
        s = str(x)
    return s if len(s) <= width else s[: width - 1] + "…"


def claims_table(claims: Sequence[Claim | dict]) -> str:
    """A plain-text table: claim / post / measured / verdict (the why on its own indented line)."""
    rows = [c.as_dict() if isinstance(c, Claim) else c for c in claims]
    if not rows:
        return "(no claims)"
    cols = [("claim", 44), ("post", 22), ("measured", 40), ("verdict", 12)]
    lines = ["  ".join(name.ljust(w) for name, w in cols), "  ".join("-" * w for _, w in cols)]
    for r in rows:
        lines.append("  ".join(_short(r[name], w).ljust(w) for name, w in cols))
        lines.append(f"    rule: {r['rule']}")
        lines.append(f"    why:  {r['why']}")
    return "\n".join(lines)


def verdict_counts(claims: Sequence[Claim | dict]) -> dict[str, int]:
    rows = [c.as_dict() if isinstance(c, Claim) else c for c in claims]
    return {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
