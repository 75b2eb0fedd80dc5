"""One copy of the weights, from the checkpoint to the processed model.

TransformerLens 4's ``boot_transformers`` maps a checkpoint, and ``enable_compatibility_mode`` processes it through
``ProcessWeights.process_weights``, whose ``fold_layer_norm``, ``center_unembed`` and ``fold_value_biases`` each begin
by cloning the whole state dict while the caller holds the previous one: on GPT-2 XL a peak of 3.2x the weights
(``docs/benchmarks.md``). Here the same processing runs on one copy, peaking at 1.24x: the checkpoint is read unmapped
into tensors that ``from_pretrained`` keeps as parameters without copying (:class:`CheckpointLoader`); TransformerLens's
own ``ProcessWeights.process_weights`` runs on one layer's tensors at a time (and once on each global side: embeddings;
final norm and unembedding), each result handed to the model and the layer's sources (GPT-2's fused ``c_attn``)
dropped before the next (:func:`layerwise_processing`). Every step reads only its own layer's or one side's tensors, so
the pieces give the whole's weights (``tests/model/test_one_copy.py`` checks five architectures). What the processed
model no longer computes with is dropped, checked, and the freed heap handed back (:func:`release_source_copies`)."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import re
import types
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path

import torch

from .folder import iter_safetensors, unused_weights


def read_checkpoint(files: list[Path], dtype: torch.dtype | None = None, names=None) -> dict[str, torch.Tensor]:
    """Every tensor of the safetensors ``files`` (or those in ``names``), read unmapped (``folder.iter_safetensors``),
    a float cast to ``dtype`` as it is read when that widens it (so the narrower copy never coexists with the whole
    wider model); a narrowing cast is left to ``from_pretrained``'s own dtype plan."""
    widen = lambda t: (  # noqa: E731
        dtype is not None
        and t.is_floating_point()
        and dtype.is_floating_point
        and torch.finfo(dtype).bits > torch.finfo(t.dtype).bits
    )
    return {name: t.to(dtype) if widen(t) else t for path in files for name, t in iter_safetensors(path, names)}


def _placeholder(p: torch.Tensor, value: float = 0.0) -> torch.Tensor:
    """A tensor of ``p``'s shape, dtype and device holding no memory (one element, expanded)."""
    return torch.full((), value, dtype=p.dtype, device=p.device).expand(p.shape)


class CheckpointLoader:
    """The ``model_class`` ``boot_transformers`` loads with: the class TransformerLens chooses, with the checkpoint read
    by :func:`read_checkpoint` instead of mapped; a parameter without a tensor or a tensor without a parameter is an
    error (``on_mismatch``). It remembers (weakly) each parameter as loaded and its checkpoint tensor, so
    :meth:`drop_unreplaced` lets go of a processed layer's leftovers and :meth:`restore` reads them back."""

    def __init__(self, files: list[Path], on_mismatch):
        self.files = list(files)
        self.on_mismatch = on_mismatch
        self.sources: list[weakref.ref] = []  # every parameter as loaded
        self.named: dict[int, tuple[weakref.ref, str]] = {}  # id -> (parameter, checkpoint name): read, not copied
        self.dropped: list[tuple[weakref.ref, str]] = []
        self.dropped_bytes = 0

    def from_pretrained(self, name, **kwargs):
        from transformer_lens.model_bridge.sources._hf_format import determine_architecture_from_hf_config
        from transformer_lens.model_bridge.sources.transformers.helpers import get_hf_model_class_for_architecture

        config = kwargs["config"]
        auto = get_hf_model_class_for_architecture(determine_architecture_from_hf_config(config))
        cls = concrete_class(auto, config)
        state_dict: dict[str, torch.Tensor] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if cls is None:  # remote code or a composite config: transformers' own (mapped) loading
                model, info = auto.from_pretrained(name, output_loading_info=True, **kwargs)
            else:
                dtype = kwargs.get("dtype", kwargs.get("torch_dtype"))
                state_dict = read_checkpoint(self.files, dtype if isinstance(dtype, torch.dtype) else None)
                model, info = cls.from_pretrained(None, state_dict=state_dict, output_loading_info=True, **kwargs)
        params = {n for n, _ in model.named_parameters(remove_duplicate=False)}
        self.on_mismatch(
            sorted(k for k in info.get("missing_keys") or () if k in params),  # a missing buffer is rebuilt
            unused_weights(info.get("unexpected_keys") or ()),
            sorted(str(k) for k in (info.get("mismatched_keys") or ())),
        )
        key = lambda t: (t.data_ptr(), t.dtype, tuple(t.shape), t.stride())  # noqa: E731 - the same tensor, exactly
        read = {key(t): n for n, t in state_dict.items()}
        del state_dict
        for p in model.parameters():
            self.sources.append(weakref.ref(p))
            if key(p) in read:
                self.named[id(p)] = (weakref.ref(p), read[key(p)])
        return model

    def drop_unreplaced(self, module) -> None:
        """Replace ``module``'s parameters that are still the checkpoint's tensors (what processing did not replace)
        by placeholders holding no memory."""
        for p in module.parameters():
            ref, name = self.named.get(id(p), (None, None))
            if ref is not None and ref() is p and p.untyped_storage().nbytes():
                self.dropped_bytes += p.untyped_storage().nbytes()
                p.data = _placeholder(p)
                self.dropped.append((ref, name))

    def restore(self) -> None:
        """Read the dropped parameters back from the checkpoint."""
        alive = [(ref(), name) for ref, name in self.dropped if ref() is not None]
        values = read_checkpoint(self.files, names={name for _, name in alive})
        for p, name in alive:
            p.data = values[name].to(dtype=p.dtype, device=p.device)
        self.dropped, self.dropped_bytes = [], 0

    def leftovers(self, model) -> list[torch.nn.Parameter]:
        """Parameters of ``model`` still holding the checkpoint's tensors as loaded (never replaced, not dropped)."""
        alive = {id(p): p for p in (r() for r in self.sources) if p is not None}
        return [
            p
            for p in model.parameters()
            if alive.get(id(p)) is p and p.dtype.is_floating_point and p.untyped_storage().nbytes()
        ]


