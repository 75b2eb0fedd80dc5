"""Train the miniature GPT-2 that lets every GPT-2 analysis run offline on a trained model.

    python experiments/train_mini_gpt2.py --out data/mini-gpt2          # ~20 min on 2 CPU cores

Resumes from <out>-work/checkpoint.pt when interrupted. Writes the model directory plus a loss figure.
"""
import torch

from gpt2_posheads.cli import Output, experiment_parser
from gpt2_posheads.mini_gpt2 import MiniConfig, train_mini_gpt2
from gpt2_posheads.plotting import line_figure
from gpt2_posheads.prompts import documents


def main(argv=None):
    p = experiment_parser(__doc__, model=False, default_out="data/mini-gpt2")
    d = MiniConfig()
    for name in ("n_layers", "n_heads", "d_model", "n_ctx", "vocab_size", "steps", "batch_size"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--text", default="wikitext", help="wikitext | openwebtext | path to .txt/.jsonl files")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast: ~1.8x faster steps on CPUs with AMX")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = MiniConfig(n_layers=args.n_layers, n_heads=args.n_heads, d_model=args.d_model, n_ctx=args.n_ctx,
                     vocab_size=args.vocab_size, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                     bf16=args.bf16)
    docs, source = documents(args.text)
    print(f"training on {len(docs)} documents from {source}")
    out = Output.from_args(args, __file__)
    rec = train_mini_gpt2(docs, out.out_dir, cfg)
    steps, losses = zip(*rec["loss"])
    vs, vl = zip(*rec["val_loss"])
    out.figure(line_figure({"train": (steps, losses), "validation": (vs, vl)}, title="mini GPT-2 training loss",
                           xlabel="step", ylabel="cross-entropy (nats)"), "training_loss")
    print(f"validation loss {rec['final_val_loss']:.3f} (perplexity {torch.tensor(rec['final_val_loss']).exp():.1f}) "
          f"after {rec['seconds'] / 60:.1f} min")
    out.report()


if __name__ == "__main__":
    main()
