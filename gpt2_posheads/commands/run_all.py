"""The main job: every claim script of every post, then results/index.html (verdicts side by side per model) and an
offline attention explorer per model.

    gpt2-posheads run_all                       # the compiled models, the trained organism, the toy posts
    gpt2-posheads run_all --models gpt2         # also real GPT-2 small (needs the Hugging Face hub)
    gpt2-posheads run_all --quick               # smoke test: toy claims 'not testable'

The GPT-2 post's scripts run on each model: by default route-gpt2 (weights set by hand to carry the post's route),
lookalike-wpos (the same behaviour from a head that reads W_pos) and mini-gpt2 (the trained organism, which takes the
toy post's route); compiled models are built first (seconds, deterministic). The organism report then shows the post's
story on route-gpt2 beside the organism. The toy scripts train their own models at settings that test every headline
claim. Every script runs in this process, in turn: each model loaded once, its prompts made once per option set, its
heads ranked once per prompts, so each measures the numbers it does alone. A failing script is reported and the others
still run. Ctrl-C stops the job and still rewrites the page (what finished, with when; the interrupted script and
those not run, marked). The run record is results/run_all.json ($GPT2_POSHEADS_RESULTS, set for the scripts: --out).

The page, the explorers and the run record change together or not at all: the explorers are staged in
results/.explorer.partial-<pid> until every summary has been read. What a job killed outright (kill -9) left, its lock
and staging folders, is removed by the next job, and said.
"""

import os
import shutil
import sys
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from unittest.mock import patch

import torch

from ..claims.catalogue import Command, Option, model_scripts, toy_scripts
from ..claims.record import recorded_fingerprint
from ..cli.args import DEVICE, NO_PNG, Terminated, exit_status, name_list, stopped_by
from ..cli.checks import check_device, check_hub_names, check_model_dirs, said_of
from ..cli.declared import parse
from ..cli.experiment import check_model_names, shared_setup
from ..cli.output import (
    RESULTS_ENV,
    acquire_lock,
    check_out_folder,
    now_iso,
    remove_dead_runs,
    results_root,
    write_json,
)
from ..model.loading import load_model
from ..model.paths import SHIPPED_MODELS, shipped_model_dir
from ..model.state import machine_description
from ..model.validation import UsageError
from ..report.explorer import write_explorer
from ..report.index import collect_summaries, write_index
from ..report.plotting import PNG_ENV, png_support
from . import run, run_experiment

SHIPPED = ("route-gpt2", "lookalike-wpos", "mini-gpt2")
REPORT = ("route-gpt2", "mini-gpt2")  # the organism report: this model, beside that one


MODELS_HELP = (
    "comma-separated models the GPT-2 post's scripts run on ('' for none): shipped models by name "
    f"({', '.join(SHIPPED_MODELS)}; offline, compiled ones built on first use) or Hugging Face hub names, e.g. gpt2 "
    "(needs the hub)"
)
OUT_HELP = "results folder (default: ./results): every script's results, the page, the explorers and the run record"
RESUME_HELP = (
    "run only what the last job (run_all.json in the results folder) did not finish, or finished with other options "
    "or on other weights (each said)"
)
COMMAND = Command(
    "run_all",
    usage=__doc__,
    options=(
        Option("--models", ",".join(SHIPPED), MODELS_HELP),
        Option("--model-dirs", "", "comma-separated local model folders too"),
        Option("--out", None, OUT_HELP),
        DEVICE,
        Option("--quick", False, "toy scripts as smoke tests (their claims: not testable)"),
        Option("--only", None, "comma-separated script names to run (default: all)"),
        NO_PNG,
        Option("--no-explorer", False, "skip the attention explorer pages"),
        Option("--resume", False, RESUME_HELP),
        Option("--processes", False, "each script in its own Python process (slower)"),
    ),
)


