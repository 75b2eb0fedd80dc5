"""Training toy models, many at once: :func:`train_sweep` stacks configurations that share a shape along the model
axis of :mod:`.model` and trains each group as one batched computation with an element-wise AdamW whose learning rate
is per model. Each model draws its initialisation and data from its own generators (seeded from its config), so a
model trained in a sweep follows the trajectory it would follow alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .analysis import effective_rank, perplexity
from .model import ToyShape, forward, init_params, per_model_loss

# Bump when a change to the model, task or training code changes what a run computes: cached runs
# under results/<script>/runs/ with another version are then trained again instead of reused. Changes of
# float rounding alone do not bump it (the thread count changes rounding too): the last-query path of
# model.forward left the eval losses of six runs of 800-2,000 steps within 3.6e-6 of the full path's.
CODE_VERSION = 5


# The tasks: sparse retrieval on uniform random tokens, the target predicted at the last position. Every generator
# takes a torch.Generator, so each model of a sweep draws its own reproducible data whatever trains beside it.
# x: [batch, C] token ids in 0..V-1; y: [batch].
TASKS = ("copy_current", "copy_offset", "kth_token", "most_similar")
SNAPSHOT = ("W_E", "W_pos", "0.W_Q", "0.W_K", "0.W_V")  # the parameters a snapshot records
OFFSETS = (0, 1_000_003, 2_000_003)  # seed offsets of a model's generators: initialisation, data, evaluation


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


@dataclass(frozen=True)
class ToyConfig(ToyShape):
    """One toy run: the model's shape (the fields of :class:`~.model.ToyShape`, inherited, so the two cannot drift;
    a config is the shape :func:`~.model.forward` reads), its task and its training."""

    V: int = 16
    C: int = 4
    n_embd: int = 2
    task: str = "copy_current"
    k: int | None = None
    init_std: float = 0.02
    lr: float = 0.01
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    steps: int = 5000
    batch_size: int = 128
    seed: int = 0
    log_every: int = 50
    snapshot_every: int = 0  # 0: no snapshots of embeddings / Q,K,V
    eval_size: int = 2048

    def validate(self) -> ToyConfig:
        super().validate()
        check_task(self.task, self.V, self.C, self.k)
        for name in ("steps", "batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        for name in ("lr", "init_std"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)} must be > 0")
        return self

    def group_key(self) -> tuple:
        """Configs with the same key train together (everything but seed, k, lr, weight decay, task, init std)."""
        per_model = {"seed", "k", "lr", "weight_decay", "task", "init_std"}
        return tuple((f.name, getattr(self, f.name)) for f in fields(self) if f.name not in per_model)

    def id(self) -> str:
        """The run's key: its settings and :data:`CODE_VERSION`, so a cached run trained by other code or
        settings is never reused silently."""
        key = {**asdict(self), "code_version": CODE_VERSION}
        return hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def _adamw_step(params, grads, state, t: int, lr: torch.Tensor, wd: torch.Tensor, betas, eps: float = 1e-8):
    """AdamW applied element-wise with per-model ``lr``/``wd`` ``[M]`` (decoupled weight decay)::

        m = b1 m + (1 - b1) g        v = b2 v + (1 - b2) g²
        p = p (1 - lr wd) - (lr / (1 - b1^t)) m / (sqrt(v / (1 - b2^t)) + eps)

    Each line runs once over every parameter (``torch._foreach_*``): the same element-wise kernels as one
    parameter at a time, so the same bits, with a tenth of the calls (small groups are call-bound).
    """
    b1, b2 = betas
    ps, gs = list(params.values()), [grads[n] for n in params]
    if not state:
        state["m"] = [torch.zeros_like(p) for p in ps]
        state["v"] = [torch.zeros_like(p) for p in ps]
        state["per_model"] = [(-1,) + (1,) * (p.ndim - 1) for p in ps]  # [M] broadcast over each parameter
        state["decay"] = [(1 - lr * wd).view(view) for view in state["per_model"]]
    ms, vs = state["m"], state["v"]
    torch._foreach_mul_(ms, b1)
    torch._foreach_add_(ms, gs, alpha=1 - b1)
    torch._foreach_mul_(vs, b2)
    torch._foreach_addcmul_(vs, gs, gs, value=1 - b2)
    step = lr / (1 - b1**t)
    denom = torch._foreach_div(vs, 1 - b2**t)
    torch._foreach_sqrt_(denom)
    torch._foreach_add_(denom, eps)
    torch._foreach_mul_(ps, state["decay"])
    updates = torch._foreach_mul(ms, [step.view(view) for view in state["per_model"]])
    torch._foreach_addcdiv_(ps, updates, denom, value=-1.0)


def train_group(
    configs: list[ToyConfig],
    progress: bool = True,
    chunk: int = 500,
    device: str | torch.device = "cpu",
    on_chunk: Callable[[int], None] | None = None,
    label: str = "",
) -> list[dict]:
    """Train configs that share a shape as one batched computation; one result dict per config. ``on_chunk`` is told
    the model-steps done since its last call, about once a second and at the end; with ``progress``, a line every
    :data:`HEARTBEAT_S` seconds says which step the group (``label``) has reached."""
    for c in configs:
        c.validate()
    if len({c.group_key() for c in configs}) != 1:
        raise ValueError("train_group needs configs that share every shape setting (use train_sweep)")
    c0, M = configs[0], len(configs)
    # each model's own generators: its initialisation, training batches and evaluation set
    init_gens, data_gens, eval_gens = ([torch.Generator().manual_seed(c.seed + o) for c in configs] for o in OFFSETS)
    params = {
        n: p.to(device).requires_grad_(True)
        for n, p in init_params(c0, init_gens, [c.init_std for c in configs]).items()
    }
    lr = torch.tensor([c.lr for c in configs], device=device)
    wd = torch.tensor([c.weight_decay for c in configs], device=device)
    evals = [make_batch(c.task, c.V, c.C, c.eval_size, g, c.k) for c, g in zip(configs, eval_gens)]
    ex, ey = (torch.stack(t).to(device) for t in zip(*evals))  # [M, eval_size, C], [M, eval_size]
    state: dict = {}
    logs = {"step": [], "loss": [], "eval_loss": []}
    snaps: list[list[dict]] = [[] for _ in configs]
    eff = {"step": [], **{n: [[] for _ in configs] for n in ("W_E", "W_Q", "W_K")}}  # eff["step"]: snapshot steps
    running, n_running, told = torch.zeros(M, device=device), 0, 0  # told: steps already reported to on_chunk
    started = last_told = last_line = time.perf_counter()
    for start in range(0, c0.steps, chunk):
        n = min(chunk, c0.steps - start)
        batches = [make_batch(c.task, c.V, c.C, c.batch_size, g, c.k, n=n) for c, g in zip(configs, data_gens)]
        xs, ys = (torch.stack(t, 1).to(device) for t in zip(*batches))  # [n, M, B, C], [n, M, B]
        for j in range(n):
            t = start + j + 1
            loss = per_model_loss(forward(params, xs[j], c0), ys[j])
            grads = torch.autograd.grad(loss.sum(), list(params.values()))
            with torch.no_grad():
                _adamw_step(params, dict(zip(params, grads)), state, t, lr, wd, c0.betas)
                running += loss.detach()
                n_running += 1
                if t % c0.log_every == 0 or t == c0.steps:
                    el = per_model_loss(forward(params, ex, c0), ey)
                    logs["step"].append(t)
                    logs["loss"].append((running / n_running).tolist())
                    logs["eval_loss"].append(el.tolist())
                    running, n_running = running.zero_(), 0
                if c0.snapshot_every and (t % c0.snapshot_every == 0 or t == 1):
                    eff["step"].append(t)
                    for i in range(M):
                        snaps[i].append({n: params[n][i].tolist() for n in SNAPSHOT if n in params})
                        for n, w in (("W_E", "W_E"), ("W_Q", "0.W_Q"), ("W_K", "0.W_K")):  # heads' matrices stacked
                            eff[n][i].append(effective_rank(params[w][i].flatten(0, -2)))
            now = time.perf_counter()
            if on_chunk is not None and (now - last_told >= 1.0 or t == c0.steps):
                on_chunk((t - told) * M)
                told, last_told = t, now
            if progress and now - last_line >= HEARTBEAT_S and t < c0.steps:
                print(f"toy sweep: {label}step {t:,} of {c0.steps:,} ({now - started:.0f} s)", flush=True)
                last_line = now
    with torch.no_grad():
        return [
            {
                "config": asdict(c),
                "id": c.id(),
                "steps": logs["step"],
                "loss": [row[i] for row in logs["loss"]],
                "eval_loss": [row[i] for row in logs["eval_loss"]],
                "final_loss": logs["eval_loss"][-1][i],
                "final_perplexity": perplexity(logs["eval_loss"][-1][i]),
                "params": {n: p[i].detach().cpu().tolist() for n, p in params.items()},
                "snapshot_steps": eff["step"],
                "snapshots": snaps[i],
                "effective_rank": {"step": eff["step"], **{n: eff[n][i] for n in ("W_E", "W_Q", "W_K")}},
            }
            for i, c in enumerate(configs)
        ]


# A layer's fixed cost (kernel calls, softmax, copies) in units of the per-sequence work below, fitted to
# per-step times on one AVX2 core: 1 layer C=64 / C=4 (n_embd 8) 4.2x, 3 / 1 layers at C=10 (n_embd 10) 4.3x.
LAYER_OVERHEAD = 128


def group_cost(group: list[ToyConfig]) -> float:
    """Rough work of training ``group``, used only to schedule: which group is too large to share out, and the
    longest first so workers finish together. Per sequence and layer: the projections (C x n_embd), the full
    C x C pattern in every layer but the last (which attends from the last query alone) and a fixed cost."""
    c = group[0]
    work = c.n_layers * (c.C * c.n_embd + LAYER_OVERHEAD) + (c.n_layers - 1) * c.C * c.C + c.C
    return float(c.steps * len(group) * c.batch_size * work)


_DONE = None  # in a worker: the shared count of model-steps done by every worker (the parent reports it)


def _init_worker(threads: int, done=None) -> None:
    import signal

    global _DONE
    _DONE = done
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and terminates the pool
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # tqdm's default lock is a multiprocessing semaphore that a terminated worker never unlinks ("leaked
    # semaphore" warnings at exit); workers draw no bars, so a thread lock does
    tqdm.set_lock(threading.RLock())
    torch.set_num_threads(threads)


def _count(n: int) -> None:
    if _DONE is not None:
        with _DONE.get_lock():
            _DONE.value += n


def _train_quietly(group: list[ToyConfig]) -> list[dict]:
    return train_group(group, progress=False, on_chunk=_count)


HEARTBEAT_S = 10  # seconds between progress lines while groups train in other processes


def _trained_groups(groups: list[list[ToyConfig]], workers: int, progress: bool) -> Iterator[list[dict]]:
    """Each group's results as it finishes: in this process, or in ``workers`` processes of
    ``torch.get_num_threads() // workers`` threads each (at least one).

    Groups are independent, and batched models this small use a second thread poorly: on 2 AVX2 cores, two
    1-thread processes trained two 30-model groups (2 layers, C 10) in 19.4 s, one 2-thread process one
    group in 13.0 s (1.34x the throughput; 64 models at batch 256: 1.24x). A group larger than an even
    share of the work (:func:`group_cost`) cannot be balanced across processes, so it trains here first,
    with every thread (003's C=64 group is 89% of its run). Where a group trains does not change its result.
    """
    total = sum(group_cost(g) for g in groups)
    big = [g for g in groups if workers > 1 and group_cost(g) > total / workers]
    rest = [g for g in groups if not any(g is b for b in big)]
    if workers <= 1 or len(rest) <= 1:
        big, rest = groups, []
    for gi, group in enumerate(big, start=1):
        label = f"group {gi} of {len(groups)} ({len(group)} models)"
        if progress:
            print(f"toy sweep: {label}, {group[0].steps:,} steps, in this process", flush=True)
        yield train_group(group, progress=progress, label=f"{label}: ")
    if not rest:
        return
    import multiprocessing

    workers = min(workers, len(rest))
    threads = max(1, torch.get_num_threads() // workers)
    order = sorted(rest, key=group_cost, reverse=True)  # longest first: the workers finish together
    if progress:
        print(f"toy sweep: {len(rest)} groups in {workers} processes of {threads} thread(s)", flush=True)
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    done = ctx.Value("q", 0)
    total_steps = sum(g[0].steps * len(g) for g in rest)  # model-steps
    pool = ctx.Pool(workers, initializer=_init_worker, initargs=(threads, done))
    try:
        finished = iter(pool.imap_unordered(_train_quietly, order))
        gi = len(big)
        while True:
            try:
                results = finished.next(timeout=HEARTBEAT_S)
            except StopIteration:
                break
            except multiprocessing.TimeoutError:  # still training: say how far, so a long sweep is never silent
                if progress:
                    print(
                        f"toy sweep: {gi - len(big)} of {len(rest)} groups done, {done.value / total_steps:.0%} of "
                        f"the training steps ({time.perf_counter() - started:.0f} s)",
                        flush=True,
                    )
                continue
            gi += 1
            if progress:
                print(
                    f"toy sweep: {gi} of {len(groups)} groups done ({len(results)} models; "
                    f"{time.perf_counter() - started:.0f} s)",
                    flush=True,
                )
            yield results
        pool.close()
    finally:
        pool.terminate()  # on an interrupt or error: stop the groups still training (finished ones are saved)
        pool.join()


def train_sweep(
    configs: Iterable[ToyConfig],
    out_dir: str | Path | None = None,
    progress: bool = True,
    max_models_per_group: int = 64,
    on_group_done: Callable[[list[dict]], None] | None = None,
    workers: int = 1,
) -> list[dict]:
    """Train every config (grouped and batched by shape); results in the order of ``configs``. With ``out_dir`` each
    result is saved as ``<out_dir>/<config id>.json`` when its group finishes, and configs whose file already exists
    are loaded instead of trained (an interrupted sweep resumes). ``workers``: as :func:`_trained_groups`."""
    configs = [c.validate() for c in configs]
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    out = Path(out_dir) if out_dir else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    done: dict[str, dict] = {}
    todo: dict[tuple, list[ToyConfig]] = {}
    for c in configs:
        f = out / f"{c.id()}.json" if out else None
        if f is not None and f.exists():
            done[c.id()] = json.loads(f.read_text())
        elif c not in todo.setdefault(c.group_key(), []):
            todo[c.group_key()].append(c)
    groups = [g[i : i + max_models_per_group] for g in todo.values() for i in range(0, len(g), max_models_per_group)]
    n_unique = len({c.id() for c in configs})
    if out and progress:
        print(
            f"toy sweep: {len(done)} of {n_unique} runs already finished in {out} (reused; --fresh retrains), "
            f"{n_unique - len(done)} to train in {len(groups)} batched group(s)",
            flush=True,
        )
    # closing(): an error in on_group_done (or Ctrl-C) stops the worker processes at once, not when the
    # traceback that holds this frame is dropped
    with contextlib.closing(_trained_groups(groups, workers, progress)) as trained:
        for results in trained:
            for r in results:
                done[r["id"]] = r
                if out:
                    tmp = out / f"{r['id']}.json.tmp"
                    tmp.write_text(json.dumps(r))
                    tmp.replace(out / f"{r['id']}.json")  # atomic: an interrupt never leaves half a file
            if on_group_done:
                on_group_done(results)
    return [done[c.id()] for c in configs]
