"""The helix of W_pos and of the extended positional embeddings: its options and help are the claim script's
declaration (gpt2_posheads.posts.gpt2_prev_heads.helix); here, its run (--w-pos plots a file without a model)."""

from pathlib import Path

from ..cli.declared import parse
from ..cli.experiment import capped_seq_len, setup
from ..cli.output import Output, default_target
from ..posts.gpt2_prev_heads import helix as claim
from ..posts.gpt2_prev_heads._run import ModelRun


def main(argv=None):
    args = parse(claim.pos_embed_helix.script, argv)
    if args.w_pos:
        result = claim.pos_embed_helix(w_pos=args.w_pos)  # the file is read and checked before any output opens
        target = Path(args.out) if args.out else default_target("pos_embed_helix", result.model)
        out = Output.open(target, "pos_embed_helix", png=not args.no_png, force=args.force)
        context = {"model": result.model}
    else:
        exp = setup(args, __file__, prompts=False, ranking=False, layer_final=True)
        seq_len = capped_seq_len(exp.model, args.seq_len) if args.seq_len is not None else None
        result = claim.pos_embed_helix(
            layer=args.layer, n_prompts=args.n_prompts, seq_len=seq_len, seed=args.seed, run=ModelRun.of(exp)
        )
        out, context = exp.out, exp.describe()
    for k, v in result.numbers.items():
        if isinstance(v, dict) and "explained_variance_top4" in v:
            e = [round(float(x), 3) for x in v["explained_variance_top4"]]
            print(f"{k}: top-4 PCs explain {e}; GPT-2 W_pos: ~0.33, 0.32, 0.25, 0.035")
    result.write(out, context)
