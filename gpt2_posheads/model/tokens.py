"""Turning the prompts users pass (token tensors, lists of them, or strings) into batches."""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence

import torch

from .validation import UsageError, check_int_range, note

_EOS_FOR_BOS_SAID: weakref.WeakSet = weakref.WeakSet()  # the tokenizers whose missing BOS was said


def bos_token_id(tokenizer) -> int:
    """The id a prompt starts with: the tokenizer's BOS token. A tokenizer without one (or whose BOS TransformerLens
    set to its EOS when it loaded the model: none was declared) starts prompts with its EOS token, as TransformerLens's
    own ``to_tokens`` does, said once per tokenizer; one with neither is a :class:`UsageError`."""
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    declared = getattr(tokenizer, "init_kwargs", {}).get("bos_token")
    if bos is not None and (declared is not None or bos != eos):
        return bos
    first = bos if bos is not None else eos
    if first is None:
        raise UsageError("tokenizer", "has neither a BOS nor an EOS token to start a prompt with", "prepend_bos=False")
    if tokenizer not in _EOS_FOR_BOS_SAID:
        _EOS_FOR_BOS_SAID.add(tokenizer)
        name = tokenizer.convert_ids_to_tokens(first)
        note(f"the tokenizer has no BOS token: prompts start with its EOS token {name!r} (id {first}) in its place")
    return first


def as_token_batches(model, prompts, batch_size: int) -> Iterator[torch.Tensor]:
    """Yield ``[batch, pos]`` token tensors; prompts of equal length share a batch. ``prompts``: a ``[n, pos]``
    tensor, a list of 1-D tensors, or a list of strings (tokenized with the model's tokenizer, BOS prepended as
    ``model.to_tokens`` does). Raises on an empty list or a prompt longer than ``n_ctx``."""
    check_int_range("batch_size", batch_size, 1, 1 << 30)
    by_len: dict[int, list[torch.Tensor]] = {}
    for s in to_token_list(model, prompts):
        by_len.setdefault(len(s), []).append(s)
    for _, group in sorted(by_len.items()):
        for i in range(0, len(group), batch_size):
            yield torch.stack(group[i : i + batch_size])


def to_token_list(model, prompts) -> list[torch.Tensor]:
    if isinstance(prompts, torch.Tensor):
        if prompts.ndim == 1:
            prompts = prompts[None]
        if prompts.ndim != 2:
            raise ValueError(f"prompts tensor must be [batch, pos], got shape {tuple(prompts.shape)}")
        seqs = list(prompts)
    elif isinstance(prompts, Sequence) and not isinstance(prompts, str):
        seqs = [model.to_tokens(p)[0] if isinstance(p, str) else torch.as_tensor(p) for p in prompts]
    else:
        raise TypeError("prompts must be a [batch, pos] tensor, a list of token tensors, or a list of strings")
    if len(seqs) == 0:
        raise ValueError("prompts is empty: pass at least one prompt")
    n_ctx, d_vocab = model.cfg.n_ctx, model.cfg.d_vocab
    for s in seqs:
        if s.dtype.is_floating_point or s.dtype.is_complex or s.dtype == torch.bool:
            raise UsageError(
                "prompts",
                f"token ids are {s.dtype}",
                "an integer tensor of token ids",
                "e.g. model.to_tokens(text), or tensor.long() if the values are whole numbers",
            )
        if len(s) > n_ctx:
            raise UsageError(
                "prompts", f"prompt length {len(s)} exceeds the model's context", f"allowed 1..{n_ctx} tokens (n_ctx)"
            )
        if len(s) < 1:
            raise UsageError("prompts", "a prompt has length 0", "at least one token")
        lo, hi = int(s.min()), int(s.max())
        if lo < 0 or hi >= d_vocab:
            raise UsageError(
                "prompts",
                f"token id {hi if hi >= d_vocab else lo} is outside the vocabulary",
                f"allowed 0..{d_vocab - 1} (d_vocab {d_vocab})",
            )
    return [s.long() for s in seqs]


def single_prompt(model, prompt) -> torch.Tensor:
    """One prompt (a string or a 1-D token tensor) as a checked ``[1, pos]`` batch on the model's device."""
    return to_token_list(model, [prompt] if isinstance(prompt, str) else prompt)[0][None].to(model_device(model))


def model_device(model) -> torch.device:
    return next(model.parameters()).device
