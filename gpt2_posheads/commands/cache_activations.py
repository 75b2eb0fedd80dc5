"""Build the activation cache the tests and reports read (see gpt2_posheads.store.cache).

    gpt2-posheads cache_activations --model gpt2 --out data/gpt2-cache.safetensors   # with the hub
    gpt2-posheads cache_activations --model mini-gpt2 --out data/mini-gpt2-cache.safetensors

Stores the patterns and raw scores of the post's eight heads on GPT-2 small (the model's four most
previous-token-like heads elsewhere), the diagonals of every head, the extended positional embeddings at every
layer, repeat-prompt probabilities, induction and the aggregator under masking and W_pos averaging.
"""

import json
from pathlib import Path

from ..analysis.diagonals import diagonal_attention, rank_from_diagonals
from ..analysis.heads import HeadDefault, resolve_heads
from ..claims.catalogue import Command, Option
from ..cli.args import MODEL_OPTIONS, output_options, prompt_options
from ..cli.checks import postcheck, precheck
from ..cli.declared import parse
from ..cli.experiment import corpus_prompts, model_from_args, model_identity, model_label
from ..cli.output import check_one_model_per_name, check_out_folder
from ..model.validation import UsageError
from ..store.cache import PosheadsCache, build_cache

HEADS = HeadDefault(
    ("L1H0", "L2H2", "L3H3", "L2H4", "L3H7", "L3H2", "L4H11", "L5H6"),
    "top",
    n=4,
    what="heads whose patterns and raw scores are stored",
)
REPLACED = "(an existing file is replaced only if it is a cache of this toolkit)"
COMMAND = Command(
    "cache_activations",
    usage=__doc__,
    options=(
        *MODEL_OPTIONS,
        *output_options(f"the .safetensors file to write {REPLACED}"),
        *prompt_options(n_prompts=32, seq_len=256),
        Option("--heads", None, HEADS.help()),
        Option("--ext-prompts", 16, "repeated-token prompts for the extended embeddings", int, low=1),
    ),
)


def main(argv=None):
    args = parse(COMMAND, argv)
    checked = precheck(args)
    if args.out is None:
        raise UsageError("--out", "is required", "a .safetensors path", "e.g. --out data/gpt2-cache.safetensors")
    out = Path(args.out)
    if out.suffix != ".safetensors":
        raise UsageError("--out", f"{out} does not end in .safetensors", "a .safetensors path")
    if out.is_dir():
        raise UsageError("--out", f"{out} is a folder", "a .safetensors file path")
    check_out_folder(out.parent)
    if out.exists() and not PosheadsCache.is_cache_file(out):
        problem = f"{out} exists and is not a cache of this toolkit"
        raise UsageError("--out", problem, "a new path or an earlier cache", "choose another --out")
    identity = model_identity(args)
    if out.exists() and not args.force:
        hint = "choose another --out, or --force to replace it"
        check_one_model_per_name(cached_model(out), identity, "--out", f"{out} holds the cache of", hint)
    model = model_from_args(args)
    postcheck(args, checked, model)
    prompts, source = corpus_prompts(model, args)
    ranking = rank_from_diagonals(diagonal_attention(model, prompts, progress=False))
    heads, chosen = resolve_heads(model, checked.heads, HEADS, ranking)
    print(f"stored heads: {chosen}")
    kw = dict(ext_n_prompts=args.ext_prompts, seed=args.seed, prompt_source=source, heads_chosen=chosen)
    cache = build_cache(model, prompts, heads, model_label(args), **kw)
    cache.meta["fingerprint"] = identity["fingerprint"]  # what tells this model from another of its name
    path = cache.save(out)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): {', '.join(sorted(cache.tensors))[:300]}...")
    print(cache.ranking().head(8)[["name", "top_offset", "ratio"]].to_string(index=False))


def cached_model(path: Path) -> dict:
    """``{"label", "fingerprint"}`` of the model a cache file was built from (its provenance; no tensor is read)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads((f.metadata() or {}).get("provenance", "{}"))
    return {"label": meta.get("model"), "fingerprint": meta.get("fingerprint")}
