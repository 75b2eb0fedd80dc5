"""The caller's model as a measurement finds it: its training flag, the hooks it carries, the dtype of its weights.

A model handed to a library function is the caller's object, in whatever state the caller left it. Three states change
what a measurement measures, and none may do so silently:

* **training mode**: dropout makes two passes on the same prompts differ. Every measurement runs in eval mode, as the
  rules assume; the caller's flags (module by module) are handed back afterwards, on an exception too, and said;
* **hooks the caller attached**: they may be the experiment, so they are measured with, never removed, and named in
  the result; the hook-free fast path, which would skip them, is not used while the model carries any;
* **bfloat16 or float16 weights**: named by the precision policy (below).

Entry points nest (a claim function calls the analyses): only the outermost (:func:`measures_caller_model`) reads the
state and reports it, into a result's ``notes`` or as :class:`ModelStateWarning` s.

**One model, one measurement at a time.** TransformerLens keeps hooks on the model object, so while one measurement
has hooks on, every pass of that model runs them, whoever calls it: two measurements of one model from two threads
would compute through each other's edits (previous-token masses of 1.99). So every public measurement holds its model's
re-entrant lock for its whole duration (:func:`model_lock`); different models run at once.

**Precision.** On a CPU without bfloat16 matrix units (no AVX512-BF16, no AMX) PyTorch emulates bfloat16 matmuls (on a
2-core AVX2-only AMD EPYC ``bf16=True`` was at least 85x *slower* than float32), so a bfloat16 request is honoured only
where the hardware has native support (:func:`resolve_bf16`). The rules judge numbers computed in float32. A
measurement whose matmuls ran in a half-precision type (``--bf16``, or the caller's bfloat16/float16 weights) is
:func:`reduced_precision`: the claims that type is known to move (the ranking's diagonal masses: bfloat16 moved sharp
heads' masses by up to 0.5 on the compiled models) are ``not testable``; every other claim is judged and carries a
note naming the type. One function says both, so ``--bf16`` and a caller's bfloat16 model read the same."""

from __future__ import annotations

import functools
import inspect
import os
import platform
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import torch

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
    """The hook points on which ``model`` carries the caller's forward hooks (``model.add_hook``, permanent or not, or
    a ``with model.hooks(...)`` block), not the bridge's own wiring, each once by its own name (the 4.x bridge lists
    aliases); empty for anything that is not a TransformerLens model (a traced model, stored activations)."""
    if not isinstance(model, torch.nn.Module) or not callable(getattr(model, "list_hooks", None)):
        return ()
    named: dict[int, str] = {}
    for name, handles in model.list_hooks(dir="fwd").items():
        if any(_callers(h) for h in handles):
            point = model.hook_dict[name]
            named.setdefault(id(point), getattr(point, "name", None) or name)
    return tuple(named.values())


@dataclass(frozen=True)
class ModelState:
    """What a measurement found the caller's model to be: ``training`` (any module in training mode), ``hooks``
    (:func:`caller_hooks`), ``precision`` (:func:`reduced_precision` of its weights, ``None`` for float32)."""

    training: bool
    hooks: tuple[str, ...]
    precision: tuple[str, str] | None

    @classmethod
    def of(cls, model) -> ModelState:
        training = any(m.training for m in model.modules()) if isinstance(model, torch.nn.Module) else False
        return cls(training, caller_hooks(model), reduced_precision(model=model))

    def notes(self) -> list[str]:
        """One sentence per state that is not the measurement's own."""
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
    """Hold ``model``'s re-entrant lock for the block, saying once when another thread holds it; nothing is locked
    for ``None`` or an object that cannot be referenced weakly (stored activations)."""
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


_ACTIVE: dict[int, list] = {}  # id(model) -> [state, depth, the modules' training flags as the caller left them]


@contextmanager
def caller_model(model) -> Iterator[ModelState | None]:
    """Measure ``model`` in eval mode: yields its :class:`ModelState` as the caller left it (``None`` inside another
    measurement of it, and for anything that is not a torch module); leaving the outermost hands every module's
    training flag back, whatever happened. Hooks and weights are left as they are. Run holding :func:`model_lock`."""
    if not isinstance(model, torch.nn.Module):
        yield None
        return
    key = id(model)
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
        entry[1] -= 1
        if entry[1] == 0:
            del _ACTIVE[key]
            for m, was in entry[2]:
                m.training = was


def measures_caller_model(fn: Callable) -> Callable:
    """``fn`` (a public function taking ``model`` or ``run``) with its arguments checked
    (:func:`~gpt2_posheads.model.validation.check_arguments`), run holding the model's lock under :func:`caller_model`;
    the state's notes go into the result's ``notes`` list (a claim result), else are warned (:class:`ModelStateWarning`
    naming ``fn``). A NaN computed in half precision (:class:`~.validation.NonFiniteError`) is said with the dtype."""
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


