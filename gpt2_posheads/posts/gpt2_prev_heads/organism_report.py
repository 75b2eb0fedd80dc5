"""One page on a model organism: does it have the GPT-2 post's mechanism, and claim by claim, does the post's causal
story hold on it (does it take the post's route)?

    gpt2-posheads mini_gpt2_report --model route-gpt2 --compare <mini-gpt2 folder>
    gpt2-posheads mini_gpt2_report --model-dir my-organism --compare <route-gpt2 folder>
    gpt2-posheads mini_gpt2_report --model mini-gpt2 --skip-scripts   # targets only

Part 1, the behaviour targets (measured by gpt2_posheads.posts.gpt2_prev_heads.organism_targets, judged by
gpt2_posheads.claims.organism), each a rule fixed before any model was built or trained: a sharp previous-token head,
induction and copying, held-out loss. Part 2, the story: every GPT-2 claim script on this model
(results/<script>/<model>/), in three columns: this model, the --compare model (its latest results, when it has any) and
the post's GPT-2 numbers; the claims that tell the post's route from a head reading W_pos are marked "route", and the
route conclusion drawn from them (gpt2_posheads.claims.route) leads it. Writes report.html and summary.json under
results/mini_gpt2_report/<model>/. As a function: posts.gpt2_prev_heads.mini_gpt2_report.
"""

from __future__ import annotations

from html import escape as esc
from pathlib import Path

from ...analysis.prompts import encode_stream, wikitext_documents
from ...claims.catalogue import Option, claims, declare
from ...claims.gpt2_post import CLAIMS, ROUTE
from ...claims.organism import REFERENCE_HELDOUT, TARGETS, judge_targets
from ...claims.record import SummaryError, read_summary
from ...claims.route import RouteConclusion, conclude, records_from_claims
from ...claims.verdicts import NOT_TESTABLE, VERDICT_COLOURS, Claim
from ..result import ClaimResult
from ._run import POST, head_grid, ratio_grid
from .organism_targets import measure_targets


def story_steps() -> list[tuple[str, str]]:
    """The post's story: ``(command, claim key)`` of every claim the post's commands declare, in its reading order
    (:func:`~gpt2_posheads.claims.catalogue.claims`)."""
    return [(c.script, key) for key, c in claims().items() if c.post == POST and c.script in POST.scripts]


def heldout_text(model, n_prompts: int, seq_len: int):
    """``(prompts, stream)``: up to ``n_prompts`` prompts ``[n, seq]`` (``seq_len`` capped at the context, BOS first)
    cut from the organism's held-out WikiText-2 split, and that split as one token stream ``[tokens]``."""
    from ...organism.data import split_docs  # the organism loads on first use, not with the package

    _, val_docs = split_docs(wikitext_documents(), 0.05, 0)  # the organism's held-out split (never trained on)
    seq = min(seq_len, model.cfg.n_ctx)
    stream = encode_stream(model.tokenizer, val_docs)  # each document after <|endoftext|>, as the training evaluates
    n = min(n_prompts, (len(stream) - 1) // seq)
    text = stream[: n * seq].view(n, seq).clone()
    text[:, 0] = model.tokenizer.bos_token_id
    return text, stream


def story(results: str | Path, name: str) -> dict[str, Claim]:
    """``{claim key: the claim of this model's latest run}`` for every step of :func:`story_steps`, as its command
    judged it, read from ``results/<command>/<name>/summary.json``; a step without a run that judged it is ``not
    testable``, saying why."""
    summaries, missing, steps = {}, {}, story_steps()
    for script in dict.fromkeys(s for s, _ in steps):
        path = Path(results) / script / name / "summary.json"
        if not path.exists():
            missing[script] = f"{script} has not run on this model (no {_shown(path)})"
            continue
        try:
            summaries[script] = read_summary(path)
        except SummaryError as e:
            missing[script] = f"{script}'s results cannot be read: {e}"
    rows = {}
    for script, key in steps:
        found = summaries[script].claim(key) if script in summaries else None
        why = missing.get(script) or f"{script} judged no claim {key} on this model ({_shown(summaries[script].path)})"
        rows[key] = found or CLAIMS[key].untested(why, measured="", here=False)
    return rows


def _shown(path: Path) -> str:  # relative to the current folder when under it
    return str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)


SPECS = TARGETS  # the organism's behaviour targets, declared with their rules before any model was built or trained


