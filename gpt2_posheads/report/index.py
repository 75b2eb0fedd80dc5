"""The ``results/index.html`` page: every post's claims, one column per model, readable in a minute (its HTML is
in ``index_page.html``; it links only to files beside it, so it works from ``file://``).

A model column is one model, told by its weights fingerprint (the results folder's manifest, or the run record's
``fingerprints``), not by the words it was given in: ``--model mini-gpt2`` and ``--model-dir
gpt2_posheads/data/mini-gpt2`` are one column headed with both names; two models of one name are two columns.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import re
import time
from pathlib import Path
from string import Template

from ..claims.catalogue import claims, posts, scripts
from ..claims.catalogue import script as declared_script
from ..claims.record import Summary, SummaryError, read_summary, recorded_fingerprint
from ..claims.toy import grid_records
from ..claims.verdicts import NOT_TESTABLE, ROLE_WORDS, ROUTE, VERDICT_COLOURS, VERDICTS, Claim, fmt
from ..model.paths import write_whole_text
from ..model.validation import UsageError

TOY_COLUMN = "toy models"


def collect_summaries(root: Path) -> list[tuple[Path, Summary]]:
    """Every ``summary.json`` under ``root`` in script order, then path, except in a run's staging folders (names
    starting with a dot). One that cannot be read is a :class:`UsageError` naming it: a page or a comparison that
    silently left it out would show a result as missing."""
    found = []
    for p in root.rglob("summary.json"):
        if any(part.startswith(".") for part in p.relative_to(root).parent.parts):
            continue
        try:
            found.append((p, read_summary(p)))
        except SummaryError as e:
            raise UsageError(
                "results",
                str(e),
                "summary.json files written by this toolkit",
                "rerun the script that wrote it, or move the file away",
            ) from None
    order = {s: i for i, s in enumerate(s for p in posts() for s in p.scripts)}
    return sorted(found, key=lambda t: (order.get(t[1].script, len(order)), str(t[0])))


def present(x) -> str:
    """A measured value for a person: numbers at 3 significant digits, dicts as ``key value; ...`` (keys in words),
    lists in full; never JSON, never cut."""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, (int, float)):
        return fmt(x)
    if isinstance(x, dict):
        return "; ".join(f"{str(k).replace('_', ' ').strip()} {present(v)}" for k, v in x.items())  # keys in words
    if isinstance(x, (list, tuple)):
        return ", ".join(present(v) for v in x)
    return str(x)


class Columns:
    """The page's model columns: each summary's column (its model's fingerprint, else its name) and each column's
    heading (every name the model was given, the run record's first)."""

    def __init__(self, summaries: list[tuple[Path, Summary]], record: dict | None = None):
        found = {}  # path -> (model name, recorded fingerprint)
        self.standins: set[str] = set()  # names of models that record being a compiled stand-in (not the real one)
        post_of = scripts()
        for path, s in summaries:
            if s.script in post_of and not post_of[s.script].post.needs_model:
                continue
            found[path] = (s.model or path.parent.name, recorded_fingerprint(path.parent))
            if s.get("compiled_standin"):
                self.standins.add(found[path][0])
        # {name as given: fingerprint}: the results' manifests, then the run record's
        self.fingerprints = {name: fp for name, fp in found.values() if fp}
        self.fingerprints.update((record or {}).get("fingerprints") or {})
        self.names: dict[str, list[str]] = {}
        for name in (record or {}).get("models", []):
            self._name(self.key_of_name(name), name)
        self.keys = dict.fromkeys((p for p, _ in summaries), TOY_COLUMN)
        for path, (name, fp) in found.items():
            self.keys[path] = fp or self.key_of_name(name)
            self._name(self.keys[path], name)

    def key_of_name(self, name: str) -> str:
        return str(self.fingerprints.get(name) or name)

    def _name(self, key: str, name: str) -> None:
        names = self.names.setdefault(key, [])
        if name not in names:
            names.append(name)

    def label(self, key: str) -> str:
        """A column's heading, ``mini-gpt2 (also gpt2_posheads/data/mini-gpt2)``, with the fingerprint where another
        column has the same."""
        names = self.names.get(key) or [key]
        text = names[0] + (f" (also {', '.join(names[1:])})" if len(names) > 1 else "")
        if self.standins & set(names):  # e.g. a test hub's gpt2: its numbers describe a construction
            text += " [compiled stand-in, not the real model]"
        clash = any(k != key and (self.names.get(k) or [k])[0] == names[0] for k in self.names)
        return f"{text} (weights {key})" if clash and key != names[0] else text


def _e(x) -> str:
    return html.escape(str(x))


def _verdict_badge(v: str) -> str:
    return f'<span class="v" style="background:{VERDICT_COLOURS.get(v, "#444")}">{_e(v)}</span>'


def _thumbs(summary: Summary, folder: Path, root: Path) -> str:
    """Thumbnails of the script's figures: each HTML figure linked, with its PNG where there is one."""
    out = []
    for f in (f for f in summary.figures if f.endswith(".html")):
        png = folder / f.replace(".html", ".png")
        label = _e(Path(f).stem.replace("_", " "))
        img = (
            f'<img src="{_e(png.relative_to(root))}" alt="{label}" loading="lazy">'
            if png.exists()
            else '<span class="noimg">HTML</span>'
        )
        href = _e((folder / f).relative_to(root))
        out.append(f'<a class="thumb" href="{href}" title="open {label}">{img}<span>{label}</span></a>')
    return f'<div class="thumbs">{"".join(out)}</div>' if out else ""


def _cell(c: Claim | None, s: Summary | None = None, prompts: bool = True) -> str:
    """A claim's cell: verdict, head, number, reason, (``prompts``: the run's notes and prompt source,) when it was
    measured, and the measured values in a fold."""
    if c is None:
        return '<td class="none">not measured</td>'
    t = s.finished_at
    when = t.replace("T", " ")[:16] if t else "(time not recorded)"
    source, notes = (s.get("prompt_source", ""), s.get("notes") or ()) if prompts else ("", ())
    head = f' <span class="head">on {_e(c.head)}</span>' if c.head else ""
    measured = present(c.measured)
    fold = (
        f"<details><summary>measured</summary>{_e(measured)}</details>"
        if measured and measured != c.readout and c.verdict != NOT_TESTABLE
        else ""
    )
    return _fill(
        "cell",
        badge=_verdict_badge(c.verdict),
        head=head,
        readout=f'<div class="m">{_e(c.readout)}</div>' if c.readout else "",
        why=_e(c.why),
        notes="".join(f'<div class="why">note: {_e(n)}</div>' for n in notes),
        fold=fold,
        when=_e(when),
        source=f'<div class="when">prompts: {_e(source)}</div>' if source else "",
    )


def run_header(record: dict | None) -> str:
    if not record:
        return "<p>No run record (results/run_all.json): the rows below come from scripts run one by one.</p>"
    m = record.get("machine", {})
    machine = (
        m.get("gpu")
        or f"{m.get('cpu', '?')} ({', '.join(m.get('cpu_extensions', [])) or 'no AVX2'}), {m.get('cores', '?')} cores"
    )
    jobs, total = record.get("jobs", []), record.get("seconds")
    parts = [f"{n} {s}" for s in ("interrupted", "failed", "not run") if (n := sum(j["status"] == s for j in jobs))]
    unfinished = record.get("interrupted") or any(j["status"] != "ok" for j in jobs)
    return _fill(
        "header",
        started=_e(str(record.get("started", "?")).replace("T", " ")[:16]),
        total=f", {total / 60:.1f} min in all" if total else "",
        machine=_e(machine),
        quick=" (toy scripts as --quick smoke tests)" if record.get("quick") else "",
        banner=_fill("unfinished", parts=", ".join(parts)) if unfinished else "",
        rows="".join(
            _fill(
                "job",
                script=_e(j["script"]),
                model=_e(j.get("model") or TOY_COLUMN),
                kind=_e(j["status"].replace(" ", "-")),
                status=_e(j["status"] + (f" ({j['signal']})" if j.get("signal") else "")),
                time=fmt(j["seconds"]) + " s" if "seconds" in j else "",
            )
            for j in jobs
        ),
    )


Cells = dict[tuple[str, str], dict[str, tuple[Claim, Summary, Path]]]


def _claims_by_model(
    summaries: list[tuple[Path, Summary]], record: dict | None = None
) -> tuple[Cells, list[str], dict[str, int], Columns]:
    """``(cells, models, counts, columns)``: ``cells[(script, claim key)][model] = (claim, summary, folder)``, the
    model columns' keys (the run record's first), each verdict's count, and the :class:`Columns`."""
    counts = dict.fromkeys(VERDICTS, 0)
    cells: Cells = {}
    columns = Columns(summaries, record)
    models = list(dict.fromkeys(columns.key_of_name(name) for name in (record or {}).get("models", [])))
    for path, s in summaries:
        model = columns.keys[path]
        if model != TOY_COLUMN and model not in models:
            models.append(model)
        for c in s.claims:
            cells.setdefault((s.script or path.parent.name, c.key or c.claim), {})[model] = (c, s, path.parent)
            counts[c.verdict] += 1
    return cells, models, counts, columns


def claims_markdown(root: Path, post_key: str) -> str:
    """One post's claims as a Markdown table for the docs, one column per model: verdict, head and number (a `not
    testable` cell: what failed)."""
    post = next((p for p in posts() if p.key == post_key), None)
    if post is None:
        raise ValueError(f"unknown post {post_key!r}; posts: {', '.join(p.key for p in posts())}")
    cells, models, _, columns = _claims_by_model(collect_summaries(root))
    cols = models if post.needs_model else [TOY_COLUMN]

    def cell(c: Claim | None) -> str:
        if c is None:
            return "not measured"
        head = f" on {c.head}" if c.head else ""
        if c.verdict == NOT_TESTABLE and c.why:  # what failed says more than partial numbers
            shown = c.why.removeprefix("not testable here: ")
        else:
            shown = c.readout or present(c.measured)
        return f"**{c.verdict}**{head}: {shown.replace('|', '/')}"

    heads = [columns.label(m) for m in cols]
    lines = ["| claim | the post | " + " | ".join(heads) + " |", "| --- | --- |" + " --- |" * len(cols)]
    for k in (k for k in cells if k[0] in post.scripts):
        first = next(iter(cells[k].values()))[0]
        row = [cell(cells[k][m][0] if m in cells[k] else None) for m in cols]
        lines.append(f"| {first.claim} | {present(first.post)} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


# --- the page, one part at a time ---------------------------------------------------------------------------------


# the parts of index_page.html by name (its first comment says how line breaks are read)
TEMPLATES = {
    k: Template(v if k == "page" else v.replace("\n", ""))
    for k, v in re.findall(
        r"^<!-- (\w+) -->\n(.*?)\n(?=<!-- \w+ -->\n|\Z)",
        Path(__file__).with_name("index_page.html").read_text(encoding="utf-8"),
        re.M | re.S,
    )
}


def _fill(part: str, values: dict | None = None, **more) -> str:
    """Part ``part`` of the page with ``values`` and ``more`` filled in (HTML already escaped)."""
    return TEMPLATES[part].substitute(dict(values or {}, **more))


def _post_section(post, keys, cells: Cells, cols: list[str], columns: Columns, status: dict, root: Path) -> str:
    body = []
    for script in post.scripts:
        mine = [k for k in keys if k[0] == script]
        measured = {m for k in mine for m in cells[k]}
        missing = [m for m in cols if m not in measured]
        if missing and any((script, m) in status for m in missing):  # no results at all from this run for them
            row = "".join(
                f'<td class="none">no results: {_e(status.get((script, m), "not run"))}</td>'
                if m in missing
                else "<td></td>"
                for m in cols
            )
            body.append(_fill("no_results", script=_e(script), cells=row))
        for k in mine:
            first = next(iter(cells[k].values()))[0]
            words = ROLE_WORDS.get(first.role)
            tag = f"<span class='tag {first.role}' title='{_e(words)}'>{first.role}</span>" if words else ""
            row = "".join(_cell(*cells[k][m][:2]) if m in cells[k] else _cell(None) for m in cols)
            said = dict(claim=_e(first.claim), tag=tag, rule=_e(first.rule), post=_e(present(first.post)))
            body.append(_fill("claim", said, script=_e(script), cells=row))
        thumbs, seen = [], set()  # the script's figures, one group per results folder
        for k in mine:
            for m, (_, s, folder) in cells[k].items():
                if folder not in seen and (t := _thumbs(s, folder, root)):
                    thumbs.append(f"<div class='figs'><span>{_e(script)} · {_e(columns.label(m))}</span>{t}</div>")
                seen.add(folder)
        if thumbs:
            body.append(f"<tr class='figrow'><td colspan='{2 + len(cols)}'>{''.join(thumbs)}</td></tr>")
    heads = "".join(f"<th>{_e(columns.label(m))}</th>" for m in cols)
    return _fill("section", key=_e(post.key), title=_e(post.title), heads=heads, rows="".join(body))


def index_html(
    summaries: list[tuple[Path, Summary]],
    root: Path,
    record: dict | None = None,
    title: str = "gpt2_posheads: the posts' claims, measured",
) -> str:
    """The page (see the module doc)."""
    cells, models, counts, columns = _claims_by_model(summaries, record)
    status = {
        (j["script"], columns.key_of_name(j["model"]) if j.get("model") else TOY_COLUMN): j["status"]
        for j in (record or {}).get("jobs", [])
    }
    found = sorted((root / "explorer").glob("*.html")) if (root / "explorer").is_dir() else []
    links = " · ".join(f'<a href="{_e(p.relative_to(root))}">{_e(p.stem)}</a>' for p in found)
    sections = []
    for post in posts():
        keys = [k for k in cells if k[0] in post.scripts]
        if keys or any(s in {sc for sc, _ in status} for s in post.scripts):
            cols = models if post.needs_model else [TOY_COLUMN]
            sections.append(_post_section(post, keys, cells, cols, columns, status, root))
    return TEMPLATES["page"].substitute(
        title=_e(title),
        written=time.strftime("%Y-%m-%d %H:%M"),
        counts=", ".join(f"{n} {v}" for v, n in counts.items()),
        header=run_header(record),
        explorers=f"<p>Attention explorer (offline): {links}</p>" if links else "",
        routes=routes_html(summaries, root, record),  # each model's route conclusion, above the claims it is drawn from
        sections="".join(sections) + organism_html(summaries, root),
        robustness=robustness_html(summaries, root),
    )


def route_conclusions(summaries: list[tuple[Path, Summary]], root: Path, record: dict | None = None) -> dict:
    """``{model column heading: RouteConclusion}`` for every model a route-telling post's scripts ran on."""
    from ..claims.route import route_conclusion_from_summaries

    columns = Columns(summaries, record)
    routed = {c.post for c in claims().values() if c.role == ROUTE}  # the posts whose claims tell a route
    by_model: dict[str, list[Summary]] = {}
    for path, s in summaries:
        model = columns.keys[path]
        if model != TOY_COLUMN and getattr(scripts().get(s.script), "post", None) in routed:
            by_model.setdefault(model, []).append(s)
    return {columns.label(m): route_conclusion_from_summaries(ss) for m, ss in by_model.items()}


WEIGHTS_SAY = {
    True: "agrees",
    False: "<b>disagrees</b> with the causal conclusion",
    None: "no causal label to hold it to",
}


def _weights_script() -> str:
    """The script that declares the weight route's claim."""
    from ..claims.route import WEIGHT_KEY

    return _e(getattr(claims().get(WEIGHT_KEY), "script", WEIGHT_KEY))


def _route_row(model: str, c) -> str:
    """A model's route conclusion, and the route read from the weights alone: whether it agrees with ``c``."""
    from ..claims.route import weight_route_of, weights_agree

    head = f' <span class="head">on {_e(c.head)}</span>' if c.head else ""
    rows = "".join(f"<div>{_verdict_badge(r.verdict)} {_e(r.key)}: {_e(r.evidence)}</div>" for r in c.rows)
    w = weight_route_of(c.records)
    if w is None:
        weights = f"<td><div class='why'>{_weights_script()} not run on this model</div></td>"
    else:
        weights = (
            f"<td><b>{_e(w['label'])}</b> <span class='head'>on {_e(w.get('head', ''))}</span>"
            f"<div class='why'>{WEIGHTS_SAY[weights_agree(c.route, str(w['label']))]}: "
            f"{_e(w.get('reason', ''))}</div></td>"
        )
    return _fill("route", model=_e(model), words=_e(c.words), head=head, why=_e(c.why), rows=rows, weights=weights)


def routes_html(summaries: list[tuple[Path, Summary]], root: Path, record: dict | None = None) -> str:
    """The page's first table: each model's route conclusion, and beside it the route read from the weights."""
    routes = route_conclusions(summaries, root, record)
    rows = "".join(_route_row(m, c) for m, c in routes.items())
    return TEMPLATES["routes"].substitute(weights=_weights_script(), rows=rows) if routes else ""


def organism_html(summaries: list[tuple[Path, Summary]], root: Path) -> str:
    """The reports (scripts declared ``report=True``): each model's behaviour targets and a link to its report."""
    reports = [(p, s) for p, s in summaries if getattr(declared_script(s.script), "report", False)]
    if not reports:
        return ""
    rows = []
    for p, s in reports:
        link = _e((p.parent / "report.html").relative_to(root))
        beside = f" (beside {_e(s['compare'])})" if s.get("compare") else ""
        cells = "".join(_cell(c, s, prompts=False) for c in s.claims)
        rows.append(f"<tr><td><b>{_e(s.model)}</b><div><a href='{link}'>the report</a>{beside}</div></td>{cells}</tr>")
    heads = "".join(f"<th>{_e(c.claim)}</th>" for c in reports[0][1].claims)
    return TEMPLATES["organisms"].substitute(heads=heads, rows="".join(rows))


def robustness_html(summaries: list[tuple[Path, Summary]], root: Path) -> str:
    """The ``--robustness`` totals: per grid claim, held in k of n runs, and in how many settings for every seed."""
    rows = [
        _fill(
            "grid_claim",
            t,
            script=_e(s.script),
            quick=" <b>(quick)</b>" if s.quick else "",
            key=_e(t["key"]),
            rule=_e(t["rule"]),
            untested=f" ({t['not_testable_runs']} not testable)" if t.get("not_testable_runs") else "",
            link=_e(path.parent.relative_to(root) / "robustness.html"),
        )
        for path, s in summaries
        if s.get("robustness")
        for t in grid_records(s["robustness"])
    ]
    return TEMPLATES["robustness"].substitute(rows="".join(rows)) if rows else ""


def write_index(root: Path, record: dict | None = None, summaries: list[tuple[Path, Summary]] | None = None) -> Path:
    """Write ``root/index.html`` whole or not at all (defaults: every summary under ``root``, ``root/run_all.json``)."""
    root.mkdir(parents=True, exist_ok=True)
    if record is None and (root / "run_all.json").exists():
        with contextlib.suppress(ValueError):  # an unreadable record: the page says there is none
            record = json.loads((root / "run_all.json").read_text())
    page = index_html(collect_summaries(root) if summaries is None else summaries, root, record)
    return write_whole_text(root / "index.html", page)
