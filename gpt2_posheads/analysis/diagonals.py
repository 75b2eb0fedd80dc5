"""Average attention per diagonal, and the previous-token head ranking built on it.

For a head with attention pattern ``A[q, k]`` (query ``q`` attends to key ``k <= q``), the diagonal at
offset ``d`` is the set of entries ``A[q, q - d]``: offset 0 is attention to the current token, 1 to
the previous token, and so on. Its *mass* is the mean of those entries over every query where the key
exists (``q >= d``) and over all prompts — the quantity the GPT-2 post ranks heads by.

Prompts are streamed in batches and each pattern is reduced to per-diagonal sums on the spot (no activation cache;
the pass stops after the last layer's pattern): one reduction that every engine of :mod:`gpt2_posheads.model.engine`
runs (through nnsight only the means, or the statistics, come back), or stored diagonals.
"""

from __future__ import annotations

import math
from functools import partial

import pandas as pd
import torch

from ..model.engine import Reduction, as_token_batches, engine_for, to_token_list
from ..model.state import measures_caller_model
from ..model.validation import NonFiniteError, NothingMeasuredError, check_int_range, head_name


class _IndexCache(dict):
    """Pickles empty: :func:`diagonal_sums` is shipped by value into nnsight traces and refills it there."""

    def __reduce__(self):
        return (dict, ())


_INDEX_CACHE = _IndexCache()  # (n_pos, n_offsets, exclude_bos, device) -> the gather index and mask


def diagonal_sums(pattern: torch.Tensor, n_offsets: int, exclude_bos: bool) -> torch.Tensor:
    """``[head, n_offsets]`` float64 sums of ``A[q, q - d]`` over batch and queries of ``pattern`` ``[batch, head, q,
    k]``, key 0 left out when ``exclude_bos``.

    Two ways, the same sums: when most diagonals are wanted (``4 * n_offsets >= n_pos``) of a contiguous causal
    pattern, :func:`_skewed_sums` reads every diagonal at once through a strided view (one pass over the pattern);
    otherwise only the ``n_offsets`` diagonals are gathered (``[batch, head, q, n_offsets]``) before anything is
    summed or widened.
    """
    n = pattern.shape[-1]
    if 4 * n_offsets >= n >= 2 and pattern.is_contiguous():
        sums = _skewed_sums(pattern, n_offsets, exclude_bos)
        if sums is not None:
            return sums
    key = (n, n_offsets, exclude_bos, str(pattern.device))
    if key not in _INDEX_CACHE:  # the key index k = q - d [q, d] (clamped to 0), the float mask of k >= 0 (or 1)
        k = torch.arange(n, device=pattern.device)[:, None] - torch.arange(n_offsets, device=pattern.device)[None, :]
        if len(_INDEX_CACHE) >= 8:
            _INDEX_CACHE.pop(next(iter(_INDEX_CACHE)))
        _INDEX_CACHE[key] = (k.clamp(min=0), (k >= int(exclude_bos)).float())
    idx, mask = _INDEX_CACHE[key]
    g = torch.gather(pattern, -1, idx.expand(*pattern.shape[:2], -1, -1)).float()  # [b, h, q, d] = A[q, q - d]
    # in place: g is this function's own tensor, and one [b, h, q, d] temporary fewer is a quarter of the time
    # at 1,024 offsets (the sums are bit for bit the same)
    return g.mul_(mask).sum((0, 2), dtype=torch.float64)


# Rows of the skewed view summed in float32 before the partial sums are widened: a float64 reduction over the
# strided view ran 6x slower than a float32 one (2-core Xeon, 25 heads x 1,024^2); blocks of 32 rows keep the
# float32 rounding of a sum of non-negative entries under 32 ulp of that block's sum.
SKEW_BLOCK_ROWS = 32


