"""One verdict vocabulary for every claim of every post: ``held``, ``not held``, ``not testable``.

The words and their colours are defined here and nowhere else. A claim is judged by a :class:`Rule`, a sentence
written down *before* the measurement and a pure function of the numbers returning a :data:`Decision` ``(held, why)``.
Preconditions come first: if the model does not copy, a head is not a previous-token head, or the run is a
``--quick`` smoke test, the claim is ``not testable`` and says why, instead of a verdict that would look good on a
model where the phenomenon is absent.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Literal

Verdict = Literal["held", "not held", "not testable"]
HELD, NOT_HELD, NOT_TESTABLE = "held", "not held", "not testable"
VERDICTS: tuple[str, ...] = (HELD, NOT_HELD, NOT_TESTABLE)
# green, red, grey (GitHub's Primer palette): the results page, a result's table in a notebook, the organism report
VERDICT_COLOURS: dict[str, str] = {HELD: "#1a7f37", NOT_HELD: "#cf222e", NOT_TESTABLE: "#6e7781"}

# (held, why): what a rule says of its numbers. held None: the numbers cannot decide the claim (both sides of a
# comparison at the floor, where differences are noise), so the claim is not testable and why says so.
Decision = tuple[bool | None, str]

QUICK_WHY = "--quick run: too short or too small to test this claim; run without --quick"


@dataclass(frozen=True)
class Rule:
    """A decision rule: ``text`` says it in words, ``decide(value) -> (held, why)`` (a :data:`Decision`) applies it."""

    text: str
    decide: Callable[[Any], Decision]
    allow_quick: bool = False  # a --quick run can still test it (e.g. a property of a fixed matrix)


@dataclass(frozen=True)
class Precondition:
    """What must be true for a claim to be testable: ``text`` states it; ``found`` says, when it fails, what was found
    instead, as a sentence that reads on its own ("L2H1 is not a previous-token head (ratio 0.95 > 0.5)")."""

    text: str
    ok: bool
    found: str = ""

    def failure(self) -> str:
        return self.found or f"not met: {self.text}"


CLAIM_FIELDS = ("claim", "post", "measured", "rule", "verdict", "why")  # every record has these
OPTIONAL_FIELDS = ("key", "head", "readout", "role")  # a record has these when they are set


@dataclass
class Claim:
    """One verdict with its rule and reason: the record of every claim, from its rule to ``summary.json``."""

    claim: str
    post: str
    measured: Any
    rule: str
    verdict: Verdict
    why: str
    key: str = ""
    head: str = ""  # the head the claim was measured on ("" for a claim about the whole model)
    readout: str = ""  # the measured number for a person: 3 significant digits, units
    role: str = ""  # what the claim can tell apart (the GPT-2 post's "route" / "describes"; "" for the toys)
    extra: dict = field(default_factory=dict)  # fields of a record this version does not know (claims.record)

    def as_dict(self) -> dict:
        """The record (:data:`CLAIM_FIELDS`, then the :data:`OPTIONAL_FIELDS` that are set, then ``extra``)."""
        d = {k: getattr(self, k) for k in CLAIM_FIELDS}
        d.update((k, getattr(self, k)) for k in OPTIONAL_FIELDS if getattr(self, k))
        return d | self.extra


def finite(x) -> bool:
    """``x`` is a number and finite (``None``, a string or NaN are not)."""
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def not_testable(
    claim: str,
    post: str,
    rule: Rule | str,
    why: str,
    *,
    key: str = "",
    head: str = "",
    readout: str = "",
    measured: Any = None,
    role: str = "",
    here: bool = True,
) -> Claim:
    """The one place a ``not testable`` :class:`Claim` is made. Its why reads ``not testable here: <why>`` (once,
    whatever prefix ``why`` carries), or with ``here=False`` ``why`` as written (a reason that names its own cause:
    :data:`QUICK_WHY`). ``readout`` stays empty unless given: a number beside an untested claim would read as a
    result (the measurement stays in ``measured``)."""
    reason = "not testable here: " + _bare(why) if here else why
    text = rule.text if isinstance(rule, Rule) else rule
    return Claim(claim, post, measured, text, NOT_TESTABLE, reason, key, head, readout, role)


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
    readout: str = "",
    role: str = "",
) -> Claim:
    """The one path from a measurement to a :class:`Claim`. The first of these that applies decides:

    1. a failed precondition: ``not testable here: <what was found>`` (each distinct reason once, joined by "; ");
    2. a ``--quick`` run, unless ``rule.allow_quick``: ``not testable``, :data:`QUICK_WHY`;
    3. a NaN in ``value`` (default ``measured``; :func:`not_measured`): ``not testable``, and the rule is never asked;
    4. ``rule.decide(value)``; ``held`` None is ``not testable`` with the rule's why.

    ``readout`` (default: a numeric ``value`` at 3 significant digits) is dropped in 1-3, where a number would read as
    a result, and kept in 4's ``not testable``: at a floor the numbers are the reason.
    """
    if not isinstance(rule, Rule):
        raise TypeError(f"rule: a Rule is needed (its text and how it decides), got {type(rule).__name__}")
    value = measured if value is None else value
    if not readout and finite(value) and not isinstance(value, bool):
        readout = fmt(value)

    untested_claim = partial(not_testable, claim, post, rule, key=key, head=head, measured=measured, role=role)
    failed = [p for p in preconditions if not p.ok]
    if failed:
        return untested_claim("; ".join(dict.fromkeys(_bare(p.failure()) for p in failed)))
    if quick and not rule.allow_quick:
        return untested_claim(QUICK_WHY, here=False)
    empty = not_measured(value)
    if empty:  # a rule sees only finite, measured numbers: this is the one place that makes sure
        return untested_claim(empty)
    held, why = rule.decide(value)
    if held is None:
        return untested_claim(why, readout=readout)
    return Claim(claim, post, measured, rule.text, HELD if held else NOT_HELD, why, key, head, readout, role)


# --- declared claims ----------------------------------------------------------------------------------

ROUTE, DESCRIBES = "route", "describes"
ROLES = (ROUTE, DESCRIBES, "")  # "": a toy post's claim, which has no route to tell apart
# what each role tells apart, in words (the results page's tags)
ROLE_WORDS = {
    ROUTE: "tells the post's route from a head that reads W_pos",
    DESCRIBES: "describes a head or a matrix; holds on either route",
}


@dataclass(frozen=True)
class ClaimSpec:
    """A claim of a post, declared before anything is measured. A claim measured at settings (a toy post's V or seed,
    the ``--robustness`` grid) has ``make``, the function of those settings (``params``) that builds its rule, so that
    the rule's text is made from the numbers it tests; ``claim`` and ``post`` may name the settings in braces."""

    key: str
    claim: str  # the post's sentence
    post: str  # the post's number
    rule: Rule
    role: str = DESCRIBES  # what it tells apart
    why_kind: str = ""  # why it is (or is not) a route claim, in a sentence
    make: Callable[..., Rule] | None = field(default=None, compare=False)
    params: tuple = ()  # (name, value) pairs: the settings ``rule``, ``claim`` and ``post`` were made at

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"role: {self.role!r} is not one of {ROUTE!r}, {DESCRIBES!r}")

    def at(self, label: str = "", setting: str = "", post: str | None = None, **params) -> ClaimSpec:
        """This claim at other settings: ``params`` override the declared ones (the rule made again, the braces
        filled); the key becomes ``key (label)``, the sentence ``setting: claim``; ``post`` replaces the number."""
        p = {**dict(self.params), **params}

        def filled(text):
            return text.format(**p) if p and isinstance(text, str) else text

        claim = filled(self.claim)
        return replace(
            self,
            key=f"{self.key} ({label})" if label else self.key,
            claim=f"{setting}: {claim}" if setting else claim,
            post=filled(self.post) if post is None else post,
            rule=self.make(**p) if self.make else self.rule,
            params=tuple(p.items()),
        )

    def judge(
        self,
        measured,
        value=None,
        preconditions: Sequence[Precondition] = (),
        quick: bool = False,
        *,
        post: str | None = None,
        head: str = "",
        readout: str = "",
    ) -> Claim:
        """:func:`judge` this claim on ``measured``; ``post`` overrides the post's number."""
        number = self.post if post is None else post
        return judge(
            self.claim, number, self.rule, measured, value, preconditions, quick, self.key, head, readout, self.role
        )

    def untested(self, why: str, measured=None, here: bool = True) -> Claim:
        """This claim ``not testable`` for ``why`` (:func:`not_testable`), with its key and role."""
        return not_testable(
            self.claim, self.post, self.rule, why, key=self.key, role=self.role, measured=measured, here=here
        )


