"""Run every claim script and write results/index.html: one table of every claim with its verdict.

    python experiments/run_all.py --model-dir data/mini-gpt2 --quick    # a few minutes on 2 CPU cores
    python experiments/run_all.py --model-dir data/mini-gpt2            # full toy runs: much longer
    python experiments/run_all.py --model gpt2                          # real GPT-2 small (needs the hub)

GPT-2 scripts run on the given model; toy scripts need no model (--quick makes them smoke tests, whose
claims are all 'not testable'). A failing script is reported and the others still run.
"""
import sys
import time

from gpt2_posheads.cli.common import Parser, _Formatter, check_device, check_model_dir, main_entry
from gpt2_posheads.cli.runner import GPT2_SCRIPTS, TOY_SCRIPTS, run_experiment, write_index
from gpt2_posheads.model.validation import UsageError


def main(argv=None):
    p = Parser(description=__doc__, formatter_class=_Formatter)
    p.add_argument("--model", default="gpt2", help="Hugging Face hub name of the model")
    p.add_argument("--model-dir", default=None, help="local Hugging Face-format model directory, e.g. data/mini-gpt2")
    p.add_argument("--device", default=None, help="torch device: cpu, cuda, cuda:N")
    p.add_argument("--quick", action="store_true", help="toy scripts as smoke tests (their claims: not testable)")
    p.add_argument("--only", default=None, help="comma-separated script names to run (default: all)")
    p.add_argument("--no-png", action="store_true", help="HTML figures only")
    args = p.parse_args(argv)
    check_model_dir(args.model_dir)
    check_device(args.device)
    scripts = list(GPT2_SCRIPTS + TOY_SCRIPTS)
    if args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in scripts]
        if unknown:
            raise UsageError("--only", f"unknown script(s) {unknown}", f"allowed {', '.join(scripts)}")
        scripts = wanted
    model_args = ["--model-dir", args.model_dir] if args.model_dir else ["--model", args.model]
    if args.device:
        model_args += ["--device", args.device]
    failed = []
    for i, name in enumerate(scripts, start=1):
        extra = model_args if name in GPT2_SCRIPTS else (["--quick"] if args.quick else [])
        if args.no_png:
            extra = extra + ["--no-png"]
        print(f"\n=== [{i}/{len(scripts)}] {name} {' '.join(extra)}", flush=True)
        t = time.time()
        rc = run_experiment(name, extra)
        print(f"=== {name}: {'ok' if rc == 0 else f'exit {rc}'} in {time.time() - t:.0f} s", flush=True)
        if rc != 0:
            failed.append(name)
        if rc == 130:
            break
    index = write_index()
    print(f"\nwrote {index}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main_entry(main))
