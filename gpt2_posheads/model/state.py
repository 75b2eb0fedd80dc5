"""The caller's model as a measurement finds it: its training flag, the hooks it carries, the dtype of its weights.

A model handed to a library function is the caller's object, in whatever state the caller left it. Three states change
what a measurement measures, and none may do so silently:

* **training mode** (``model.train()``): dropout makes two passes on the same prompts differ, so two calls give two
  rankings. Every measurement runs in eval mode, as the rules assume; the caller's flags (module by module) are handed
  back afterwards, on an exception too, and the result says the model was in training mode;
* **hooks the caller attached** (``model.add_hook(...)``, a ``with model.hooks(...)`` block): they may be the experiment
  (a head zeroed, a pattern edited), so they are measured with, never removed, and named in the result. The hook-free
  fast path would skip them, so it is not used while the model carries any
  (:func:`~gpt2_posheads.model.engine_fast.fast_forward`);
* **bfloat16 or float16 weights**: the one precision policy of :mod:`~gpt2_posheads.model.precision`
  (:func:`~gpt2_posheads.model.precision.reduced_precision`) names the dtype; the claims it is known to move are
  ``not testable``.

:func:`caller_model` is the context manager every measurement entry point runs under; :func:`measures_caller_model`
makes a public function one. Entry points nest (a claim function calls the analyses): only the outermost reads the state
and reports it — into a result's ``notes`` (a :class:`~gpt2_posheads.posts.result.ClaimResult`), or as one
:class:`ModelStateWarning` per note for a function that returns plain numbers.

**One model, one measurement at a time.** TransformerLens keeps hooks on the model object: while one measurement has its
hooks on (an intervention, a captured pattern), every forward pass of that model runs them, whoever calls it. Two
measurements of one model from two threads (or an async notebook's worker threads) would each compute through the
other's edits: previous-token masses of 1.99, rankings that differ from the same call made alone. So every public
measurement holds its model's lock for its whole duration (:func:`model_lock`, taken by :func:`measures_caller_model`):
calls on one model run one after another and each gives the numbers it gives alone; calls on different models still run
at once. The lock is re-entrant, as a claim function calls the analyses, and a call that has to wait says so once."""

from __future__ import annotations

import functools
import inspect
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .precision import reduced_precision
from .validation import NonFiniteError, checked_call, note


class ModelStateWarning(UserWarning):
    """A library function measured a model that was in training mode, carried hooks, or held half-precision
    weights (the message says which and what was done)."""


# The 4.x bridge wires some hook points to others with permanent hooks of its own (OPT's MLP:
# ``blocks.0.mlp.in.hook_in`` feeds ``blocks.0.hook_mlp_out``): the model's plumbing from loading, not a caller's.
_BRIDGE_WIRING = "transformer_lens.model_bridge"


def _callers(handle) -> bool:
    fn = getattr(handle, "user_hook", None)
    while isinstance(fn, functools.partial):
        fn = fn.func
    return not str(getattr(fn, "__module__", "") or "").startswith(_BRIDGE_WIRING)


def caller_hooks(model) -> tuple[str, ...]:
    """The names of the TransformerLens hook points on which ``model`` carries forward hooks: the caller's own
    (``model.add_hook``, permanent or not, or a ``with model.hooks(...)`` block around the call), not the bridge's own
    wiring. Empty for a model with none, and for anything that is not a TransformerLens model (a traced model, stored
    activations). A hook point listed under several names (the 4.x bridge's aliases) is named once, by its own name."""
    hook_dict = getattr(model, "hook_dict", None)
    if not isinstance(model, torch.nn.Module) or not isinstance(hook_dict, dict):
        return ()
    first: dict[int, tuple] = {}  # each hook point once, under its first name
    for name, point in hook_dict.items():
        first.setdefault(id(point), (name, point))
    hooked = [(n, p) for n, p in first.values() if any(_callers(h) for h in getattr(p, "fwd_hooks", None) or ())]
    return tuple(getattr(p, "name", None) or n for n, p in hooked)


