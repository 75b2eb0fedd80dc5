"""Averaging extended positional embeddings in groups of 10 hurts early previous-token heads much more than the
aggregator (GPT-2 post: L4H11 aggregates earlier heads' signals rather than reading positions).

    gpt2-posheads ext_pos_averaging --model mini-gpt2
    gpt2-posheads ext_pos_averaging --heads L2H2,L4H11          # the post's pair

For each head, the extended positional embeddings at the head's own layer (measured after BOS, as the prompts start with
it; the BOS row is left alone) are group-averaged just before it, and its attention is compared with the clean run. The
post's claim has two parts, both tested: "tremendous damage" to the early head (its pattern moves) and "minimal damage"
to the aggregator (it keeps its previous-token attention). Default heads on a model other than GPT-2 small: the sharpest
clear previous-token head below the aggregator, then the aggregator (its sharpest previous-token head). Not testable
unless both are clear previous-token heads and the first sits below the second.
"""

from __future__ import annotations

import math
from functools import partial

from ...analysis.heads import HeadDefault
from ...analysis.interventions import average_ext_pos_embed
from ...analysis.measures import compare_head_patterns
from ...claims.catalogue import Option
from ...claims.gpt2_post import DAMAGE_JS, KEEP, POS_GROUP, ROUTE, post_claim
from ...claims.verdicts import Claim, Precondition, finite, predicate
from ...model.validation import head_name, note
from ...report.plotting import attention_panels
from ..result import ClaimResult
from ._run import HeadsArg, ModelRun, claim_script, prompted_run, side_by_side

EACH = "an early head and the aggregator (each averaged just before its own layer)"
HEADS = HeadDefault(("L2H2", "L4H11"), "aggregator+early", what=EACH)


@partial(
    predicate,
    f"held if averaging the extended embeddings (groups of 10) just before each head's layer moves the early head's "
    f"pattern >= {DAMAGE_JS:g} nats (JS) and >= 2x as far as the aggregator's, and the aggregator keeps >= {KEEP:.0%} "
    "of its previous-token mass",
)
def _hurts_early_more(v) -> tuple[bool, str]:  # v: (JS of the early head, of the aggregator, share the latter kept)
    js_e, js_a, keep = v
    if not all(finite(x) for x in v):
        return False, f"JS {js_e} (early), {js_a} (aggregator), kept {keep}: not finite"
    ok = js_e >= DAMAGE_JS and js_e >= 2 * js_a and keep >= KEEP
    return ok, (
        f"early head JS {js_e:.3g} nats (needs >= {DAMAGE_JS:g}: damaged), "
        f"{js_e / js_a if js_a > 0 else math.inf:.3g}x the aggregator's {js_a:.3g} (needs >= 2x); the aggregator "
        f"keeps {keep:.0%} of its previous-token mass (needs >= {KEEP:.0%}: minimal damage)"
    )


SPECS = (HURTS_EARLY_MORE,) = (
    post_claim(
        "ext_avg_hurts_early_more",
        "averaging extended embeddings hurts early heads far more than the aggregator",
        "L2H2 badly, L4H11 barely",
        _hurts_early_more,
        ROUTE,
        "a sharp head that reads positions (W_pos is part of the extended embeddings) is hurt as badly",
    ),
)

PROMPTS = dict(n_prompts=8, seq_len=256)  # the natural-text prompts it measures on by default


