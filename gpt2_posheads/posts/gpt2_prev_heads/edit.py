"""Editing the aggregator's attention and scaling its output redirects induction (GPT-2 post, last section).

    gpt2-posheads l4h11_edit --model mini-gpt2          # the model's aggregator
    gpt2-posheads l4h11_edit --heads L4H11                        # GPT-2 small (the default there)

On the repeat-string prompt ending in `Reply: " ninja`, the model should say " turtle". The edit shifts the head's
attention in the request back by one position — " turtle" attends to the token before " ninja" and " pirate" attends to
" ninja" — so an induction head looking for "the token after ninja" finds " pirate"; the head's output is multiplied by
each factor. A word that is several tokens in the model's vocabulary is replaced by a single-token word (single
characters in a character vocabulary) and a short context gets a shorter prompt, each said; where no prompt fits, the
claim is not testable with the numbers. Post: P(" turtle") 99% clean; with the edit and factor 2, P(" pirate") 65% and
P(" turtle") 26%. Not testable on a model that does not copy the clean prompt, or for a head that is not a
previous-token head.
"""

from __future__ import annotations

from functools import partial

import plotly.graph_objects as go

from ...analysis.heads import HeadDefault
from ...analysis.interventions import edit_head_pattern, scale_head_output
from ...analysis.measures import next_token_probs, top_tokens
from ...analysis.repeat_prompt import RepeatPrompt, edit_mapping, split_words
from ...claims.catalogue import Option
from ...claims.gpt2_post import model_copies, post_claim
from ...claims.verdicts import Claim, Precondition, predicate
from ...model.validation import NonFiniteError, UsageError, head_name
from ..result import ClaimResult
from ._run import HeadsArg, ModelRun, claim_script, prompted_run, repeat_prompts

HEADS = HeadDefault(("L4H11",), "aggregator", what="the previous-token head to edit (the first is used)")


@partial(predicate, "held if, with the edit and output x2, P(third word) > P(second word) and P(third) rose by >= 0.2")
def _edit_moves_copy(v) -> tuple[bool, str]:
    clean_third, p_second, p_third = v
    ok = p_third > p_second and p_third >= clean_third + 0.2
    return ok, (
        f"with the edit and output x2: P(third) = {p_third:.3g} {'>' if p_third > p_second else '<='} "
        f"P(second) = {p_second:.3g}; P(third) rose from {clean_third:.3g} by {p_third - clean_third:+.3g} "
        "(needs >= +0.2)"
    )


SPECS = (MOVES_COPY,) = (
    post_claim(
        "edit_moves_copy",
        "editing the aggregator's pattern with output x2 moves the copy to the third word",
        "P(pirate) 65%, P(turtle) 26%",
        _edit_moves_copy,
        why_kind="it shows the head feeds induction, whichever way the head finds p-1",
    ),
)

PROMPTS = dict(n_prompts=8, seq_len=128)  # the natural-text prompts it measures on by default
# The largest output factor: the post scales by 2. A head's output scaled a millionfold already outweighs every other
# write to the residual stream many times over, and far larger factors only reach float32's range (LayerNorm squares
# the residual: past ~1e19 that is infinite), which measures the arithmetic, not the edit.
MAX_FACTOR = 1e6


def check_factors(factors, param: str = "factors") -> list[float]:
    """``factors`` as floats, each a finite number in ``0..MAX_FACTOR``, 2 (the post's) among them; else a one-line
    :class:`~gpt2_posheads.model.validation.UsageError` naming ``param`` (``--factors`` for the command)."""
    example = "e.g. 1,2,3" if param.startswith("--") else "e.g. (1, 2, 3)"
    try:
        values = [float(f) for f in factors]
    except (TypeError, ValueError):
        raise UsageError(param, f"{factors!r} is not a list of numbers", "numbers >= 0", example) from None
    top = f"{MAX_FACTOR:.0e}".replace("e+0", "e")
    for f in values:
        if not 0 <= f <= MAX_FACTOR:  # NaN fails too
            why = "a larger factor swamps the residual stream, and far larger ones overflow float32 (NaN logits)"
            raise UsageError(param, f"{f:g} is out of range", f"allowed 0..{top} (the post's factor is 2)", why)
    if 2.0 not in values:
        raise UsageError(param, f"{values} lacks 2", "include 2 (the post's factor)", example)
    return values


def measure(model, rp: RepeatPrompt, head: tuple[int, int], factors: list[float]) -> list[dict]:
    """One row per condition (clean, then the edit at each factor): ``factor`` (``None`` clean), ``P(<second word>)``,
    ``P(<third word>)`` (the next token) and ``top5``. An edited condition whose logits are not finite is that row's
    failure (NaN, ``not_measured`` says why); the clean pass failing is the model's, and raises."""
    l, h = head
    ids = {w: model.tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in (rp.words[1], rp.words[2])}

    def row(condition: str, factor: float | None, probs) -> dict:  # probs [d_vocab]
        p = {f"P({w.strip()})": float(probs[i]) for w, i in ids.items()}
        return {"condition": condition, "factor": factor, **p, "top5": top_tokens(model, probs)}

    rows, mapping = [row("clean", None, next_token_probs(model, rp.tokens)[0])], edit_mapping(rp)
    for f in factors:
        edits = [edit_head_pattern(l, h, mapping), scale_head_output(l, h, f)]
        condition = f"edit, output x{f:g}"
        try:
            rows.append(row(condition, f, next_token_probs(model, rp.tokens, edits)[0]))
        except NonFiniteError as e:
            nan = {f"P({w.strip()})": float("nan") for w in ids}
            rows.append({"condition": condition, "factor": f, **nan, "top5": [], "not_measured": f"{condition}: {e}"})
    return rows


