"""Train the miniature GPT-2 model organism: previous-token heads and induction heads, offline.

    gpt2-posheads train_mini_gpt2 --out data/mini-gpt2-new            # the shipped recipe
    gpt2-posheads train_mini_gpt2 --out gpt2_posheads/data/mini-gpt2 --overwrite    # replace the shipped model

The defaults are the shipped recipe: 1,400 synthetic steps (200 of a "copy the previous token" language, then segment
pairs "s s s' s' ..." mixed with it in windows of 16 tokens doubling every 400 steps, at random absolute positions)
and 3,600 steps of text (WikiText-2 minus its held-out split; `--text wikitext,nltk` adds NLTK's English corpora) in
256-token windows, half with a span repeated; why each part is there: the model card
(gpt2_posheads/data/mini-gpt2/README.md) and docs/organism.md. The held-out loss is on the WikiText-2 split the
shipped model held out, with its tokenizer, so losses compare token for token.

Speed (float32, 4 layers x 4 heads x d_model 128, batch 16 x 256): about 0.85 s per step on 2 AVX2 cores, 1.2 s on
one. --bf16 runs bfloat16 autocast only where the CPU has native bfloat16 units (AVX512-BF16/AMX; 1.8x faster there);
elsewhere float32, said (emulated bfloat16 is many times slower). A checkpoint every --checkpoint-minutes of
wall-clock time to <out>-work/checkpoint.pt: rerunning the same command resumes exactly; Ctrl-C keeps the last one.
A run that finishes writes the model into --out and removes <out>-work.
"""

import shutil
from pathlib import Path

import torch

from ..analysis.prompts import documents, file_documents, wikitext_documents
from ..claims.catalogue import Command, Option
from ..cli.args import output_options
from ..cli.declared import parse
from ..cli.output import Output, check_out_folder
from ..model.paths import ORGANISM_DIR, shared_dir
from ..model.state import resolve_bf16
from ..model.validation import UsageError, positive
from ..organism import POS_INITS, REPEAT_KINDS, MiniConfig, split_docs, train_mini_gpt2
from ..report.plotting import line_figure

TEXT_SOURCES = ("wikitext", "nltk", "openwebtext")


def training_documents(spec: str, seed: int) -> tuple[list[str], list[str], str]:
    """``(train docs, held-out docs, description)``: WikiText-2's held-out split is always held out."""
    _, held = split_docs(wikitext_documents(), 0.05, 0)
    held_set = set(held)
    docs, names = [], []
    for part in [s.strip() for s in spec.split(",") if s.strip()]:
        if part == "wikitext":
            docs += [d for d in wikitext_documents() if d not in held_set]
        elif part == "nltk":
            root = shared_dir()
            if root is None or not (root / "corpus" / "nltk-english").is_dir():
                raise UsageError("--text", "nltk: shared/corpus/nltk-english not found", "set $GPT2_POSHEADS_SHARED")
            docs += file_documents([root / "corpus" / "nltk-english"])
        elif part == "openwebtext":
            docs += documents("openwebtext")[0]
        elif Path(part).exists():
            docs += file_documents([part])
        else:
            allowed = f"allowed {', '.join(TEXT_SOURCES)} or .txt/.jsonl paths, comma-separated"
            raise UsageError("--text", f"{part!r} is neither a source nor an existing path", allowed)
        names.append(part)
    return docs, held, "+".join(names)


