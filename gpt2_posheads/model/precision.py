"""Where bfloat16 is fast, what this machine is (for benchmarks and the bfloat16 fallback), and the one precision policy
of the claims.

On a CPU without bfloat16 matrix units (no AVX512-BF16, no AMX) PyTorch emulates bfloat16 matmuls:
on a 2-core AMD EPYC with AVX2 only, ``bf16=True`` was at least 85x *slower* than float32. So a bfloat16 request is
honoured only where the hardware has native support; elsewhere it falls back to float32 with one line saying why.
``GPT2_POSHEADS_FORCE_BF16=1`` (or ``force=True``) overrides.

**The precision policy.** The rules judge numbers computed in float32 (the default of ``load_model`` and of every
command). A measurement whose matmuls ran in a half-precision type — because ``bf16=True`` / ``--bf16`` asked for it, or
because the caller's model holds bfloat16 or float16 weights (``model.to(torch.bfloat16)``, ``model.half()``) — is
:func:`reduced_precision`: the claims whose numbers that type is known to move (the ranking's diagonal masses:
bfloat16 moved sharp heads' masses by up to 0.5 on the shipped compiled models) are ``not testable``, naming the type
and the way back to float32; every other claim is judged and carries a note naming the type. One function says both, so
a command's ``--bf16`` and a caller's bfloat16 model read the same."""

from __future__ import annotations

import os
import platform
import warnings
from functools import lru_cache

import torch

FORCE_ENV = "GPT2_POSHEADS_FORCE_BF16"
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@lru_cache(maxsize=2)
def _cpuinfo(field: str) -> str | None:
    """The first ``field`` line's value in ``/proc/cpuinfo`` (``None`` where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(field)), None)
    except OSError:
        return None


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where that file does not exist)."""
    return frozenset((_cpuinfo("flags") or "").split())


def cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_has_native_bf16() -> bool:
    """True when bfloat16 matmuls run on matrix/vector units (AVX512-BF16 or AMX), not emulated."""
    if any(f in cpu_flags() for f in _BF16_FLAGS):
        return True
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and bool(cpu_flags() & {"avx512_bf16", "amx_tile"})
    except (AttributeError, RuntimeError):
        return False


def bf16_native(device: str | torch.device = "cpu") -> bool:
    d = torch.device(device)
    if d.type == "cuda":
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
    flags = cpu_flags()
    ext = [f for f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16") if f in flags]
    out = {
        "cpu": cpu_name(),
        "cpu_extensions": ext,
        "cpu_native_bf16": cpu_has_native_bf16(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
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
    """The dtype of ``model``'s first floating-point parameter (``None``: no parameter here, or none floating)."""
    params = getattr(model, "parameters", None)
    if params is None:
        return None
    try:
        return next((p.dtype for p in params() if p.is_floating_point()), None)
    except (AttributeError, RuntimeError, TypeError):
        return None


def require_finite_half(model, prompts: torch.Tensor) -> None:
    """A model with float16 or bfloat16 weights can overflow to NaN in its residual stream while its attention
    patterns stay finite (float16 on a CPU: every logit NaN), and a ranking of such patterns names a wrong cause. So
    such a model is run once on the first of ``prompts`` (``[batch, pos]``):
    :class:`~gpt2_posheads.model.validation.NonFiniteError` when its logits are not finite."""
    from .engine import engine_for
    from .validation import require_finite

    if weights_dtype(model) in HALF_DTYPES and isinstance(model, torch.nn.Module) and prompts is not None:
        require_finite(engine_for(model, "hooks").run(prompts[:1]), "the model's logits")


def reduced_precision(bf16_used: bool = False, model=None) -> tuple[str, str] | None:
    """``(cause, fix)`` when a measurement did not run in float32 (see the module doc), else ``None``. ``bf16_used``:
    the pass ran bfloat16 matmuls on request (what :func:`resolve_bf16` granted); ``model``: the model measured, whose
    weights may be bfloat16 or float16. ``cause`` completes "the numbers were ..."; ``fix`` says how to measure in
    float32."""
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