@dataclass(frozen=True)
class ModelState:
    """What a measurement found the caller's model to be: ``training`` (any module in training mode), ``hooks``
    (:func:`caller_hooks`) and ``precision`` (:func:`~gpt2_posheads.model.precision.reduced_precision` of its
    weights: ``(cause, fix)``, or ``None`` for float32)."""

    training: bool
    hooks: tuple[str, ...]
    precision: tuple[str, str] | None

    @classmethod
    def of(cls, model) -> ModelState:
        training = any(m.training for m in model.modules()) if isinstance(model, torch.nn.Module) else False
        return cls(training, caller_hooks(model), reduced_precision(model=model))

    def notes(self) -> list[str]:
        """One sentence per state that is not the measurement's own (empty for a float32 model in eval mode with no
        hooks)."""
        out = []
        if self.training:
            out.append(
                "the model was in training mode (model.train()): measured in eval mode (no dropout), as the rules "
                "assume, and handed back in training mode"
            )
        if self.hooks:
            out.append(
                f"measured with the hooks the model carries on {', '.join(self.hooks)} (they stay on the model; "
                "model.reset_hooks(including_permanent=True) removes them)"
            )
        if self.precision is not None:
            cause, fix = self.precision
            out.append(f"the numbers were {cause}; {fix}")
        return out


_LOCKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its RLock, gone with the model
_GUARD = threading.Lock()


@contextmanager
def model_lock(model) -> Iterator[None]:
    """Hold ``model``'s re-entrant lock for the block, saying so once (``note: model <name> is being measured by
    another call; waiting``) when another thread holds it. Nothing is locked for ``None`` or an object that cannot
    be referenced weakly (stored activations)."""
    try:
        with _GUARD:
            lock = _LOCKS.setdefault(model, threading.RLock())
    except TypeError:
        yield
        return
    if not lock.acquire(blocking=False):
        name = getattr(getattr(model, "cfg", None), "model_name", "") or type(model).__name__
        note(f"model {name} is being measured by another call; waiting")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


_LOCK = threading.Lock()
_ACTIVE: dict[int, list] = {}  # id(model) -> [state, depth, the modules' training flags as the caller left them]


@contextmanager
def caller_model(model) -> Iterator[ModelState | None]:
    """Measure ``model`` as given, in eval mode: yields its :class:`ModelState` as the caller left it, or ``None``
    inside another measurement of the same model (the outermost reports) and for anything that is not a torch
    module (a traced model, stored activations). On leaving the outermost, every module's training flag is what the
    caller had, whatever happened inside. Hooks and weights are left as they are."""
    if not isinstance(model, torch.nn.Module):
        yield None
        return
    key = id(model)
    with _LOCK:
        entry = _ACTIVE.get(key)
        outermost = entry is None
        if outermost:
            flags = [(m, m.training) for m in model.modules()]
            entry = _ACTIVE[key] = [ModelState.of(model), 0, flags]
            if entry[0].training:
                model.eval()
        entry[1] += 1
    try:
        yield entry[0] if outermost else None
    finally:
        with _LOCK:
            entry[1] -= 1
            if entry[1] == 0:
                del _ACTIVE[key]
                for m, was in entry[2]:
                    m.training = was


def measures_caller_model(fn: Callable) -> Callable:
    """``fn`` (a public function taking ``model`` or ``run``) with its arguments checked
    (:func:`~gpt2_posheads.model.validation.check_arguments`), run holding the model's lock
    (:func:`model_lock`: one measurement of a model at a time) under :func:`caller_model`;
    what the model's state makes worth saying goes into the returned object's ``notes`` when it has that list (a
    claim result), else it is warned (:class:`ModelStateWarning`, one per note, naming ``fn``). A NaN the model
    computed in half precision (:class:`~gpt2_posheads.model.validation.NonFiniteError`) is said with the dtype."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        bound = checked_call(signature, args, kwargs)
        if bound is None:  # the call itself is wrong: let fn say so
            return fn(*args, **kwargs)
        model = bound.arguments.get("model")  # else its ``run``'s model
        if model is None:
            model = getattr(bound.arguments.get("run"), "model", None)
        with model_lock(model), caller_model(model) as state:
            try:
                out = fn(*args, **kwargs)
            except NonFiniteError as e:  # half-precision weights overflow: the NaNs are said with their dtype
                if state is None or state.precision is None:
                    raise
                raise NonFiniteError(f"{e}, {state.precision[0]}; {state.precision[1]}") from None
        notes = state.notes() if state is not None else []
        if notes:
            kept = getattr(out, "notes", None)
            if isinstance(kept, list):
                kept.extend(n for n in notes if n not in kept)
            else:
                for n in notes:
                    warnings.warn(f"{fn.__name__}: {n}", ModelStateWarning, stacklevel=2)
        return out

    return wrapper