def _skewed_sums(pattern: torch.Tensor, n_offsets: int, exclude_bos: bool) -> torch.Tensor | None:
    """:func:`diagonal_sums` of a contiguous pattern ``[batch, head, n, n]`` in one pass, or ``None`` when the
    pattern has mass right above its diagonal (not causal: the gather, which reads only ``k <= q``, runs instead).

    Read each head's ``n x n`` matrix, flattened, as rows of ``n + 1``: entry ``[r, c]`` is flat ``r (n + 1) + c``.
    Column 0 is the main diagonal ``A[r, r]`` (rows ``0 .. n-2``; ``A[n-1, n-1]`` is added apart). For ``c >= 2``,
    rows ``r >= n - c`` hold ``A[r + 1, r + 1 - d]`` with ``d = n + 1 - c``, the whole diagonal ``d``, and rows
    ``r < n - c`` hold ``A[r, r + c]``, above the diagonal, zero in a causal pattern; column 1 is all above it
    (``A[r, r + 1]``), which is how a pattern that is not causal shows. Key 0 of diagonal ``d`` is ``A[d, 0]``,
    taken off afterwards in float64.
    """
    b, h, n, _ = pattern.shape
    flat = pattern.reshape(b * h, n * n)
    skew = flat.as_strided((b * h, n - 1, n + 1), (n * n, n + 1, 1), flat.storage_offset())
    whole = (n - 1) // SKEW_BLOCK_ROWS * SKEW_BLOCK_ROWS
    cols = skew[:, :whole].unflatten(1, (-1, SKEW_BLOCK_ROWS)).sum(2).sum(1, dtype=torch.float64)  # [b h, n + 1]
    cols += skew[:, whole:].sum(1, dtype=torch.float64)
    if bool(cols[:, 1].any()):  # nonzero (or NaN) right above the diagonal
        return None
    main = cols[:, :1] + flat[:, -1:].double()  # d = 0
    sums = torch.cat([main, cols[:, n + 2 - n_offsets :].flip(-1)], dim=1)  # d = 0, 1, ..., n_offsets - 1
    if exclude_bos:
        sums -= pattern[:, :, :n_offsets, 0].reshape(b * h, n_offsets).double()  # A[d, 0] for each d
    return sums.view(b, h, n_offsets).sum(0)


def diagonal_counts(n_pos: int, n_offsets: int, exclude_bos: bool) -> torch.Tensor:
    """Entries per diagonal ``d`` of one ``n_pos``-token prompt: ``n_pos - d`` (minus one without key 0)."""
    return (n_pos - torch.arange(n_offsets, dtype=torch.float64) - int(exclude_bos)).clamp(min=0)


@measures_caller_model
def diagonal_attention(
    model,
    prompts,
    max_offset: int | None = None,
    exclude_bos: bool = True,
    batch_size: int = 8,
    progress: bool = True,
    edits=(),
    bf16: bool = False,
    engine: str = "auto",
) -> torch.Tensor:
    """Mean attention on each diagonal for every head: ``[n_layers, n_heads, max_offset + 1]``.

    Entry ``[l, h, d]`` is the mean of ``A_{l,h}[q, q - d]`` over all queries ``q >= d`` of all prompts (pooled: long
    prompts weigh by their number of entries); offsets with no entry are NaN. ``exclude_bos`` (default) leaves key 0
    out: GPT-2 heads park spare attention on the first token, which would make every such head's longest diagonals
    look large. ``bf16`` (:func:`~gpt2_posheads.model.engine.engine_for`): ~3x faster on CPUs with AMX, within ~1e-3
    of float32 on diffuse heads but up to 0.5 off on sharp ones; the engines agree to ~1e-6. ``model`` may be stored
    activations (``prompts`` ``None``): the stored diagonals.
    """
    args = (max_offset, exclude_bos, batch_size, edits, engine, bf16, progress)
    return traced_stats(model, prompts, *args, ranking=False)["diagonals"]