D = MiniConfig()
INTS = {  # MiniConfig's integer fields: (help, the lowest value taken)
    "n_layers": ("transformer blocks", 1),
    "n_heads": ("heads per block", 1),
    "d_model": ("residual width", 1),
    "n_ctx": ("context length", 1),
    "steps": ("optimizer steps in all", 1),
    "batch_size": ("windows per step", 1),
    "synthetic_steps": ("steps of the first, synthetic-only phase", 0),
    "seg_min": ("shortest repeated segment", 1),
    "seg_max": ("longest repeated segment", 1),
    "synthetic_vocab": ("synthetic token ids are drawn below this", 1),
    "skip_vocab": ("the skip-bigram language's tokens are ids below this", 1),
    "warmup": ("linear warm-up steps", 0),
    "synthetic_ctx": ("synthetic window length at step 0 (0: n_ctx)", 0),
    "skip_only_steps": ("first steps on the skip-bigram language alone", 0),
    "ctx_double_every": ("the synthetic window length doubles every this many steps (0: never)", 0),
    "probe_every": ("steps between measurements of the mechanism", 1),
    "pos_avg_max": ("largest W_pos group size of the averaging augmentation", 1),
    "pos_avg_start": ("the first step of the averaging augmentation", 0),
}
FLOATS = {  # MiniConfig's float fields: (help, the range checked here; None: checked below)
    "lr": ("peak learning rate (cosine decay to a tenth)", None),
    "skip_fraction": ("share of skip-bigram windows in the synthetic phase", (0, 1)),
    "synthetic_fraction": ("share of synthetic windows after it", (0, 1)),
    "skip_text_fraction": ("share of skip-bigram-language windows after the synthetic phase", (0, 1)),
    "repeat_fraction": ("share of text windows with a span of their own text repeated", (0, 1)),
    "checkpoint_minutes": ("wall-clock minutes between checkpoints", None),
    "skip_noise": ("chance that a skip-bigram token is uniform instead of pi(t-1)", (0, 1)),
    "pos_rms": ("RMS of a sinusoidal or gpt2 W_pos (0: the initializer range, 0.02)", None),
    "pos_lr": ("W_pos learning rate as a multiple of --lr (0: frozen)", None),
    "pos_smooth": ("weight of the W_pos roughness penalty mean|W[p+1]-W[p]|^2 / mean|W[p]-mean W|^2", None),
    "pos_avg_prob": (
        "chance that a step trains on W_pos averaged in groups of 2..--pos-avg-max at a random offset (augmentation: "
        "it trains the averaging claim in)",
        (0, 1),
    ),
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


POS_INIT_HELP = (
    "W_pos initialisation: random, sinusoidal, gpt2 (GPT-2's own rows projected onto their top d_model principal "
    "components) or none (no positional embeddings at all)"
)
SKIP_RULE_HELP = (
    "the skip-bigram language's pi: a random permutation, or the identity (t+1 = t-1, copy the previous token)"
)
REPEAT_HELP = (
    "synthetic repeats: segment pairs tiled across the window, or random tokens with one span copied at a random place"
)
OFFSETS_HELP = (
    "short synthetic windows start at a random absolute position, so every W_pos row trains while windows are short"
)
TEXT_PATHS = ".txt/.jsonl paths (WikiText-2's held-out split is never trained on)"
BF16_HELP = (
    "bfloat16 autocast where the CPU has native bfloat16 units (AVX512-BF16/AMX); float32 elsewhere, with a note "
    "(emulated bfloat16 is many times slower)"
)
KEEP_WORK_HELP = (
    "keep <out>-work (the checkpoint and tokenizer used to resume) after a successful run; by default it is removed "
    "once the model is written"
)


COMMAND = Command(
    "train_mini_gpt2",
    usage=__doc__,
    options=(
        *output_options(
            "the model folder to write (required; a folder holding anything else is refused; the shipped mini-gpt2 "
            "needs --overwrite)"
        ),
        *(Option(_flag(n), getattr(D, n), h, int, low=low) for n, (h, low) in INTS.items()),
        *(Option(_flag(n), getattr(D, n), h, float, *(r or (None, None))) for n, (h, r) in FLOATS.items()),
        Option("--pos-init", D.pos_init, POS_INIT_HELP, choices=POS_INITS),
        Option("--skip-rule", D.skip_rule, SKIP_RULE_HELP, choices=("permutation", "copy")),
        Option("--repeat-kind", D.repeat_kind, REPEAT_HELP, choices=tuple(REPEAT_KINDS)),
        Option("--position-offsets", D.position_offsets, OFFSETS_HELP, action="negatable"),
        Option("--text", "wikitext", f"comma-separated training text: {', '.join(TEXT_SOURCES)} or {TEXT_PATHS}"),
        Option("--tokenizer-dir", str(ORGANISM_DIR), "reuse this model folder's tokenizer ('' trains a new BPE)"),
        Option("--threads", None, "torch CPU threads", int, low=1),
        Option("--bf16", False, BF16_HELP),
        Option("--overwrite", False, "replace the model in --out (e.g. the shipped mini-gpt2)"),
        Option("--keep-work", False, KEEP_WORK_HELP),
    ),
)


def main(argv=None):
    args = parse(COMMAND, argv)
    if not args.lr > 0:
        raise UsageError("--lr", f"{args.lr} is out of range", "allowed > 0")
    for name in ("pos_rms", "pos_lr", "pos_smooth"):
        if not getattr(args, name) >= 0:
            raise UsageError(_flag(name), f"{getattr(args, name)} is out of range", "allowed >= 0")
    positive("--pos-avg-max", args.pos_avg_max, 2)
    if args.synthetic_fraction + args.skip_text_fraction > 1:
        both = f"{args.skip_text_fraction} + --synthetic-fraction {args.synthetic_fraction} exceeds 1"
        raise UsageError("--skip-text-fraction", both, "shares of the text phase that sum to at most 1")
    if args.d_model % args.n_heads:
        problem = f"{args.d_model} is not divisible by --n-heads {args.n_heads}"
        hint = f"e.g. --d-model {args.n_heads * max(1, args.d_model // args.n_heads)}"
        raise UsageError("--d-model", problem, "a width that the heads divide", hint)
    if args.pos_init == "gpt2" and (args.n_ctx > 1024 or args.d_model > min(args.n_ctx, 768)):
        problem = "gpt2 needs --n-ctx <= 1024 and --d-model <= min(n_ctx, 768) (GPT-2's W_pos is 1024 x 768), got"
        allowed = "smaller --n-ctx / --d-model, or another --pos-init"
        raise UsageError("--pos-init", f"{problem} {args.n_ctx} and {args.d_model}", allowed)
    if args.out is None:
        raise UsageError("--out", "is required", "a new folder for the model", "e.g. --out data/mini-gpt2-new")
    out_dir = check_out_folder(args.out)
    shipped = ORGANISM_DIR
    if out_dir.resolve() == shipped.resolve() and (shipped / "model.safetensors").exists() and not args.overwrite:
        hint = "or --out another folder, e.g. data/mini-gpt2-new"
        raise UsageError("--out", f"{args.out} is the shipped model", "pass --overwrite to replace it", hint)
    if args.threads:
        torch.set_num_threads(args.threads)
    own = [*INTS, *FLOATS, "pos_init", "skip_rule", "repeat_kind", "position_offsets", "seed"]
    cfg = MiniConfig(**{k: getattr(args, k) for k in own}, bf16=resolve_bf16(args.bf16, "cpu"))
    tok_dir = args.tokenizer_dir or None
    if tok_dir and not (Path(tok_dir) / "tokenizer.json").exists():
        raise UsageError("--tokenizer-dir", f"{tok_dir} has no tokenizer.json", "a model folder, or '' for a new BPE")
    train_docs, held_docs, source = training_documents(args.text, args.seed)
    print(f"training on {len(train_docs)} documents ({source}); held out: {len(held_docs)} WikiText-2 documents")
    out = Output.open(out_dir, "train_mini_gpt2", png=not args.no_png, force=args.force, adopt=args.overwrite)
    work = out_dir.with_name(out_dir.name + "-work")
    rec = train_mini_gpt2(train_docs, out.out_dir, cfg, work_dir=work, val_docs=held_docs, tokenizer_dir=tok_dir)
    for f in sorted(out.out_dir.iterdir()):  # the model, tokenizer and training record written by the trainer
        out.path(f.name)
    losses = {"train": tuple(zip(*rec["loss"])), "held-out": tuple(zip(*rec["val_loss"]))}  # (steps, losses)
    out.figure(line_figure(losses, "mini GPT-2 training loss", "step", "cross-entropy (nats)"), "training_loss")
    pr = rec["probes"]
    steps = [x["step"] for x in pr]
    mechanism = {
        "sharpest previous-token ratio (text)": (steps, [min(x["prev_ratio_text"], 1.0) for x in pr]),
        "best induction score": (steps, [x["induction"] for x in pr]),
    }
    out.figure(line_figure(mechanism, "the mechanism during training", "step", "ratio / score"), "mechanism")
    loss, minutes = rec["final_val_loss"], rec["seconds"] / 60
    print(f"held-out loss {loss:.3f} (perplexity {torch.tensor(loss).exp():.1f}) after {minutes:.1f} min")
    out.commit()
    if not args.keep_work:
        shutil.rmtree(work, ignore_errors=True)
        print(f"removed {work} (the checkpoint and tokenizer used to resume; --keep-work keeps it)")
    return 0
