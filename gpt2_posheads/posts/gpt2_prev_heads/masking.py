"""Masking attention to the previous position in earlier layers disrupts the aggregator (GPT-2 post).

    gpt2-posheads mask_prev_attention --model mini-gpt2
    gpt2-posheads mask_prev_attention --heads L4H11 --layers 0,1,2,3      # the post's setting

Every query p with p % every == 0 loses its attention to p-1 in every head of --layers (post-softmax); W_pos is
untouched. Default --layers: every layer below the head's own (masking the head's own layer would test the mask, not the
mechanism). The claim is judged on the masked rows, the ones the post's figure shows disrupted (the rows in between are
reported too). Side by side: the head's 50x50 pattern clean vs masked. Not testable for a head that is not a clear
previous-token head or sits in layer 0.
"""

from __future__ import annotations

from ...analysis.heads import HeadDefault
from ...analysis.interventions import MASK_EVERY, masked_queries
from ...analysis.interventions import mask_previous_attention as mask_intervention
from ...analysis.measures import compare_head_patterns
from ...claims.catalogue import Option
from ...claims.gpt2_post import HALF, ROUTE, ClaimSpec, layer_above, register_claim
from ...claims.verdicts import Claim, Precondition, finite, predicate
from ...model.validation import head_name
from ...report.plotting import attention_panels
from ..result import ClaimResult
from ._run import HeadsArg, ModelRun, claim_script, prompted_run, side_by_side

HEADS = HeadDefault(("L4H11",), "aggregator", what="head(s) whose pattern is measured")


def _drops_half(v) -> tuple[bool, str]:  # v: (clean, intervened) previous-token mass on the masked rows
    clean, new = v
    if not (finite(clean) and finite(new)) or clean <= 0:
        return False, f"previous-token mass on the masked rows {clean} -> {new}: nothing to compare"
    drop = 1 - new / clean
    return drop >= HALF, (
        f"on the masked rows, previous-token mass {clean:.3g} -> {new:.3g}: {drop:.0%} lower (needs >= {HALF:.0%})"
    )


def disrupts_at(every: int) -> ClaimSpec:
    """``mask_disrupts`` as measured at masking period ``every``: its sentence and rule name the period (the post masks
    every 5th query, :data:`~gpt2_posheads.analysis.interventions.MASK_EVERY`)."""
    nth = f"every {every}{'th' if 10 <= every % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(every % 10, 'th')}"
    return ClaimSpec(
        "mask_disrupts",
        f"masking attention to p-1 {nth} position in the layers below disrupts the head",
        "L4H11 visibly disrupted",
        predicate(
            f"held if, on the masked rows ({nth} query), the head loses >= {HALF:.0%} of its "
            "previous-token attention when the layers below cannot see p-1 there",
            _drops_half,
        ),
        ROUTE,
        "a head that reads W_pos does not care what the layers below attend to",
    )


# registered with the post's period
SPECS = (register_claim(disrupts_at(MASK_EVERY)),)

MIN_EVERY = 2  # the claim's period: every=1 would mask every query, the previous position gone everywhere
PROMPTS = dict(n_prompts=8, seq_len=256)  # the natural-text prompts it measures on by default


def preconditions(run: ModelRun, head: tuple[int, int], layers: list[int], every: int) -> list[Precondition]:
    (l, _), name, n = head, head_name(*head), run.prompts.shape[1]
    pre = [run.prev_head(head), layer_above(name, l, 0)]
    if l > 0:  # in layer 0 the line above already says there is nothing below
        above = f"the masked layers {', '.join(map(str, layers))} do not all lie below {name}'s layer {l}"
        pre.append(
            Precondition("every masked layer lies below the head's own", bool(layers) and max(layers) < l, above)
        )
    none = f"no query is masked: --every {every} with prompts of {n} tokens (the first masked query is position "
    return pre + [Precondition("at least one query is masked", len(masked_queries(every, n)) > 0, f"{none}{every})")]


