"""Sparse retrieval tasks on uniform random tokens; the target is predicted at the last position.

Every generator takes a ``torch.Generator`` so each model of a sweep draws its own, reproducible data
whatever else is trained beside it. ``x``: ``[batch, C]`` token ids in ``0..V-1``; ``y``: ``[batch]``.
"""

from __future__ import annotations

import torch

TASKS = ("copy_current", "copy_offset", "kth_token", "most_similar")


def check_task(task: str, V: int, C: int, k: int | None) -> None:
    if task not in TASKS:
        raise ValueError(f"task {task!r} is unknown: allowed {TASKS}")
    if V < 2:
        raise ValueError(f"V={V} (vocabulary size) must be >= 2")
    if C < 2:
        raise ValueError(f"C={C} (context length) must be >= 2")
    k_means = {"copy_offset": "offset back from the last token", "kth_token": "position of the token to copy"}
    if task in k_means and (k is None or not 0 <= k <= C - 1):
        raise ValueError(f"k={k} ({k_means[task]}) must lie in 0..C-1={C - 1}")


def targets(task: str, x: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """The answer for each sequence of ``x`` ``[batch, C]``.

    * ``copy_current``: ``x[:, -1]`` — ``[A][B][C][D] → [D]``.
    * ``copy_offset``: the token ``k`` back from the last, ``x[:, C-1-k]`` (``k = 1``: previous token).
    * ``kth_token``: ``x[:, k]``, the ``k``-th token of the context (0-based).
    * ``most_similar``: among ``x[:, :-1]``, the token numerically closest to ``x[:, -1]``
      (``[1][5][10][6] → [5]``). Ties between two different values go to the smaller value; a context
      token equal to the current one is closest (distance 0).
    """
    C = x.shape[1]
    if task == "copy_current":
        return x[:, -1]
    if task == "copy_offset":
        return x[:, C - 1 - k]
    if task == "kth_token":
        return x[:, k]
    if task == "most_similar":
        ctx, cur = x[:, :-1], x[:, -1:]
        dist = (ctx - cur).abs()
        # rank by distance, then by value: key = dist * (V_big) + value; V_big exceeds any token id
        big = int(x.max()) + 1
        key = dist * big + ctx
        return ctx.gather(1, key.argmin(1, keepdim=True))[:, 0]
    raise ValueError(f"task {task!r} is unknown: allowed {TASKS}")


def make_batch(task: str, V: int, C: int, batch: int, gen: torch.Generator, k: int | None = None, n: int | None = None):
    """``(x [batch, C], y [batch])`` — or ``[n, batch, C]``/``[n, batch]`` for ``n`` steps at once."""
    check_task(task, V, C, k)
    shape = (batch, C) if n is None else (n * batch, C)
    x = torch.randint(0, V, shape, generator=gen)
    y = targets(task, x, k)
    if n is not None:
        return x.view(n, batch, C), y.view(n, batch)
    return x, y