def judge(run: ModelRun, head: tuple[int, int], rp: RepeatPrompt, rows: list[dict]) -> Claim:
    """``edit_moves_copy``: at factor 2 the third word overtakes the second, which the clean model copies."""
    s, t = rp.words[1].strip(), rp.words[2].strip()
    x2 = next(r for r in rows if r["factor"] == 2.0)
    pre = [
        model_copies({f"P({s} | {rp.words[0].strip()})": rows[0][f"P({s})"]}),
        run.prev_head(head),
        Precondition("the edit with output x2 is measured", "not_measured" not in x2, x2.get("not_measured", "")),
    ]
    probs = {
        name: {k: v for k, v in r.items() if k.startswith("P(")} for name, r in (("clean", rows[0]), ("edit_x2", x2))
    }
    shown = f"P({t}) {rows[0][f'P({t})']:.3g} -> {x2[f'P({t})']:.3g}, P({s}) {x2[f'P({s})']:.3g}"
    value = (rows[0][f"P({t})"], x2[f"P({s})"], x2[f"P({t})"])
    return MOVES_COPY.judge(probs, value, pre, head=head_name(*head), readout=shown)


def _prepare(model, kwargs: dict, args) -> None:
    if model is not None:
        return
    kwargs["factors"] = check_factors(kwargs["factors"], "--factors")
    words = split_words(kwargs["target"])
    if len(words) != 3:
        problem = f"{kwargs['target']!r} has {len(words)} word(s)"
        raise UsageError("--target", problem, "exactly three words", "e.g. ' ninja turtle pirate'")


def _console(result: ClaimResult, options: dict) -> None:
    for r in result.numbers.get("rows", []):  # none where no repeat-string prompt fits the model
        probs = "  ".join(f"{k}={v:.3f}" for k, v in r.items() if k.startswith("P("))
        print(f"{r['condition']:>20}: {probs}", "| top:", ", ".join(f"{t!r} {p:.2f}" for t, p in r["top5"][:3]))


@claim_script(
    "l4h11_edit",
    takes=("seed",),
    order=8,
    claims=SPECS,
    **PROMPTS,
    heads=HEADS,
    options=(
        Option("--target", " ninja turtle pirate", "three words to repeat", str),
        Option(
            "--factors", "1,2,3", "output scale factors, each 0..1e6 (must include 2, the post's)", parse="float_list"
        ),
    ),
    prepare=_prepare,
    console=_console,
)
def l4h11_edit(
    model=None,
    prompts=None,
    heads: HeadsArg = None,
    *,
    target: str = " ninja turtle pirate",
    factors: tuple[float, ...] | list[float] = (1.0, 2.0, 3.0),
    seed: int = 0,
    run: ModelRun | None = None,
) -> ClaimResult:
    """Edit the head's attention on the repeat-string prompt, scale its output by each factor, and read the copy.

    ``prompts``: what the heads are ranked on (the edit runs on the repeat-string prompt); ``heads``: the first is
    edited. ``target``: three words, each keeping its leading space. ``factors``: :func:`check_factors`; the claim is
    judged on the x2 row. ``seed``: the demonstrations'. ``numbers``: ``mapping`` ``{query position: key position}``,
    ``rows``, ...
    """
    factors = check_factors(factors)
    if not isinstance(target, str) or len(split_words(target)) != 3:
        raise UsageError(
            "target", f"{target!r} is not three words", "exactly three words", "e.g. ' ninja turtle pirate'"
        )
    run = prompted_run(model, prompts, run, **PROMPTS).ranked()
    chosen, how = run.heads(heads, HEADS)
    result = ClaimResult("l4h11_edit", run.label)
    result.numbers["heads_chosen"] = how
    target = target if target.startswith(" ") else " " + target
    reps, no_prompt = repeat_prompts(run.model, [target], n_given=1, seed=seed, param="target", contiguous=True)
    if no_prompt:  # not testable, with the numbers
        result.numbers.update(target=target, no_prompt=no_prompt)
        pre = [Precondition("the repeat-string prompt fits the model", False, f"not testable here: {no_prompt}")]
        result.claims.append(MOVES_COPY.judge({"no_prompt": no_prompt}, (float("nan"),) * 3, pre))
        return result
    rp, decode = reps[0], lambda i: run.model.tokenizer.decode([int(rp.tokens[i])])
    target, mapping, rows = rp.sep.join(rp.words), edit_mapping(rp), measure(run.model, rp, chosen[0], factors)
    result.figure(figure(rows, rp, target, chosen[0], run), "l4h11_edit")
    result.claims.append(judge(run, chosen[0], rp, rows))
    tokens = {decode(q): decode(k) for q, k in mapping.items()}
    result.numbers.update(target=target, prompt=rp.text, mapping=mapping, mapping_tokens=tokens, rows=rows)
    return result


def figure(rows: list[dict], rp: RepeatPrompt, target: str, head: tuple[int, int], run: ModelRun):
    """P(second word) and P(third word) per condition."""
    fig, x = go.Figure(), [r["condition"] for r in rows]
    for w in dict.fromkeys((rp.words[1], rp.words[2])):  # one trace per distinct word
        probs = [r[f"P({w.strip()})"] for r in rows]
        fig.add_trace(go.Bar(x=x, y=probs, name=f"P({w!r})", text=[f"{p:.3f}" for p in probs], textposition="outside"))
    fig.update_layout(
        barmode="group",
        title=f"{run.label}: {head_name(*head)} edited on {target!r}<br><sup>next word after "
        f"'Reply: \"{rp.words[0].strip()}'</sup>",
        yaxis=dict(title="next-token probability", range=[0, 1.1], tickformat=".2f"),
    )
    return fig
