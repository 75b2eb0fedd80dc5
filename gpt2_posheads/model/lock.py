"""One model, one measurement at a time.

TransformerLens keeps hooks on the model object: while one measurement has its hooks on (an intervention, a captured
pattern), every forward pass of that model runs them, whoever calls it. Two measurements of one model from two
threads (or an async notebook's worker threads) would each compute through the other's edits: previous-token masses
of 1.99, rankings that differ from the same call made alone. So every public measurement holds its model's lock for
its whole duration (:func:`model_lock`, taken by :func:`~gpt2_posheads.model.state.measures_caller_model`): calls
on one model run one after another and each gives the numbers it gives alone; calls on different models still run
at once. The lock is re-entrant, as a claim function calls the analyses, and a call that has to wait says so once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

from .validation import note

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
