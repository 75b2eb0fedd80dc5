"""The nine post-004 scripts on a GPT-2-small-shaped compiled route model: each script's time, and the total.

    python benchmarks/bench_post_gpt2_small.py                     # 12 layers x 12 heads, d_model 768, n_ctx 1024
    python benchmarks/bench_post_gpt2_small.py --shape small       # 4 x 4, d_model 256, n_ctx 256: a quick check
    python benchmarks/bench_post_gpt2_small.py --shape small --n-ctx 1024 --n-vocab 50257
    python benchmarks/bench_post_gpt2_small.py --json times.json --keep models/

Builds the post's route in GPT-2 small's shape (``gpt2_posheads.organism.generator.gpt2_small_route``: 12 layers x 12
heads, d_model 768, d_mlp 3,072, n_ctx 1024, 50,257 embedding and unembedding rows; the route's heads in the first
six layers, the layers above inert or doing unrelated work): what a user with the hub runs on ``gpt2``, at the cost
of its shape, offline and with a known answer. It writes the model folder (a temporary one, or ``--keep DIR``),
prints the machine, loads the model, then runs the nine model scripts of the GPT-2 post
(``gpt2_posheads.claims.catalogue.model_scripts()``) in this process as the main job does: inside ``shared_setup()``
(the model loaded once, prompts and rankings shared between scripts), default options, ``--no-png``. Printed: the
time to build (generate and write) and to load the model, each script's seconds, exit status and verdict counts,
and the total. Target: the nine scripts within 10 minutes on 2 cores. ``--json PATH`` writes every time.
"""

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {
    "gpt2-small": {"n_layers": 12, "n_heads": 12, "d_model": 768, "n_ctx": 1024, "n_vocab": 50257},
    "small": {"n_layers": 4, "n_heads": 4, "d_model": 256, "n_ctx": 256, "n_vocab": 4096},
}
TARGET_S = 600  # the nine scripts on the GPT-2-small shape, 2 cores


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def verdicts_of(out: Path) -> dict[str, int]:
    """The verdict counts a script wrote to its ``summary.json`` (empty when it wrote none)."""
    try:
        return dict(json.loads((out / "summary.json").read_text(encoding="utf-8")).get("verdicts", {}))
    except (OSError, ValueError):
        return {}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", choices=sorted(SHAPES), default="gpt2-small", help="model shape (default gpt2-small)")
    for name in ("n_layers", "n_heads", "d_model", "n_ctx", "n_vocab"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None, help=f"{name} instead of the shape's")
    p.add_argument("--seed", type=int, default=0, help="the generated model's seed (default 0)")
    p.add_argument("--only", default=None, help="comma-separated scripts to run (default: all nine)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    p.add_argument("--keep", default=None, help="write the model folder and the scripts' results here and keep them")
    p.add_argument("--json", default=None, help="write the machine, the shape and every time here")
    args = p.parse_args(argv)

    from gpt2_posheads.claims.catalogue import model_scripts

    shape = dict(SHAPES[args.shape])
    shape.update({k: getattr(args, k) for k in shape if getattr(args, k) is not None})
    scripts = list(model_scripts())
    if args.only is not None:
        scripts = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in scripts if s not in model_scripts()]
        if unknown or not scripts:
            print(f"error: --only: {unknown or args.only!r}; allowed {', '.join(model_scripts())}", file=sys.stderr)
            return 2
    if args.threads is not None and not 1 <= args.threads <= 256:
        print(f"error: --threads: {args.threads} is out of range; allowed 1..256", file=sys.stderr)
        return 2

    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    from gpt2_posheads.cli.experiment import model_from_args, shared_setup
    from gpt2_posheads.commands.run_all import run_here
    from gpt2_posheads.model.state import describe_line, machine_description
    from gpt2_posheads.organism.generator import gpt2_small_route, write

    print(describe_line(), flush=True)
    try:
        t = time.perf_counter()
        g = gpt2_small_route(args.seed, **shape)
        generate_s = time.perf_counter() - t
    except ValueError as e:  # names the size out of range (n_layers, n_heads, d_model, n_ctx, n_vocab, seed)
        print(f"error: {e}", file=sys.stderr)
        return 2
    s = g.card["shape"]
    print(
        f"model: {s['n_layers']} layers x {s['n_heads']} heads, d_model {s['d_model']}, d_mlp {s['d_mlp']}, n_ctx "
        f"{s['n_ctx']}, {s['n_vocab']:,} tokens; route {g.card['route']}, aggregator {g.card['aggregator']} above "
        f"{', '.join(g.card['early_heads'])}",
        flush=True,
    )
    tmp = None if args.keep else tempfile.mkdtemp(prefix="bench-post-gpt2-small-")
    work = Path(args.keep or tmp)
    record: dict = {"machine": machine_description(), "shape": s, "seed": args.seed, "scripts": []}
    try:
        t = time.perf_counter()
        folder = write(g, work / f"post-route-{s['n_layers']}x{s['n_heads']}x{s['d_model']}-{s['n_ctx']}")
        write_s = time.perf_counter() - t
        del g
        record.update(generate_s=generate_s, write_s=write_s, build_s=generate_s + write_s, folder_mb=folder_mb(folder))
        print(
            f"build: {generate_s + write_s:.1f} s (generate {generate_s:.1f} s, write {write_s:.1f} s), "
            f"{record['folder_mb']:.0f} MB at {folder}",
            flush=True,
        )
        start = time.perf_counter()
        with shared_setup():  # as the main job: the model loaded once, prompts and rankings shared
            t = time.perf_counter()
            model_from_args(argparse.Namespace(model_dir=str(folder), model=None, device=None))
            record["load_s"] = time.perf_counter() - t
            print(f"load: {record['load_s']:.1f} s (torch threads {torch.get_num_threads()})", flush=True)
            for i, name in enumerate(scripts, start=1):
                out = work / "results" / name
                print(f"\n=== [{i}/{len(scripts)}] {name}", flush=True)
                t = time.perf_counter()
                rc = run_here(name, ["--model-dir", str(folder), "--out", str(out), "--no-png"])
                sec = time.perf_counter() - t
                record["scripts"].append({"script": name, "seconds": sec, "exit": rc, "verdicts": verdicts_of(out)})
                print(f"=== {name}: exit {rc} in {sec:.1f} s", flush=True)
        record["scripts_s"] = sum(r["seconds"] for r in record["scripts"])
        record["total_s"] = time.perf_counter() - start
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(describe_line())
    print(f"{'script':<22} {'seconds':>8} {'exit':>5}  verdicts")
    for r in record["scripts"]:
        counts = ", ".join(f"{k} {v}" for k, v in r["verdicts"].items()) or "none written"
        print(f"{r['script']:<22} {r['seconds']:>8.1f} {r['exit']:>5}  {counts}")
    print(f"{'scripts':<22} {record['scripts_s']:>8.1f}")
    print(f"build {record['build_s']:.1f} s, load {record['load_s']:.1f} s (not in the scripts' total)")
    print(f"total (load and scripts): {record['total_s']:.1f} s")
    if args.shape == "gpt2-small" and shape == SHAPES["gpt2-small"] and len(scripts) == len(model_scripts()):
        ok = record["scripts_s"] <= TARGET_S
        print(f"target: the nine scripts <= {TARGET_S} s on 2 cores: {'met' if ok else 'missed'}")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    failed = [r["script"] for r in record["scripts"] if r["exit"] != 0]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