def judge(run: ModelRun, heads: list[tuple[int, int]], results: list[dict]) -> Claim:
    """``ext_avg_hurts_early_more`` on the first head (the early one) and the last (the aggregator): the post's
    "tremendous damage" to the first and "minimal damage" to the second, both tested."""
    first, last = results[0], results[-1]
    keep = last["prev_score_intervened"] / last["prev_score_clean"] if last["prev_score_clean"] > 0 else float("nan")
    alone = f"only {first['head']}: the model has no previous-token head below it"
    pre = [Precondition("two heads: an early one and the aggregator", len(results) >= 2, alone)]
    pre += [run.prev_head(head) for head in heads]
    if len(results) >= 2:  # with one head the first line already says there is no early head
        above = f"{first['head']} (layer {first['layer']}) does not sit below {last['head']} (layer {last['layer']})"
        pre.append(Precondition("the early head sits below the aggregator", first["layer"] < last["layer"], above))
    js = f"JS {first['js_divergence']:.3g} ({first['head']}) vs {last['js_divergence']:.3g}"
    measured = {
        "js": {r["head"]: r["js_divergence"] for r in results},
        "prev_mass": {r["head"]: [r["prev_score_clean"], r["prev_score_intervened"]] for r in results},
    }
    shown = f"{js} ({last['head']}, keeps {keep:.0%})" if len(results) >= 2 else ""
    value, names = (first["js_divergence"], last["js_divergence"], keep), ",".join(head_name(l, h) for l, h in heads)
    return HURTS_EARLY_MORE.judge(measured, value, pre, head=names, readout=shown)


def _console(result: ClaimResult, options: dict) -> None:
    for r in result.numbers["results"]:
        mass = f"{r['prev_score_clean']:.3f} -> {r['prev_score_intervened']:.3f}"
        print(f"{r['head']}: previous-token mass {mass}, JS {r['js_divergence']:.4f}")


@claim_script(
    "ext_pos_averaging",
    takes=("seed",),
    order=7,
    claims=SPECS,
    **PROMPTS,
    heads=HEADS,
    options=(
        Option(
            "--group-size", POS_GROUP, "rows averaged together (above the model's context: capped, and said)", int, 2
        ),
        Option("--ext-prompts", 16, "repeated-token prompts for the extended embeddings", int, low=1),
    ),
    submatrix=True,
    console=_console,
)
def ext_pos_averaging(
    model=None,
    prompts=None,
    heads: HeadsArg = None,
    *,
    group_size: int = POS_GROUP,
    ext_prompts: int = 16,
    seed: int = 0,
    start: int = 60,
    size: int = 50,
    run: ModelRun | None = None,
) -> ClaimResult:
    """Average the extended positional embeddings just before each head and compare its attention with the clean run.

    ``prompts``: starting with BOS where the model has one; ``heads``: the early head first, the aggregator last.
    ``group_size``: >= 2 (the post: 10). ``numbers``: ``results``, per head its layer, previous-token mass clean and
    averaged, JS divergence.
    """
    run = prompted_run(model, prompts, run, **PROMPTS)
    if isinstance(group_size, bool) or not (isinstance(group_size, int) and group_size >= 2):
        raise ValueError(f"group_size: {group_size!r} is out of range; allowed an integer >= 2 (the post: 10)")
    n_ctx = run.model.cfg.n_ctx
    if group_size > n_ctx:
        note(f"group_size: {group_size} capped at the model's context, {n_ctx} (one group holds every row)")
        group_size = n_ctx
    chosen, how = run.ranked().heads(heads, HEADS)
    result = ClaimResult("ext_pos_averaging", run.label)
    results, panels, first = [], {}, 0
    for l, h in chosen:
        name = head_name(l, h)
        # the extended positional embeddings at the head's layer (ext_prompts repeated-token prompts from seed, after
        # BOS) averaged in groups just before it, the BOS row left alone
        edit = average_ext_pos_embed(l, group_size, n_prompts=ext_prompts, seed=seed)
        cmp = compare_head_patterns(run.model, run.prompts, (l, h), [edit])
        first = side_by_side(panels, cmp, name, f"ext. pos. averaged (g={group_size})", start, size)
        results.append({"head": name, "layer": l, **cmp})
    what = "extended positional embeddings averaged just before each head"
    fig = attention_panels(panels, run.tokens(), first, run.label, what, run.source)
    result.figure(fig, "ext_pos_averaging", width=1100)
    result.claims.append(judge(run, chosen, results))
    result.numbers.update(heads_chosen=how, group_size=group_size, results=results)
    return result