FORCE_ENV = "GPT2_POSHEADS_FORCE_BF16"


@lru_cache(maxsize=2)
def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line's value in ``/proc/cpuinfo`` (``None`` where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(field)), None)
    except OSError:
        return None


def cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_has_native_bf16() -> bool:
    """True when bfloat16 matmuls run on matrix/vector units (AVX512-BF16 or AMX), not emulated."""
    flags = set((_cpuinfo("flags") or "").split())
    if flags & {"avx512_bf16", "amx_bf16"}:
        return True
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and bool(flags & {"avx512_bf16", "amx_tile"})
    except (AttributeError, RuntimeError):
        return False


def bf16_native(device: str | torch.device = "cpu") -> bool:
    if torch.device(device).type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return cpu_has_native_bf16()


_WARNED: set[str] = set()


def resolve_bf16(requested: bool, device: str | torch.device = "cpu", force: bool | None = None) -> bool:
    """Whether to run in bfloat16: ``requested`` and (native support here, or forced). Falling back says so once."""
    if not requested:
        return False
    if force is None:
        force = os.environ.get(FORCE_ENV, "0") not in ("0", "", "false", "False")
    if force or bf16_native(device):
        return True
    msg = (
        f"bf16: {cpu_name()} has no native bfloat16 matrix units (no AVX512-BF16 or AMX), where emulated "
        f"bfloat16 ran >= 85x slower than float32; running float32 instead (set {FORCE_ENV}=1 to force bfloat16)"
    )
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, stacklevel=2)
    return False


def machine_description(device: str | torch.device = "cpu") -> dict:
    """What a benchmark ran on: CPU model and its vector/matrix extensions (or the GPU), torch, threads."""
    d = torch.device(device)
    flags = (_cpuinfo("flags") or "").split()
    ext = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16") if f in flags]
    out = dict(cpu=cpu_name(), cpu_extensions=ext, cpu_native_bf16=cpu_has_native_bf16(), cores=os.cpu_count())
    out.update(torch=torch.__version__, threads=torch.get_num_threads())
    if d.type == "cuda" and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(d)
    return out


def describe_line(device: str | torch.device = "cpu") -> str:
    m = machine_description(device)
    where = (
        m.get("gpu")
        or f"{m['cpu']} ({', '.join(m['cpu_extensions']) or 'no AVX2'}; native bf16: "
        f"{'yes' if m['cpu_native_bf16'] else 'no'})"
    )
    return f"machine: {where} | {m['cores']} cores, torch {m['torch']}, {m['threads']} threads"


HALF_DTYPES = (torch.bfloat16, torch.float16)


def weights_dtype(model) -> torch.dtype | None:
    """The dtype of ``model``'s first floating-point parameter (``None``: none here)."""
    params = getattr(model, "parameters", None)
    if params is None:
        return None
    try:
        return next((p.dtype for p in params() if p.is_floating_point()), None)
    except (AttributeError, RuntimeError, TypeError):
        return None


def require_finite_half(model, prompts: torch.Tensor) -> None:
    """A model with float16 or bfloat16 weights can overflow to NaN in its residual stream while its patterns stay
    finite (float16 on a CPU: every logit NaN), and a ranking of such patterns names a wrong cause: such a model runs
    once on the first of ``prompts`` ``[batch, pos]``, a :class:`~.validation.NonFiniteError` if its logits are not."""
    from .engine import engine_for
    from .validation import require_finite

    if weights_dtype(model) in HALF_DTYPES and isinstance(model, torch.nn.Module) and prompts is not None:
        require_finite(engine_for(model, "hooks").run(prompts[:1]), "the model's logits")


def reduced_precision(bf16_used: bool = False, model=None) -> tuple[str, str] | None:
    """``(cause, fix)`` when a measurement did not run in float32 (module doc), else ``None``: ``bf16_used``, bfloat16
    matmuls granted by :func:`resolve_bf16`, or ``model``'s bfloat16/float16 weights. ``cause`` completes "the numbers
    were ..."; ``fix`` says how to measure in float32."""
    dtype = weights_dtype(model) if model is not None else None
    if dtype in HALF_DTYPES:
        name = str(dtype).removeprefix("torch.")
        return (
            f"computed in {name}, the dtype of the model's weights",
            "measure in float32 to judge: model.float(), or load_model's float32 default",
        )
    if bf16_used:
        return "computed with bfloat16 matmuls", "rank without bf16 to judge"
    return None