def concrete_class(cls, config):
    """The class an ``Auto*`` class ``cls`` loads ``config`` with (``cls`` if not Auto); ``None`` where remote code or
    a composite config's text part decides (only the Auto class's ``from_pretrained`` resolves those)."""
    mapping = getattr(cls, "_model_mapping", None)
    if mapping is None:
        return cls
    auto_map = getattr(config, "auto_map", None) or {}
    if cls.__name__ in auto_map or type(config) not in mapping:
        return None
    try:
        from transformers.models.auto.auto_factory import _get_model_class

        model_class = _get_model_class(config, mapping)
    except (ImportError, KeyError):
        return None
    text = (getattr(config, "sub_configs", None) or {}).get("text_config")
    if text is not None and getattr(model_class, "config_class", None) == text:
        return None
    if not model_class.__module__.startswith("transformers."):
        return None
    return model_class


# --- weight processing one layer at a time ------------------------------------------------------------------------
_LAYER = re.compile(r"^blocks\.(\d+)\.(.+)$")


class _NotLayerwise(Exception):
    """This model's processing cannot be split by layer; TransformerLens's own whole-model pass runs instead."""


def _layerwise_supported(bridge, refactor: bool) -> str | None:
    """Why the layerwise pass does not apply to ``bridge`` (``None`` when it does)."""
    from transformer_lens.model_bridge.architecture_adapter import ArchitectureAdapter

    adapter = bridge.adapter
    if refactor:
        return "refactor_factored_attn_matrices"
    if adapter is None or type(adapter).preprocess_weights is not ArchitectureAdapter.preprocess_weights:
        return "the adapter preprocesses the whole state dict"
    if (getattr(bridge.cfg, "num_experts", None) or 0) > 0:
        return "mixture-of-experts layers"
    if getattr(bridge.original_model, "hf_device_map", None):
        return "a dispatched device map"
    return None


