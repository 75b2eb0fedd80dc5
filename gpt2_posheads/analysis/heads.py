"""Which heads a claim measures: ``--heads`` (names, or ``auto:N``) or the script's :class:`HeadDefault`, the post's
heads on GPT-2 small (where those names mean something) and the heads of the same *role* on any other model; with a
sentence saying how they were chosen, which every summary records next to its claims.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import pandas as pd

from ..model.loading import is_gpt2_small
from ..model.validation import HEAD_NAME, UsageError, head_name, parse_head
from .diagonals import aggregator_and_early, choose_aggregator

Role = Literal["aggregator", "aggregator+early", "top"]
ROLE_WORDS = {
    "aggregator": "the model's aggregator (its sharpest previous-token head)",
    "aggregator+early": "the model's sharpest previous-token head below its aggregator, then the aggregator",
    "top": "the model's {n} most previous-token-like heads",
}


@dataclass(frozen=True)
class HeadSpec:
    """``--heads``: explicit names, or ``auto:N``."""

    names: tuple[str, ...] = ()
    auto: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> HeadSpec | None:
        if text is None:
            return None
        t = text.strip()
        if t.lower().startswith("auto"):
            m = re.fullmatch(r"auto(?::(\d+))?", t.lower())
            if not m:
                raise UsageError("--heads", f"{text!r} is not of the form auto:N", "e.g. auto:3")
            n = int(m.group(1) or 3)
            if n < 1:
                raise UsageError("--heads", f"auto:{n} asks for no heads", "allowed auto:1 .. auto:<number of heads>")
            return cls(auto=n)
        names = tuple(s.strip().upper() for s in t.split(",") if s.strip())
        if not names:
            raise UsageError("--heads", "is empty", "comma-separated names like L4H11, or auto:N")
        for s in names:
            if not HEAD_NAME.match(s):
                raise UsageError("--heads", f"{s!r} is not a head name", "names look like L4H11; or auto:N")
        return cls(names=names)

    def check(self, shape) -> None:
        """Against a model's shape (``n_layers``, ``n_heads``); nothing when the shape is unknown."""
        if shape is None:
            return
        total = shape.n_layers * shape.n_heads
        if self.auto is not None and self.auto > total:
            raise UsageError(
                "--heads", f"auto:{self.auto} asks for more heads than the model has", f"allowed auto:1 .. auto:{total}"
            )
        for s in self.names:
            l, h = (int(x) for x in HEAD_NAME.match(s).groups())
            if l >= shape.n_layers or h >= shape.n_heads:
                raise UsageError(
                    "--heads",
                    f"unknown head {s}",
                    f"this model has layers 0..{shape.n_layers - 1} and heads 0..{shape.n_heads - 1}",
                )


@dataclass(frozen=True)
class HeadDefault:
    """A script's heads when ``--heads`` is not given: ``post`` on GPT-2 small, the ``role`` elsewhere."""

    post: tuple[str, ...]
    role: Role
    n: int = 1  # for role "top"
    what: str = "heads"  # what the heads are for, in --help

    def help(self) -> str:
        other = ROLE_WORDS[self.role].format(n=self.n)
        return (
            f"{self.what}: comma-separated names like L4H11, or auto:N for the model's N most previous-token-like "
            f"heads (default: {','.join(self.post)} on GPT-2 small; on any other model {other})"
        )


def require_above_layer0(spec: HeadSpec | None, param: str = "--heads") -> None:
    """Refuse explicit layer-0 heads where a script needs heads with something upstream."""
    if spec is None:
        return
    low = [s for s in spec.names if int(HEAD_NAME.match(s).group(1)) == 0]
    if low:
        raise UsageError(
            param,
            f"{', '.join(low)} {'is' if len(low) == 1 else 'are'} in layer 0: nothing upstream to analyse",
            "heads in layers >= 1",
            "layer-0 heads read only the embeddings",
        )


def resolve_heads(
    model, spec: HeadSpec | None, default: HeadDefault, ranking: pd.DataFrame
) -> tuple[list[tuple[int, int]], str]:
    """``(heads, how they were chosen)``: ``--heads`` if given, else ``default``, from the model's ``ranking``."""
    if spec is not None and spec.auto is not None:
        heads = [(int(r.layer), int(r.head)) for r in ranking.head(spec.auto).itertuples()]
        return heads, f"--heads auto:{spec.auto}: the model's {spec.auto} most previous-token-like heads"
    if spec is not None:
        return [parse_head(s, model) for s in spec.names], "--heads"
    if is_gpt2_small(model):
        return [parse_head(s, model) for s in default.post], "the post's heads (GPT-2 small)"
    if default.role == "aggregator":
        heads = [choose_aggregator(ranking)]
    elif default.role == "aggregator+early":
        heads = aggregator_and_early(ranking)
    else:
        heads = [(int(r.layer), int(r.head)) for r in ranking.head(default.n).itertuples()]
    words = ROLE_WORDS[default.role].format(n=default.n)
    return heads, f"{words}: {', '.join(head_name(l, h) for l, h in heads)}"