def prev_token_stats(mass: torch.Tensor) -> dict[str, torch.Tensor]:
    """The previous-token statistics of per-diagonal masses ``[..., n_offsets]`` (NaN = no entries).

    The one definition every part of the toolkit uses. With ``m_d`` the mass of offset ``d``:

    * ``top_offset = argmax_d m_d``; a head is a *previous-token head* when ``top_offset == 1``;
    * ``ratio = (second-greatest m_d) / (greatest m_d)``: the post's "what fraction of the attention mass
      of the greatest diagonal the second-greatest diagonal has" (L4H11: 0.01);
    * ``prev_mass = m_1``.

    The window is every offset the masses hold (the post averages "each diagonal"). A mass that was not measured
    (offset 1 of a two-token prompt) is NaN, and so is the ratio then, and where the greatest mass is 0.
    """
    d = torch.nan_to_num(mass.double(), nan=-1.0)  # -1 sorts an empty diagonal last; it never leaves this function
    top2 = d.topk(2, dim=-1)
    top, second, prev = (torch.where(x < 0, float("nan"), x) for x in (*top2.values.unbind(-1), d[..., 1]))
    ratio = torch.where(top > 0, second / top.clamp_min(1e-300), torch.full_like(top, float("nan")))
    return dict(top_offset=top2.indices[..., 0], top_mass=top, second_mass=second, ratio=ratio, prev_mass=prev)


def rank_from_diagonals(diag: torch.Tensor) -> pd.DataFrame:
    """:func:`rank_from_stats` of per-diagonal masses ``[n_layers, n_heads, n_offsets]``."""
    return rank_from_stats(prev_token_stats(diag))


def head_columns(n_layers: int, n_heads: int) -> dict[str, list]:
    """``layer``, ``head`` and ``name`` of every head, layer by layer: the first columns of a per-head table."""
    slots = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    return dict(layer=[l for l, _ in slots], head=[h for _, h in slots], name=[head_name(*s) for s in slots])


def rank_from_stats(st: dict[str, torch.Tensor]) -> pd.DataFrame:
    """One row per head from :func:`prev_token_stats` (``[n_layers, n_heads]`` each): its columns, ``is_prev_token``
    (top offset is 1) and ``not_measured`` (why NaN statistics are NaN: :data:`NO_DIAGONAL`, :data:`NO_PREVIOUS`,
    :data:`ONLY_BOS`; ``""`` otherwise). Previous-token heads first, by ratio ascending (the post's L4H11: 0.01), then
    the others by ``prev_mass`` descending, heads with nothing measured last."""
    stats = {k: st[k].flatten().tolist() for k in ("top_offset", "top_mass", "second_mass", "ratio", "prev_mass")}
    df = pd.DataFrame({**head_columns(*st["ratio"].shape), **stats})
    df["is_prev_token"] = (df["top_offset"] == 1) & (df["top_mass"] > 0)
    df["not_measured"] = [  # NaN != NaN
        NO_DIAGONAL if t != t else NO_PREVIOUS if p != p else ONLY_BOS if t <= 0 else ""
        for t, p in zip(df.top_mass, df.prev_mass)
    ]
    prev = df[df.is_prev_token].sort_values("ratio", kind="stable")
    rest = df[~df.is_prev_token].sort_values("prev_mass", ascending=False, kind="stable")
    out = pd.concat([prev, rest], ignore_index=True)
    out.insert(0, "rank", range(1, len(out) + 1))
    return out


@measures_caller_model
def prev_token_ranking(
    model,
    prompts=None,
    max_offset: int | None = None,
    exclude_bos: bool = True,
    batch_size: int = 8,
    progress: bool = True,
    bf16: bool = False,
    engine: str = "auto",
) -> pd.DataFrame:
    """Rank all heads by how previous-token-like they are (:func:`rank_from_stats`); ``df.is_prev_token.sum()`` heads
    have the previous diagonal greatest (69 of 144 for GPT-2 small in the post). ``model`` may be stored activations."""
    return traced_ranking(model, prompts, max_offset, exclude_bos, batch_size, (), engine, bf16, progress)[0]


# --- the one reduction: the same sums on every engine, reduced where the model runs ---------------------------------
PROFILE_OFFSETS = 16  # the diagonals a ranking brings back besides the statistics (the figure shows 16)


def _diagonal_step(state: dict, layer: int, pattern: torch.Tensor) -> None:  # runs where the model runs
    width = min(state["n_off"], pattern.shape[-1])
    if "sums" not in state:
        state["sums"] = torch.zeros(state["shape"], dtype=torch.float64, device=pattern.device)
    state["sums"][layer, :, :width] += diagonal_sums(pattern, width, state["exclude_bos"])