@claim_script(
    "mask_prev_attention",
    order=5,
    claims=SPECS,
    **PROMPTS,
    heads=HEADS,
    options=(
        Option(
            "--layers", None, "comma-separated layers to mask (default: every layer below the head's)", parse="layers"
        ),
        Option("--every", MASK_EVERY, "mask queries p with p %% every == 0", int, low=MIN_EVERY),
        Option("--renormalize", False, "renormalise masked rows to sum to 1"),
    ),
    submatrix=True,
)
def mask_prev_attention(
    model=None,
    prompts=None,
    heads: HeadsArg = None,
    *,
    layers: list[int] | None = None,
    every: int = MASK_EVERY,
    renormalize: bool = False,
    start: int = 60,
    size: int = 50,
    run: ModelRun | None = None,
) -> ClaimResult:
    """Mask attention to the previous position (queries ``p % every == 0``, the post: 5) in ``layers`` and measure each
    head (the module doc). One ``mask_disrupts`` per head; ``numbers``: ``results``, per head the masses clean and
    masked."""
    if every < MIN_EVERY:
        raise ValueError(f"every: {every} is out of range; allowed >= {MIN_EVERY} (every=1 would mask every query)")
    run = prompted_run(model, prompts, run, **PROMPTS).ranked()
    chosen, how = run.heads(heads, HEADS)
    result = ClaimResult("mask_prev_attention", run.label)
    result.numbers.update(heads_chosen=how, every=every)
    spec = disrupts_at(every)
    results, panels, first = [], {}, 0
    for l, h in chosen:
        name = head_name(l, h)
        masked_layers = list(layers) if layers is not None else list(range(l))
        pre = preconditions(run, (l, h), masked_layers, every)
        measured = {"head": name, "masked_layers": masked_layers}
        if not all(p.ok for p in pre[1:]):  # nothing below to mask, or no query masked
            results.append(measured)
            result.claims.append(spec.judge(dict(measured), (0.0, 0.0), pre, head=name))
            continue
        # the head's pattern clean and with attention to p-1 masked (post-softmax) for every query p % every == 0 in
        # every head of the layers below; its previous-token mass also on the masked rows
        iv, rows = mask_intervention(every, masked_layers, renormalize), masked_queries(every, run.prompts.shape[1])
        cmp = compare_head_patterns(run.model, run.prompts, (l, h), [iv], rows=rows)
        first = side_by_side(panels, cmp, name, f"masked ({_layers_words(masked_layers)}, every {every})", start, size)
        results.append({**measured, "every": every, **cmp})
        result.claims.append(judge(name, masked_layers, cmp, pre, every))
    result.numbers["results"] = results
    if panels:
        what = "attention submatrix, clean vs previous position masked below"
        fig = attention_panels(panels, run.tokens(), first, run.label, what, run.source)
        result.figure(fig, "mask_prev_attention", width=1100)
    return result


def judge(name: str, masked_layers: list[int], cmp: dict, pre: list[Precondition], every: int = MASK_EVERY) -> Claim:
    """``mask_disrupts`` on one head, masked at period ``every``."""
    both = ("clean", "intervened")
    rows, all_rows = [cmp[f"prev_rows_{w}"] for w in both], [cmp[f"prev_score_{w}"] for w in both]
    measured = dict(head=name, masked_layers=masked_layers, prev_mass_masked_rows=rows, prev_mass_all_rows=all_rows)
    shown = f"{cmp['rows_relative_drop']:.0%} lower on the masked rows ({cmp['relative_drop']:.0%} on all)"
    return disrupts_at(every).judge(measured, tuple(rows), pre, head=name, readout=shown)


def _layers_words(layers: list[int]) -> str:
    contiguous = len(layers) > 1 and layers == list(range(layers[0], layers[-1] + 1))
    shown = f"{layers[0]}-{layers[-1]}" if contiguous else ", ".join(map(str, layers))
    return f"layer{'s' if len(layers) > 1 else ''} {shown}"