def _to_tl_prefix(bridge, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """TransformerBridge.process_weights's renaming of Hugging Face prefixes to TransformerLens component names."""
    hf_to_tl = {remote: tl for tl, (remote, _c) in bridge.real_components.items() if remote and remote != tl}
    out = {}
    for key, value in state_dict.items():
        hf = next((hf for hf in hf_to_tl if key.startswith(hf + ".")), None)
        out[key if hf is None else f"{hf_to_tl[hf]}.{key[len(hf) + 1 :]}"] = value
    return out


def process_weights_layerwise(bridge, verbose: bool = False, after_layer=None, **flags) -> None:
    """``TransformerBridge.process_weights`` (TL 4.3, ``flags`` its keywords) with ``ProcessWeights.process_weights``
    run one layer at a time (module doc), the bridge's own steps around it (readable-weight check, no unembedding
    centring under softcapping, prefixes renamed, distribution, ``postprocess_weights``). Each layer's pass sees it as
    ``blocks.0`` of a one-layer configuration; two zero-layer passes see the input side, then the output side; each
    pass gets one-row copies of the global tensors a step insists on (results discarded). :class:`_NotLayerwise`,
    having changed nothing, where the split does not apply; ``after_layer(index)`` once each layer's weights are in
    the model."""
    import logging

    from transformer_lens.utilities.activation_functions import softcap_enabled
    from transformer_lens.utilities.quantization import require_readable_weight
    from transformer_lens.weight_processing import ProcessWeights

    flags = dict(fold_ln=True, center_writing_weights=True, center_unembed=True, fold_value_biases=True) | flags
    why = _layerwise_supported(bridge, flags.pop("refactor_factored_attn_matrices", False))
    if why:
        raise _NotLayerwise(why)
    if bridge._weights_processed:
        logging.warning("process_weights was already applied to this bridge. Skipping.")
        return
    for name, param in bridge.original_model.named_parameters():
        require_readable_weight(param, operation=f"process weights ({name})", owner=bridge.original_model)
    if flags["center_unembed"] and softcap_enabled(getattr(bridge.cfg, "output_logits_soft_cap", None)):
        flags["center_unembed"] = False
    flags.update(refactor_factored_attn_matrices=False, adapter=bridge.adapter)
    state_dict = bridge.state_dict()
    # TransformerLens clones a tied unembedding here so that processing it leaves the embedding alone; every pass
    # below starts from copies (fold_layer_norm and center_unembed clone their input, the other steps write new
    # tensors), so the tie is broken by the processing itself, one copy of the vocabulary matrix later
    layers: dict[int, dict[str, torch.Tensor]] = {}
    globals_: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        m = _LAYER.match(key)
        if m:
            layers.setdefault(int(m.group(1)), {})[m.group(2)] = value
        elif key.startswith("blocks."):
            raise _NotLayerwise(f"a block key without a layer index: {key}")
        else:
            globals_[key] = value
    del state_dict
    n_layers = bridge.cfg.n_layers
    if sorted(layers) != list(range(n_layers)):
        raise _NotLayerwise(f"the state dict's layers are {sorted(layers)[:5]}..., the config has {n_layers}")
    cfg_global, cfg_layer = copy.copy(bridge.cfg), copy.copy(bridge.cfg)
    cfg_global.n_layers, cfg_layer.n_layers = 0, 1
    # one-row copies of the global tensors, for the steps that insist on finding them; their results are discarded
    stand_ins = {k: (v[:1] if v.ndim >= 2 else v).clone() for k, v in globals_.items()}

    def one_pass(own: dict[str, torch.Tensor], cfg, keep) -> dict[str, torch.Tensor]:
        out = ProcessWeights.process_weights({**stand_ins, **own}, cfg, **flags)
        return {k: v for k, v in out.items() if keep(k)}

    def layer_pass(index: int) -> dict[str, torch.Tensor]:
        own = {f"blocks.0.{k}": v for k, v in layers[index].items()}
        out = one_pass(own, cfg_layer, lambda k: k.startswith("blocks.0."))
        return {f"blocks.{index}.{k[len('blocks.0.') :]}": v for k, v in out.items()}

    # the output side (final norm folded into the unembedding, which is centred) and the input side (embeddings
    # centred) in two passes, so that each copies only its own side's large matrix
    output_side = {"unembed", "ln_final"}
    sides = [{c for c in (k.split(".")[0] for k in globals_) if c not in output_side}, output_side]
    # the global passes and layer 0 run before anything is written into the model: if one fails, the model is
    # untouched and TransformerLens's own pass can run instead
    try:
        processed_globals = {}
        for side in sides:
            own = {k: v for k, v in globals_.items() if k.split(".")[0] in side}
            if own:
                processed_globals.update(one_pass(own, cfg_global, lambda k, side=side: k.split(".")[0] in side))
            del own
        first = layer_pass(0) if n_layers else {}
    except Exception as e:  # noqa: BLE001 - any failure here means: use the whole-model pass
        raise _NotLayerwise(f"{type(e).__name__}: {e}") from e
    bridge._weights_processed = True
    del globals_
    ProcessWeights.distribute_weights_to_components(_to_tl_prefix(bridge, processed_globals), bridge.real_components)
    del processed_globals
    trim_heap()
    for index in range(n_layers):
        processed = first if index == 0 else layer_pass(index)
        first = None
        del layers[index]  # the source tensors of this layer: the last reference this function held
        ProcessWeights.distribute_weights_to_components(_to_tl_prefix(bridge, processed), bridge.real_components)
        del processed
        if after_layer is not None:
            after_layer(index)
        trim_heap()  # the freed sources and the pass's temporaries leave holes in the heap: hand them back now
        if verbose:
            print(f"  processed layer {index + 1}/{n_layers}")
    if bridge.adapter is not None:
        bridge.adapter.postprocess_weights(bridge)


@contextlib.contextmanager
def layerwise_processing(bridge, loader: CheckpointLoader | None = None) -> Iterator[None]:
    """While open, this ``bridge``'s ``process_weights`` is :func:`process_weights_layerwise` (TransformerLens's own
    where the split does not apply), dropping each processed layer's leftovers of ``loader``'s checkpoint at once."""
    own = type(bridge).process_weights

    def after_layer(index: int) -> None:
        if loader is not None:
            loader.drop_unreplaced(bridge.blocks[index])

    def process(self, *args, **kwargs):
        try:
            process_weights_layerwise(self, *args, after_layer=after_layer, **kwargs)
        except _NotLayerwise:
            own(self, *args, **kwargs)

    bridge.process_weights = types.MethodType(process, bridge)
    try:
        yield
    finally:
        del bridge.process_weights


# --- dropping what the processed model no longer computes with ------------------------------------------------------
def trim_heap() -> None:
    """Give freed heap back to the system (glibc ``malloc_trim``; nothing elsewhere)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def release_source_copies(model, loader: CheckpointLoader | None = None) -> int:
    """Drop the parameters holding the checkpoint's own tensors that the model does not compute with (``loader``'s
    leftovers and drops, else views of a mapped ``.safetensors``); the bytes released. Checked on a 4-token prompt with
    them all NaN: if the output moves, every one is kept (the dropped read back) and nothing released."""
    if loader is not None:
        candidates = loader.leftovers(model)
        dropped = [p for p in (ref() for ref, _ in loader.dropped) if p is not None]
    else:
        try:  # this process's mappings (Linux; none elsewhere): the address ranges of .safetensors files
            maps = [line.split() for line in Path("/proc/self/maps").read_text().splitlines()]
        except OSError:
            maps = []
        maps = [m for m in maps if len(m) >= 6 and m[-1].endswith(".safetensors")]
        ranges = [tuple(int(x, 16) for x in m[0].split("-")) for m in maps]
        candidates = [
            p
            for p in model.parameters()
            if p.dtype.is_floating_point and any(lo <= p.untyped_storage().data_ptr() < hi for lo, hi in ranges)
        ]
        dropped = []
    if not candidates and not dropped:
        trim_heap()
        return 0
    cfg = model.cfg
    toks = torch.randint(0, cfg.d_vocab, (1, min(4, cfg.n_ctx)), generator=torch.Generator().manual_seed(0))
    toks = toks.to(next(model.parameters()).device)
    originals = [p.data for p in candidates]
    # the module being loaded, called as it is (before any engine is asked to run it): whatever computes with a
    # dropped tensor shows in its output
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")
        before = model(toks)
        for p in candidates + dropped:
            p.data = _placeholder(p, float("nan"))
        after = model(toks)
    if not torch.equal(before, after):  # the model reads them: keep them
        for p, data in zip(candidates, originals):
            p.data = data
        if loader is not None:
            loader.restore()
        return 0
    released = sum(
        t.untyped_storage().nbytes() for t in {t.untyped_storage().data_ptr(): t for t in originals}.values()
    )
    for p in candidates + dropped:
        p.data = _placeholder(p)
    del originals
    trim_heap()
    return released + (loader.dropped_bytes if loader is not None else 0)