# every declared claim of every post by key, in the order declared: filled by :func:`declare_claim` when the posts'
# modules are imported (``import gpt2_posheads`` does); :func:`gpt2_posheads.claims.catalogue.claims` reads it
CLAIMS: dict[str, ClaimSpec] = {}


def declare_claim(
    key: str,
    claim: str,
    post: str,
    rule: Rule | Callable[..., Rule],
    role: str = DESCRIBES,
    why_kind: str = "",
    **params,
) -> ClaimSpec:
    """Declare and register (:func:`register_claim`) a :class:`ClaimSpec`; ``rule``: a :class:`Rule`, or a function
    of ``params`` that makes one (the post's own: ``rule(**params)``); ``params`` also fill the braces."""
    make = None if isinstance(rule, Rule) else rule
    spec = ClaimSpec(key, claim, post, make(**params) if make else rule, role, why_kind, make, tuple(params.items()))
    return register_claim(spec)


def register_claim(spec: ClaimSpec) -> ClaimSpec:
    """Add ``spec`` to :data:`CLAIMS`; a key declared again with another sentence is a ``ValueError``."""
    known = CLAIMS.get(spec.key)
    if known is not None and (known.claim, known.role) != (spec.claim, spec.role):
        raise ValueError(f"key: the claim {spec.key!r} is declared twice ({known.claim!r} and {spec.claim!r})")
    CLAIMS[spec.key] = spec
    return spec


