"""The ``results/index.html`` page: every claim of every ``summary.json`` with its verdict."""
from __future__ import annotations

import html
import json
import time
from pathlib import Path

from ..claims.catalogue import POSTS

VERDICT_COLOURS = {"held": "#1a7f37", "not held": "#cf222e", "not testable": "#6e7781"}
SCRIPT_ORDER = {s: i for i, s in enumerate(s for p in POSTS for s in p.scripts)}


def collect_summaries(root: Path) -> list[tuple[Path, dict]]:
    """Every ``summary.json`` under ``root`` (sorted by script order, then path)."""
    order = SCRIPT_ORDER
    found = []
    for p in root.rglob("summary.json"):
        if "runs" in p.parts:
            continue
        try:
            found.append((p, json.loads(p.read_text())))
        except ValueError:
            continue
    return sorted(found, key=lambda t: (order.get(t[1].get("script", t[0].parent.name), 99), str(t[0])))


def _short(x, width: int = 90) -> str:
    s = json.dumps(x) if not isinstance(x, str) else x
    return s if len(s) <= width else s[: width - 1] + "…"


def index_html(summaries: list[tuple[Path, dict]], root: Path, title: str = "gpt2_posheads results") -> str:
    """One page: a table of every claim (script, model, claim, post, measured, verdict, rule, why, figures)."""
    counts = {v: 0 for v in VERDICT_COLOURS}
    rows = []
    for path, s in summaries:
        rel = path.parent.relative_to(root)
        figs = [f for f in s.get("figures", []) if f.endswith(".html")]
        links = " ".join(f'<a href="{html.escape(str(rel / f))}">{html.escape(Path(f).stem)}</a>' for f in figs)
        label = html.escape(str(s.get("model", "toy model")))
        quick = " <b>(quick)</b>" if s.get("quick") else ""
        for c in s.get("claims", []):
            v = c.get("verdict", "?")
            counts[v] = counts.get(v, 0) + 1
            rows.append(
                f"<tr><td>{html.escape(s.get('script', rel.parts[0]))}{quick}</td><td>{label}</td>"
                f"<td>{html.escape(c.get('claim', ''))}</td><td>{html.escape(str(c.get('post', '')))}</td>"
                f"<td><code>{html.escape(_short(c.get('measured')))}</code></td>"
                f"<td style='color:white;background:{VERDICT_COLOURS.get(v, '#444')};white-space:nowrap'>{html.escape(v)}</td>"
                f"<td>{html.escape(c.get('rule', ''))}<br><i>{html.escape(c.get('why', ''))}</i></td><td>{links}</td></tr>")
        if not s.get("claims"):
            rows.append(f"<tr><td>{html.escape(s.get('script', rel.parts[0]))}{quick}</td><td>{label}</td>"
                        f"<td colspan=6><i>no claims (a tool run)</i> {links}</td></tr>")
    summary = ", ".join(f"{n} {v}" for v, n in counts.items())
    robust = robustness_html(summaries, root)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:4px 6px;vertical-align:top}}th{{background:#f3f3f3}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Generated {time.strftime('%Y-%m-%d %H:%M')}. Verdicts: {summary}. Each claim is judged by a rule written
before the measurement: <b>held</b>, <b>not held</b>, or <b>not testable</b> (a precondition failed: the model
does not copy, the head is not a previous-token head, the run is <code>--quick</code>, ...).</p>
<table><tr><th>script</th><th>model</th><th>claim</th><th>post</th><th>measured</th><th>verdict</th>
<th>rule / why</th><th>figures</th></tr>
{''.join(rows)}
</table>{robust}</body></html>"""


def robustness_html(summaries: list[tuple[Path, dict]], root: Path) -> str:
    """The toy scripts' ``--robustness`` totals: per claim, held in k of n runs over the grid of unstated
    settings, and in how many settings it held for every seed / for none (empty when no script ran it)."""
    rows = []
    for path, s in summaries:
        r = s.get("robustness")
        if not r:
            continue
        link = html.escape(str(path.parent.relative_to(root) / "robustness.html"))
        for claim, t in r["totals"].items():
            quick = " <b>(quick)</b>" if s.get("quick") else ""
            rows.append(f"<tr><td>{html.escape(s.get('script', ''))}{quick}</td><td>{html.escape(claim)}</td>"
                        f"<td>{t['held_runs']} of {t['runs']}</td><td>{t['settings_all_seeds']} / {t['settings_no_seed']}"
                        f" of {t['settings']}</td><td>{html.escape(r['rules'].get(claim, ''))}</td>"
                        f"<td><a href=\"{link}\">robustness</a></td></tr>")
    if not rows:
        return ""
    return ("<h2>Robustness over the settings the posts do not state</h2><p>lr x {0.3, 1, 3}, batch {128, 256}, "
            "init std {0.02, 1.0}, W_O off/on; each claim's rule as in the table above, per seed.</p>"
            "<table><tr><th>script</th><th>claim</th><th>held (runs)</th><th>settings held in every seed / in none"
            "</th><th>rule</th><th>figure</th></tr>" + "".join(rows) + "</table>")


def write_index(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    p = root / "index.html"
    p.write_text(index_html(collect_summaries(root), root), encoding="utf-8")
    return p
