"""The model organism: a miniature GPT-2 trained offline to have the mechanism the GPT-2 post is about
(data and synthetic languages, positional embeddings, the training loop, the probe of its vital signs).

Its names load on first use: the GPT-2 post's report reads the organism's data split without loading its trainer."""

_NAMES = {
    "MiniConfig": "data",
    "POS_INITS": "data",
    "REPEAT_KINDS": "data",
    "encode_stream": "data",
    "split_docs": "data",
    "probe": "probe",
    "train_mini_gpt2": "train",
}
__all__ = sorted(_NAMES)


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{_NAMES[name]}"), name)
    globals()[name] = value
    return value