def _ranking_of(mass: torch.Tensor) -> dict:
    """:func:`prev_token_stats` of the float32 means (the same whichever engine reduced them) and ``profile``, a copy
    of the first :data:`PROFILE_OFFSETS` (a view would carry every mean)."""
    return {**prev_token_stats(mass), "profile": mass[..., :PROFILE_OFFSETS].clone()}


def _finish_diagonals(state: dict) -> dict:  # every diagonal's mean [n_layers, n_heads, n_offsets], NaN: no entry
    sums = state["sums"]
    return {"diagonals": (sums.cpu() / state["counts"]).float(), "nonfinite": (~torch.isfinite(sums)).sum().cpu()}


def _finish_ranking(state: dict) -> dict:  # all a trace brings back
    out = _finish_diagonals(state)
    return {**_ranking_of(out.pop("diagonals")), **out}


def _stored(store, prompts, max_offset, exclude_bos, ranking: bool) -> dict:
    if prompts is not None or max_offset is not None or not exclude_bos:
        raise ValueError(
            "stored activations fix the prompts, offsets and BOS handling: call "
            "prev_token_ranking(store) or diagonal_attention(store) without prompts, max_offset or exclude_bos"
        )
    return _ranking_of(store.diagonals) if ranking else {"diagonals": store.diagonals}


def traced_stats(
    model,
    prompts,
    max_offset: int | None = None,
    exclude_bos: bool = True,
    batch_size: int = 8,
    edits=(),
    engine: str = "auto",
    bf16: bool = False,
    progress: bool = False,
    ranking: bool = True,
) -> dict[str, torch.Tensor]:
    """:func:`prev_token_stats` of every diagonal's mean (``[n_layers, n_heads]`` each) and ``profile``, the first
    :data:`PROFILE_OFFSETS` means, from one pass (module doc); ``ranking=False``: ``{"diagonals": every mean}``."""
    eng = engine_for(model, engine, bf16=bf16)
    state: dict = dict(exclude_bos=bool(exclude_bos))

    def batches() -> list[torch.Tensor]:  # only an engine that runs a model makes them
        if prompts is None:
            raise ValueError("prompts is None: the model needs prompts to run on (only stored activations fix theirs)")
        seqs = to_token_list(model, prompts)
        mo = max(max(len(s) for s in seqs) - 1, 1) if max_offset is None else max_offset
        n_off = check_int_range("max_offset", mo, 1, max(model.cfg.n_ctx - 1, 1)) + 1
        out = list(as_token_batches(model, seqs, batch_size))
        counts = torch.zeros(n_off, dtype=torch.float64)
        for toks in out:
            width = min(n_off, toks.shape[1])
            counts[:width] += toks.shape[0] * diagonal_counts(toks.shape[1], width, exclude_bos)
        state.update(n_off=n_off, shape=(model.cfg.n_layers, model.cfg.n_heads, n_off), counts=counts)
        return out

    reader = partial(_stored, prompts=prompts, max_offset=max_offset, exclude_bos=exclude_bos, ranking=ranking)
    finish = _finish_ranking if ranking else _finish_diagonals
    reduction = Reduction(_diagonal_step, finish, state, stored=reader)
    res = eng.patterns(batches, reduction, edits, "diagonal attention" if progress else None)
    bad = int(res.pop("nonfinite", 0))
    if bad:
        raise NonFiniteError(f"the attention patterns is not finite ({bad:,} NaN or infinite diagonal sums)")
    return res


def traced_ranking(model, prompts, *args, **kwargs) -> tuple[pd.DataFrame, torch.Tensor]:
    """The ranking (:func:`prev_token_ranking`) and the profile of :func:`traced_stats` (which takes the arguments)."""
    st = traced_stats(model, prompts, *args, **kwargs)
    return rank_from_stats(st), st.pop("profile")