def _bare(reason: str) -> str:
    """A failure's reason without a "not testable" prefix of its own (the verdict's reason adds one)."""
    for prefix in ("not testable here: ", "not testable: "):
        reason = reason.removeprefix(prefix)
    return reason


def leaves(value, path: str = ""):
    """``(path, leaf)`` for every scalar leaf of nested dicts, lists, tuples, tensors, arrays; paths ``a.b[2]``."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # tensors, arrays, NumPy scalars
        value = value.tolist()
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, value


def not_measured(value) -> str:
    """Why ``value`` is not a measurement a rule may judge (``""`` when it is): a NaN anywhere in it, the mark of an
    empty measurement (the mean of no entries, 0/0). ``None`` (a part absent by design: a head in layer 0 with nothing
    below it), an empty list (a measured "none of them") and infinities (a measured extreme) are left to the rule."""
    nan = [where for where, x in leaves(value) if isinstance(x, float) and x != x]
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
        return f"{v:.{max(digits - 1 - math.floor(math.log10(abs(v))), 0)}f}"
    return f"{v:.{digits - 1}e}"


# --- rule builders: each returns a Rule whose text is fixed before anything is measured ---------------


def _bound(threshold: float, what: str, op: str) -> Rule:
    """Held if ``value op threshold`` (``op`` ``"<="`` or ``">="``)."""

    def decide(v):
        if not finite(v):
            return False, f"{what} is {v}, not a finite number"
        ok = float(v) <= threshold if op == "<=" else float(v) >= threshold
        return ok, f"{what} = {float(v):.4g} {op if ok else {'<=': '>', '>=': '<'}[op]} {threshold:g}"

    return Rule(f"held if {what} {op} {threshold:g}", decide)


def at_most(threshold: float, what: str) -> Rule:
    return _bound(threshold, what, "<=")


def at_least(threshold: float, what: str) -> Rule:
    return _bound(threshold, what, ">=")


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


predicate = Rule  # a rule from any pure function ``value -> (held, why)`` (a :data:`Decision`)


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
