"""One copy of the weights: what a loaded TransformerLens bridge keeps that the model no longer computes with.

The 4.x bridge loads the checkpoint memory-mapped and converts it in compatibility mode (LayerNorm folded, writing
weights centred, fused QKV split per head) into new tensors; the fused QKV source it converted (GPT-2's ``c_attn``)
stays behind as views of the mapped file, so the whole file stays mapped and resident beside the converted weights:
about two copies (GPT-2 XL: 5.8 GiB of file pages beside 6.1 GiB of converted weights). :func:`release_source_copies`
finds the parameters that are views of a mapped ``.safetensors`` file, checks that the model does not compute with
them (the output is unchanged when they are NaN), and replaces each by a zero of its shape that holds no memory (an
expanded 0-d tensor), so the mapping is dropped; then it hands freed heap back to the system (glibc's
``malloc_trim``). A parameter the model does use is left as it is.
"""

from __future__ import annotations

import contextlib
import ctypes
import warnings
from pathlib import Path

import torch


def _mapped_ranges(suffix: str = ".safetensors") -> list[tuple[int, int]]:
    """Address ranges of this process's mappings of files ending in ``suffix`` (Linux; empty elsewhere)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 6 and parts[-1].endswith(suffix):
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            out.append((lo, hi))
    return out


def trim_heap() -> None:
    """Give freed heap back to the system (glibc ``malloc_trim``; nothing elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def release_source_copies(model) -> int:
    """Drop the parameters that are views of a mapped checkpoint and that the model does not compute with (module
    doc); returns the bytes released. Checked on a 4-token prompt: if the output moves, nothing is released."""
    ranges = _mapped_ranges()
    if not ranges:
        trim_heap()
        return 0
    mapped = [
        p
        for p in model.parameters()
        if any(lo <= p.untyped_storage().data_ptr() < hi for lo, hi in ranges) and p.dtype.is_floating_point
    ]
    if not mapped:
        trim_heap()
        return 0
    cfg = model.cfg
    toks = torch.randint(0, cfg.d_vocab, (1, min(4, cfg.n_ctx)), generator=torch.Generator().manual_seed(0))
    toks = toks.to(next(model.parameters()).device)
    originals = [p.data for p in mapped]
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = model(toks)
        for p in mapped:
            p.data = torch.full((), float("nan"), dtype=p.dtype, device=p.device).expand(p.shape)
        after = model(toks)
    if not torch.equal(before, after):  # the model reads them: keep them
        for p, data in zip(mapped, originals):
            p.data = data
        return 0
    released = sum(
        t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t for t in originals}.values()
    )
    for p in mapped:
        p.data = torch.zeros((), dtype=p.dtype, device=p.device).expand(p.shape)
    del originals
    trim_heap()
    return released
