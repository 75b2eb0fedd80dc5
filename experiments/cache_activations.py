"""Build the activation cache the tests and reports read (see gpt2_posheads.store.cache).

    python experiments/cache_activations.py --model gpt2 --out data/gpt2-cache.safetensors   # with the hub
    python experiments/cache_activations.py --model-dir data/mini-gpt2 --heads auto:4 \\
        --out data/mini-gpt2-cache.safetensors
"""
from pathlib import Path

from gpt2_posheads.store.cache import build_cache
from gpt2_posheads.cli.common import (add_heads_arg, add_prompt_args, corpus_prompts, experiment_parser, main_entry,
                               model_from_args, model_label, positive, postcheck, precheck, resolve_heads)


def main(argv=None):
    p = experiment_parser(__doc__, default_out="data/gpt2-cache.safetensors")
    add_prompt_args(p, n_prompts=32, seq_len=256)
    add_heads_arg(p, "L1H0,L2H2,L3H3,L2H4,L3H7,L3H2,L4H11,L5H6", "heads whose patterns and raw scores are stored")
    p.add_argument("--max-offset", type=int, default=32, help="largest diagonal offset stored")
    p.add_argument("--ext-prompts", type=int, default=16, help="repeated-token prompts for the extended embeddings")
    args = p.parse_args(argv)
    precheck(args)
    positive("--max-offset", args.max_offset)
    positive("--ext-prompts", args.ext_prompts)
    model = model_from_args(args)
    postcheck(args, model)
    prompts, source = corpus_prompts(model, args)
    heads = resolve_heads(model, args.heads, prompts)
    cache = build_cache(model, prompts, heads, model_label(args), max_offset=args.max_offset,
                        ext_n_prompts=args.ext_prompts, seed=args.seed, prompt_source=source)
    path = cache.save(Path(args.out))
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB): {', '.join(sorted(cache.tensors))[:300]}...")
    print(cache.ranking().head(8)[["name", "top_offset", "ratio"]].to_string(index=False))


if __name__ == "__main__":
    main_entry(main)