@declare(
    POST,
    "mini_gpt2_report",
    claims=SPECS,
    command=True,
    report=True,
    usage=__doc__,
    options=(
        Option("--n-prompts", 32, "held-out text prompts (WikiText-2 held-out split)", int, low=1),
        Option("--seq-len", 256, "tokens per prompt (capped at n_ctx)", int, low=1),
        Option(
            "--compare",
            None,
            "a second model folder whose latest claim results fill the middle column (default: the other shipped "
            "organism)",
        ),
        Option("--skip-scripts", False, "only the targets; reuse the claim scripts' last results", kwarg=None),
    ),
)
def mini_gpt2_report(
    model=None,
    *,
    results: str | Path = "results",
    name: str | None = None,
    compare: str | Path | None = None,
    n_prompts: int = 32,
    seq_len: int = 256,
    seed: int = 0,
    label: str = "",
) -> ClaimResult:
    """Judge the organism's behaviour targets on held-out text (:func:`heldout_text`,
    :func:`~.organism_targets.measure_targets`) and put the post's story on it beside another model.

    The story is read from ``<results>/<command>/<name>/summary.json`` (:func:`story`; ``name``: default the last part
    of the model's name, ``label`` in the titles); ``compare``, a second model (a folder or name), fills the middle
    column from its latest results, when it has any. ``seed``: the random-token and copy prompts'. ``numbers``:
    ``story`` (its claims), ``route`` (the route conclusion drawn from them), ...; ``files``: ``report.html``.
    """
    if not (hasattr(model, "cfg") and hasattr(model, "tokenizer")):
        how = "gpt2_posheads.load_model(name or folder) loads one"
        raise TypeError(f"model: a TransformerLens model or bridge is needed, got {type(model).__name__}; {how}")
    label = label or str(getattr(model.cfg, "model_name", "") or "model")
    name = name or Path(label).name
    text, stream = heldout_text(model, n_prompts, seq_len)
    measured, m = measure_targets(model, text, heldout=stream, seed=seed)
    claims = judge_targets(measured, REFERENCE_HELDOUT["loss"])
    result = ClaimResult("mini_gpt2_report", label, claims=claims)
    title = f"{label}: induction score<br><sup>attention to the token after the earlier occurrence</sup>"
    result.figure(head_grid(m["induction_scores"], title, "score"), "induction_scores")
    title = f"{label}: previous-token ratio on held-out text<br><sup>lower = sharper; blank = not a previous-token head"
    L, H = model.cfg.n_layers, model.cfg.n_heads
    result.figure(ratio_grid(m["ranking_text"], L, H, title + "</sup>"), "prev_token_ratio")
    this = story(results, name)
    contrast_name = Path(compare).resolve().name if compare else None
    ran = contrast_name and (Path(results) / "rank_prev_heads" / contrast_name).exists()
    contrast = story(results, contrast_name) if ran else None
    route = conclude(records_from_claims(this.values()))  # the route rule on the story's claims, as read
    title, figs = f"{label} as a model organism of the GPT-2 post", [f"{stem}.html" for stem in result.figures]
    shown = str(compare) if compare else "(no comparison model)"
    result.files["report.html"] = page(title, claims, this, contrast, shown, figs, route=route)
    result.numbers.update(
        targets={k: v for k, v in m.items() if k not in ("induction_scores", "ranking_text")},
        reference_heldout=REFERENCE_HELDOUT,
        compare=str(compare) if compare is not None else None,
        story=list(this.values()),
        route=route.as_dict(),
    )
    return result


def _cell(c: Claim | None) -> str:
    if c is None:
        return "<td>-</td>"
    colour, head = VERDICT_COLOURS.get(c.verdict, VERDICT_COLOURS[NOT_TESTABLE]), f" ({esc(c.head)})" if c.head else ""
    return f"<td><b style='color:{colour}'>{esc(c.verdict)}</b>{head}<br>{esc(c.readout)}<br><i>{esc(c.why)}</i></td>"


def page(
    title: str,
    targets: list[Claim],
    story: dict[str, Claim],
    contrast: dict[str, Claim] | None,
    contrast_name: str,
    figs: list[str],
    route: RouteConclusion | None = None,
) -> str:
    """``report.html``: the targets, then the story beside ``contrast`` (a second model's story) and the post, led by
    ``route`` (the route conclusion drawn from ``story``, when given)."""
    t_rows = "".join(
        f"<tr><td>{esc(c.claim)}</td><td>{esc(c.post)}</td>{_cell(c)}<td>{esc(c.rule)}</td></tr>" for c in targets
    )
    s_rows = "".join(
        f"<tr><td>{esc(CLAIMS[k].claim)}{' <small>(route)</small>' if CLAIMS[k].role == ROUTE else ''}</td>"
        f"{_cell(story[k])}{_cell(contrast.get(k)) if contrast else '<td>(not run)</td>'}<td>{esc(CLAIMS[k].post)}</td>"
        f"<td>{esc(CLAIMS[k].rule.text)}</td></tr>"
        for k in story
    )
    links = " · ".join(f'<a href="{esc(f)}">{esc(f)}</a>' for f in figs)
    said = (
        f"<p><b>Route conclusion</b> (claims.route, from this model's story): {esc(route.line())}</p>" if route else ""
    )
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{esc(title)}</title><style>
body{{font-family:sans-serif;margin:2em;max-width:1400px}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:4px 6px;vertical-align:top}}th{{background:#f3f3f3}}</style></head><body>
<h1>{esc(title)}</h1><h2>1. The targets</h2>
<table><tr><th>target</th><th>GPT-2 (post)</th><th>this model</th><th>rule</th></tr>{t_rows}</table>
<h2>2. The post's causal story, claim by claim</h2>{said}
<table><tr><th>claim</th><th>this model</th><th>{esc(contrast_name)}</th><th>GPT-2 small (post)</th>
<th>rule</th></tr>
{s_rows}</table><p>Figures: {links}</p></body></html>"""