def main(argv=None):
    args = parse(COMMAND, argv)
    dirs = check_model_dirs(args.model_dirs)
    names = name_list(args.models)
    results = check_out_folder(args.out) if args.out else results_root()
    for m in [m for m in names if m in SHIPPED_MODELS]:
        with said_of("--models"):
            shipped_model_dir(m)  # a compiled model is built now, once, not by each script
    check_hub_names([m for m in names if m not in SHIPPED_MODELS])
    models = [["--model", m] for m in names] + [["--model-dir", d] for d in dirs]
    known = check_model_names(models)
    check_device(args.device)
    scripts = list(model_scripts() + toy_scripts())
    if args.only is not None:
        wanted = name_list(args.only, "--only", scripts, "script(s)", f"{args.only!r} names no script")
        scripts = [s for s in scripts if s in wanted]
    device = ["--device", args.device] if args.device else []
    jobs = []  # (script, model label or None, arguments)
    for name in scripts:
        toy = [(name, None, ["--quick"] if args.quick else [])]
        jobs += [(name, m[1], m + device) for m in models] if name in model_scripts() else toy
    if REPORT[0] in names and args.only is None:  # the post's story on the route model, beside the organism
        compare = ["--compare", str(shipped_model_dir(REPORT[1]))] if REPORT[1] in names else []
        jobs.append(("mini_gpt2_report", REPORT[0], ["--model", REPORT[0], "--skip-scripts", *compare, *device]))
    if not jobs:
        raise UsageError("--models", "no model and no toy script to run", "at least one model or script")
    if (results / "index.html").exists() and not (results / "run_all.json").exists():
        problem = f"{results} holds an index.html this toolkit did not write"
        raise UsageError("--out", problem, "a results folder", "another --out")
    made, lock = not results.exists(), None
    results.mkdir(parents=True, exist_ok=True)
    staging = results / f".explorer.partial-{os.getpid()}"  # this job's explorers, until the page is written
    try:
        lock = acquire_lock(results, "run_all")
        remove_dead_runs(results)  # a job killed outright left its lock and staging folders: removed, and said
        return run_jobs(args, results, jobs, models, known, staging=staging)
    finally:
        if lock is not None:
            shutil.rmtree(staging, ignore_errors=True)
            lock.unlink(missing_ok=True)
        if made and not any(results.iterdir()):  # a job stopped before it wrote anything leaves no empty folder
            results.rmdir()


def run_jobs(args, results: Path, jobs: list, models: list[list[str]], known: dict, staging: Path) -> int:
    """Run ``jobs`` (``(script, model label or None, arguments)``) into ``results``, the explorers of ``models`` into
    ``staging``, then :func:`finish`; the exit status. ``known``: :func:`.check_model_names`
    (kept in the record: the page shows one model given two ways as one column)."""
    child_env, no_png = {RESULTS_ENV: str(results.absolute())}, args.no_png  # every script writes under results
    if not no_png:  # decided once for every script (a bounded test export), passed on to each
        can, why = png_support()
        if can:
            child_env[PNG_ENV] = "ok"  # the scripts skip their own check
        else:
            print(f"note: figures are written as HTML only ({why}); every result and figure is still written")
            no_png = True
    record = {
        "started": now_iso(),
        "machine": machine_description(),
        "quick": args.quick,
        "models": [m[1] for m in models],
        "fingerprints": {m: fp for m, (_, fp) in known.items()},
        "jobs": [{"script": s, "model": m, "options": a, "status": "not run"} for s, m, a in jobs],
    }
    slug = {m: name for m, (name, _) in known.items()}
    done = finished_before(results, record, slug) if args.resume else {}
    failed, t_all = [], time.time()
    try:  # the scripts skip their own PNG check, in this process or their own; a caller keeps its environment
        with patch.dict(os.environ, child_env), nullcontext() if args.processes else shared_setup():
            for i, ((name, _, extra), rec) in enumerate(zip(jobs, record["jobs"]), start=1):
                extra = extra + (["--no-png"] if no_png else [])
                kept = done.get((name, rec["model"]))
                if kept is not None:
                    rec.update(kept)
                    print(f"=== [{i}/{len(jobs)}] {name} {rec['model'] or ''}: kept (finished {kept['started']})")
                    continue
                print(f"\n=== [{i}/{len(jobs)}] {name} {' '.join(extra)}", flush=True)
                t = time.time()
                rec.update(status="running", started=now_iso())
                rc = run_experiment(name, extra, env=child_env) if args.processes else run_here(name, extra)
                stop = stopped_by(rc)  # Ctrl-C, SIGTERM or SIGHUP: the script says which by its status
                rec.update(seconds=round(time.time() - t, 1), exit=rc, status="ok" if rc == 0 else "failed")
                if stop is not None:
                    rec.update(status="interrupted", signal=getattr(stop, "name", "SIGINT"))
                    print(f"=== {name}: interrupted ({rec['signal']}) in {rec['seconds']:.0f} s", flush=True)
                    raise stop
                print(f"=== {name}: {rec['status']} in {rec['seconds']:.0f} s", flush=True)
                failed += [name] if rc != 0 else []
            if not args.no_explorer:
                staging.mkdir(exist_ok=True)
                for _, name in models:
                    print(f"\n=== attention explorer: {name}", flush=True)
                    model = load_model(name, device=args.device)
                    write_explorer(model, staging / f"{slug[name]}.html", name)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM or SIGHUP (Terminated)
        for rec in record["jobs"]:
            if rec["status"] == "running":
                rec.update(status="interrupted", signal=e.name if isinstance(e, Terminated) else "SIGINT")
        print("\ninterrupted: the index page marks what did not finish", file=sys.stderr)
        return finish(results, record, staging, t_all, failed, exit_status(e))
    return finish(results, record, staging, t_all, failed, 1 if failed else 0)


