"""What a claim function returns: its numbers, its verdicts and its figures, one object from a notebook to a folder.

The command-line scripts write the same object into a results folder (:meth:`ClaimResult.write`), so a verdict in a
notebook and on the results page come from one computation. In Jupyter the object shows itself as its verdict table
(``_repr_html_``), offline.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..claims.verdicts import VERDICT_COLOURS, Claim, claims_table, verdict_counts

VERDICT_COLUMNS = ["key", "claim", "verdict", "readout", "head", "why", "rule"]  # ClaimResult.verdicts(), in order


@dataclass
class ClaimResult:
    """One claim function's result. ``name`` is the claim function's (and command's) name, ``model`` the model it ran
    on (empty for the toy posts, which train their own); ``claims`` the verdicts
    (:class:`~gpt2_posheads.claims.verdicts.Claim`; as a table: :meth:`verdicts`); ``numbers`` what the measurement
    found, as ``summary.json`` records it beside the claims; ``tables`` DataFrames, written as ``<name>.csv``;
    ``figures`` plotly figures by file stem (:meth:`show`); ``notes`` what the measurement says about the model it was
    given, as sentences (a model left in training mode, measured in eval mode; the hooks it carries, measured with;
    half-precision weights: :mod:`gpt2_posheads.model.state`), written into ``summary.json`` as ``notes`` and shown on
    the page beside each verdict."""

    name: str
    model: str = ""
    claims: list[Claim] = field(default_factory=list)
    numbers: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    figure_options: dict[str, dict] = field(default_factory=dict)  # size of each figure's PNG (width, height)
    files: dict[str, Any] = field(default_factory=dict)  # other files: name -> text or bytes (a report page)
    notes: list[str] = field(default_factory=list)

    def figure(self, fig, stem: str, **options) -> None:  # options: width/height of its PNG
        self.figures[stem] = fig
        self.figure_options[stem] = options

    def table(self, df: pd.DataFrame, stem: str) -> None:
        self.tables[stem] = df

    def claim(self, key: str) -> Claim:
        """The claim with this key (``KeyError`` naming the keys there are)."""
        for c in self.claims:
            if c.key == key:
                return c
        raise KeyError(f"{key!r}: no such claim; this result has {', '.join(c.key for c in self.claims) or 'none'}")

    def verdicts(self) -> pd.DataFrame:
        """One row per claim: key, claim, verdict, the number as a person reads it, the head, why, the rule."""
        return pd.DataFrame([{k: getattr(c, k) for k in VERDICT_COLUMNS} for c in self.claims], columns=VERDICT_COLUMNS)

    def counts(self) -> dict[str, int]:  # {verdict: how many claims got it}, every verdict (zero included)
        return verdict_counts(self.claims)

    def show(self, *stems: str) -> None:  # the figures (all, or those named), by plotly (inline in Jupyter)
        for stem in stems or tuple(self.figures):
            self.figures[stem].show()

    def __str__(self) -> str:
        head = f"{self.name}" + (f" on {self.model}" if self.model else "")
        notes = "".join(f"\nnote: {n}" for n in self.notes)
        return f"{head}{notes}\n{claims_table(self.claims)}"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td><b>{html.escape(c.claim)}</b><div style='color:#57606a;font-size:90%'>"
            f"{html.escape(c.rule)}</div></td><td><span style='background:{VERDICT_COLOURS[c.verdict]};color:#fff;"
            f"padding:1px 6px;border-radius:3px'>{html.escape(c.verdict)}</span>"
            + (f" on {html.escape(c.head)}" if c.head else "")
            + f"<div>{html.escape(c.readout)}</div></td><td>{html.escape(c.why)}</td></tr>"
            for c in self.claims
        )
        figs = ", ".join(html.escape(s) for s in self.figures) or "none"
        tables = ", ".join(html.escape(s) for s in self.tables) or "none"
        title = html.escape(self.name + (f" on {self.model}" if self.model else ""))
        notes = "".join(f"<div style='color:#9a6700'>note: {html.escape(n)}</div>" for n in self.notes)
        return (
            f"<div><b>{title}</b>: {', '.join(f'{n} {v}' for v, n in self.counts().items())}{notes}"
            "<table><tr><th style='text-align:left'>claim and rule</th><th style='text-align:left'>verdict</th>"
            f"<th style='text-align:left'>why</th></tr>{rows}</table>"
            f"<div style='color:#57606a'>figures: {figs} (<code>.show()</code>); tables: {tables} "
            "(<code>.tables</code>); numbers: <code>.numbers</code></div></div>"
        )

    def write(self, out, context: dict | None = None) -> None:
        """Write the tables, figures and ``summary.json`` (:attr:`numbers`, ``context`` — the model, the prompts, the
        heads as the command chose them — over them) into ``out`` (:class:`~gpt2_posheads.cli.output.Output`)."""
        for stem, df in self.tables.items():
            out.csv(df, stem)
        for stem, fig in self.figures.items():
            out.figure(fig, stem, **self.figure_options.get(stem, {}))
        for name, body in self.files.items():
            p = out.path(name)
            p.write_bytes(body) if isinstance(body, bytes) else p.write_text(body, encoding="utf-8")
        out.summary(
            {**self.numbers, **(context or {}), **({"notes": list(self.notes)} if self.notes else {})}, self.claims
        )
        out.commit()