# A *clear* previous-token head: greatest diagonal offset 1 and ratio <= 0.6. The post's heads under test go from
# 0.01 (L4H11) to 0.52 (L3H2, the last of its six early heads); 0.6 takes all of them with a margin and leaves out
# near-ties (ratio near 1), heads that attend to several diagonals alike and whose "previous-token" label is noise.
CLEAR_PREV_RATIO = 0.6


def is_clear_prev(top_offset: int, ratio: float) -> bool:
    return int(top_offset) == 1 and float(ratio) <= CLEAR_PREV_RATIO


def choose_aggregator(ranking: pd.DataFrame) -> tuple[int, int]:
    """The aggregator (the post's L4H11 on another model): the sharpest previous-token head, whatever its layer; the
    top-ranked head when the model has none (claims about it then fail their "is a previous-token head"
    precondition). :class:`~gpt2_posheads.model.validation.NothingMeasuredError` (a ``ValueError``: scripts make every
    claim ``not testable`` with its message) when no head has attention off BOS on the previous token: any head
    returned would be an arbitrary one."""
    _check_ranking(ranking)
    prev = ranking[ranking.is_prev_token]
    if not len(prev):
        prev = ranking[ranking.prev_mass > 0]  # the ranking's order: prev_mass descending (NaN is never > 0)
    if not len(prev):
        reasons = [r for r in dict.fromkeys(ranking.get("not_measured", [])) if r] or [ONLY_BOS]
        raise NothingMeasuredError(
            f"ranking: no head has attention off BOS on the previous token ({'; '.join(reasons)}); prompts of three "
            "or more tokens where heads attend past BOS; no aggregator can be chosen, so nothing resting on one is "
            "testable"
        )
    row = prev.iloc[0]
    return int(row["layer"]), int(row["head"])


def sharpest_prev_ratio(ranking: pd.DataFrame) -> float:
    """The sharpest previous-token head's ratio (the post's L4H11: 0.01), or ``math.inf`` where none tops at offset
    1: a measured fact infinitely far from sharp, which a rule judges (a NaN would read as "nothing measured")."""
    _check_ranking(ranking)
    prev = ranking[ranking.is_prev_token]
    return float(prev.ratio.iloc[0]) if len(prev) else math.inf


# why a head's statistics are NaN (the ranking's ``not_measured``)
NO_DIAGONAL = "no diagonal has an entry: the prompts are too short"
NO_PREVIOUS = "no previous diagonal at this prompt length (with key 0 left out it needs three tokens)"
ONLY_BOS = "no attention off BOS (every diagonal without key 0 is 0)"


def _check_ranking(ranking) -> None:
    if not isinstance(ranking, pd.DataFrame):
        raise TypeError(f"ranking must be a DataFrame of prev_token_ranking, got {type(ranking).__name__}")
    missing = {"layer", "head", "is_prev_token", "prev_mass"} - set(ranking.columns)
    if missing:
        raise ValueError(f"ranking lacks the columns {', '.join(sorted(missing))}: pass prev_token_ranking' DataFrame")
    if ranking.empty:
        raise ValueError("ranking is empty: no head to choose from (prev_token_ranking gives one row per head)")


def early_prev_heads(ranking: pd.DataFrame, layer: int) -> pd.DataFrame:
    """The clear previous-token heads (ratio <= :data:`CLEAR_PREV_RATIO`) in layers below ``layer``, sharpest first:
    the post's early heads below L4H11 (ratios 0.33-0.52)."""
    prev = ranking[ranking.is_prev_token & (ranking.ratio <= CLEAR_PREV_RATIO)]
    return prev[prev.layer < layer]


def aggregator_and_early(ranking: pd.DataFrame) -> list[tuple[int, int]]:
    """``[early, aggregator]``: the aggregator preceded by the sharpest clear previous-token head in a lower layer
    (L2H2 below L4H11); just ``[aggregator]`` when there is none."""
    layer, head = choose_aggregator(ranking)
    below = early_prev_heads(ranking, layer)
    early = [(int(below.iloc[0]["layer"]), int(below.iloc[0]["head"]))] if len(below) else []
    return early + [(layer, head)]


def count_prev_heads(ranking: pd.DataFrame) -> int:
    return int(ranking["is_prev_token"].sum())