def run_here(name: str, argv: list[str]) -> int:
    """Run script ``name`` here as its own process would: its exit status (a bug: printed with its traceback, 1). The
    thread count a script sets (the toys') is restored after it."""
    threads = torch.get_num_threads()
    try:
        return run(name, argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        torch.set_num_threads(threads)


def finished_before(results: Path, record: dict, slug: dict[str, str]) -> dict[tuple[str, str | None], dict]:
    """``{(script, model): its record}`` for each job the last run (``run_all.json``) finished whose results stand
    (:func:`rerun_reason`); every other finished job runs again, saying why in one line."""
    import json

    try:
        last = json.loads((results / "run_all.json").read_text(encoding="utf-8"))
        before = {(j["script"], j["model"]): j for j in last["jobs"] if j.get("status") == "ok"}
    except (OSError, ValueError, TypeError, KeyError):
        print(f"note: --resume: no run record in {results / 'run_all.json'} to resume from: every script runs")
        return {}
    done = {}
    for job in record["jobs"]:
        key = (job["script"], job["model"])
        if key not in before:
            continue
        why = rerun_reason(results / key[0] / (slug[key[1]] if key[1] else ""), before[key], job, record)
        if why is None:
            done[key] = {k: before[key][k] for k in ("status", "started", "seconds", "exit") if k in before[key]}
        else:
            print(f"{' '.join([key[0], *job['options'][:2]]) if key[1] else key[0]}: rerun: {why}")
    report = [j for j in record["jobs"] if j["script"] == "mini_gpt2_report"]
    if report and len(done) < len(record["jobs"]) and done.pop((report[0]["script"], report[0]["model"]), None):
        print("mini_gpt2_report: rerun: it reads the results of scripts that run again")
    print(f"resuming: {len(done)} of {len(record['jobs'])} scripts finished at {last.get('started', '?')} are kept")
    return done


def rerun_reason(folder: Path, last: dict, job: dict, record: dict) -> str | None:
    """Why ``job``, finished by the last run (``last``), runs again: its results in ``folder`` are gone, its options
    changed, or its model's weights are not those its results were measured on; ``None`` when they stand."""
    if not (folder / "summary.json").exists():
        return f"its results are gone ({folder})"
    if last.get("options") is None:
        return "the run record does not say its options"
    if last["options"] != job["options"]:
        return f"the options changed ({' '.join(last['options']) or 'none'} -> {' '.join(job['options']) or 'none'})"
    now, then = record["fingerprints"].get(job["model"]), recorded_fingerprint(folder)
    if now is not None and then != now:
        return f"the weights changed ({then} -> {now})" if then else "its results record no weights fingerprint"
    return None


def finish(results: Path, record: dict, staging: Path, t_all: float, failed: list[str], code: int) -> int:
    """Write the explorers (from ``staging``), the record and the page, all or none: every summary is read first, so
    one that cannot be read (a :class:`UsageError` naming it) changes nothing."""
    record.update(finished=now_iso(), seconds=round(time.time() - t_all, 1), interrupted=stopped_by(code) is not None)
    summaries = collect_summaries(results)
    written = []
    if staging.is_dir():
        (results / "explorer").mkdir(exist_ok=True)
        for page in sorted(staging.glob("*.html")):
            os.replace(page, results / "explorer" / page.name)
            written.append(results / "explorer" / page.name)
    write_json(results / "run_all.json", record)
    index = write_index(results, record, summaries)
    for path in written:
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    failures = f"; failed: {', '.join(failed)}" if failed else ""
    print(f"\nwrote {index} ({record['seconds'] / 60:.1f} min in all){failures}")
    return code
