"""What an intervention changed: next-token distributions, KL over a corpus, attention patterns.

Every pass goes through the model's engine. A clean pattern compared with an intervened one comes from the engine that
applies the intervention (``with_edits``), so that their difference is the intervention's alone.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from ..model.engine import Reduction, as_token_batches, engine_for, single_prompt, to_token_list
from ..model.validation import require_finite


def next_token_probs(model, tokens: torch.Tensor, edits=(), engine: str = "auto") -> torch.Tensor:
    """Probabilities of the next token after the last position: ``[batch, d_vocab]``."""
    toks = torch.stack(to_token_list(model, tokens[None] if tokens.ndim == 1 else tokens))
    logits = engine_for(model, engine).run(toks, edits)
    return require_finite(logits[:, -1].float(), "the model's logits").softmax(-1).cpu()


def top_tokens(model, probs: torch.Tensor, k: int = 5) -> list[tuple[str, float]]:
    """``k`` most likely tokens of a ``[d_vocab]`` distribution as ``(string, probability)``."""
    p, i = probs.topk(k)
    return [(model.tokenizer.decode([int(t)]), float(v)) for v, t in zip(p, i)]


def kl_divergence(model, prompts, edits, batch_size: int = 4, progress: bool = False, engine: str = "auto") -> float:
    """Mean ``KL(clean || intervened)`` (nats) of next-token distributions over every position of every prompt; the
    -1e-10 float rounding can give for two equal distributions is returned as 0."""
    eng = engine_for(model, engine, with_edits=True)
    total, count = 0.0, 0
    for toks in tqdm(list(as_token_batches(model, prompts, batch_size)), desc="KL", disable=not progress):
        clean = eng.run(toks).float().log_softmax(-1)
        patched = eng.run(toks, edits).float().log_softmax(-1)
        kl = (clean.exp() * (clean - patched)).sum(-1)
        total += float(kl.sum())
        count += kl.numel()
    return max(require_finite(total / count, "the KL divergence (the model's logits)"), 0.0)


def _keep_heads(state: dict, layer: int, pattern: torch.Tensor) -> None:  # copied: the engines reuse buffers
    for h in state["heads"].get(layer, ()):
        state[f"L{layer}H{h}"] = pattern[0, h].detach().float().clone()


def _finish_heads(state: dict) -> dict:
    return {k: v.cpu() for k, v in state.items() if k != "heads"}


def _head_patterns(eng, prompt, heads: list[tuple[int, int]], edits=()) -> dict[tuple[int, int], torch.Tensor]:
    toks = single_prompt(eng.model, prompt)
    wanted = {int(l): [int(h) for k, h in heads if int(k) == int(l)] for l, _ in heads}  # layer -> its heads
    reduction = Reduction(_keep_heads, _finish_heads, {"heads": wanted}, layers=sorted(wanted))
    got = eng.patterns([toks], reduction, edits)
    return {(l, h): require_finite(got[f"L{l}H{h}"], f"L{l}H{h}'s attention pattern") for l, h in heads}


def head_patterns(
    model, prompt, heads: list[tuple[int, int]], edits=(), engine: str = "auto"
) -> dict[tuple[int, int], torch.Tensor]:
    """Attention patterns ``{(layer, head): [pos, pos]}`` on one prompt under ``edits``, from the engine that applies
    interventions, with or without them (module doc)."""
    return _head_patterns(engine_for(model, engine, with_edits=True), prompt, heads, edits)


def pattern_distance(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
    """Distances between two attention patterns ``[..., q, k]`` (rows are distributions):
    mean absolute difference per entry of the causal triangle, and mean Jensen–Shannon divergence per row
    (nats, in ``[0, ln 2]``)."""
    a, b = a.double(), b.double()
    n = a.shape[-1]
    tri = torch.ones(n, n, dtype=torch.bool).tril()
    mad = float((a - b).abs()[..., tri].mean())
    m = (a + b) / 2

    def kl(p, q):
        return torch.where(p > 0, p * (p.clamp_min(1e-30).log() - q.clamp_min(1e-30).log()), 0.0).sum(-1)

    js = float((0.5 * kl(a, m) + 0.5 * kl(b, m)).mean())
    return {"mean_abs_diff": mad, "js_divergence": js}


def prev_token_score(pattern: torch.Tensor, skip_first: int = 1, rows: torch.Tensor | None = None) -> float:
    """Mean attention from each query to the previous position, ``mean_q A[q, q-1]``: over ``q > skip_first``, or
    over the query positions ``rows`` (each >= 1) when given."""
    d = pattern.diagonal(offset=-1, dim1=-2, dim2=-1)  # d[..., i] = A[i + 1, i]
    if rows is not None:
        return float(d[..., torch.as_tensor(rows) - 1].mean())
    return float(d[..., skip_first:].mean())


def compare_head_patterns(
    model, prompts, head: tuple[int, int], edits, rows: torch.Tensor | None = None, engine: str = "auto"
) -> dict:
    """A head's attention clean vs under ``edits``, averaged over prompts: the previous-token scores
    (``prev_score_clean``, ``prev_score_intervened``), the pattern distances, the relative drop of the score, and the
    first prompt's two patterns (``clean``, ``intervened``). With ``rows`` (query positions, e.g. those an intervention
    touched) also ``prev_rows_clean``, ``prev_rows_intervened`` and ``rows_relative_drop`` on those queries alone."""
    eng = engine_for(model, engine, with_edits=True)
    per, first = [], None  # per prompt: {measure: value}
    for prompt in prompts:
        clean, new = (_head_patterns(eng, prompt, [head], e)[head] for e in ((), edits))
        m = dict(prev_score_clean=prev_token_score(clean), prev_score_intervened=prev_token_score(new))
        m.update(pattern_distance(clean, new))
        if rows is not None:
            r = torch.as_tensor(rows)
            r = r[(r >= 1) & (r < clean.shape[-1])]
            m.update(
                prev_rows_clean=prev_token_score(clean, rows=r), prev_rows_intervened=prev_token_score(new, rows=r)
            )
        per.append(m)
        first = first or (clean, new)

    def mean(*keys: str) -> dict[str, float]:
        return {k: sum(m[k] for m in per) / len(per) for k in keys}

    out = mean("prev_score_clean", "prev_score_intervened", "mean_abs_diff", "js_divergence")
    out["relative_drop"] = 1 - out["prev_score_intervened"] / max(out["prev_score_clean"], 1e-12)
    if rows is not None:
        out.update(mean("prev_rows_clean", "prev_rows_intervened"))
        out["rows_relative_drop"] = 1 - out["prev_rows_intervened"] / max(out["prev_rows_clean"], 1e-12)
    out["clean"], out["intervened"] = first
    return out
