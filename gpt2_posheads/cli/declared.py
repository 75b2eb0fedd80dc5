"""Every command's options, parsed and range-checked by one function from its declaration (one ``error:`` line before
anything else happens), and the run of a declared claim script: ``parse → check → setup → call → write``.
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import fields

from ..claims.catalogue import Command, Option, Script
from ..model.validation import NothingMeasuredError, positive
from ..posts.gpt2_prev_heads._run import ModelRun
from .args import MODEL_OPTIONS, SUBMATRIX_OPTIONS, Parser, float_list, int_list, output_options, prompt_options
from .experiment import check_engine_args, engine_options, open_output, setup


def toy_options() -> tuple[Option, ...]:
    """The training options of every toy post's command (:class:`~gpt2_posheads.toy.posts.ToyRun`'s)."""
    from ..toy.posts import BATCH_SIZE, INIT_STD, LR, MAX_DEFAULT_WORKERS, ROBUSTNESS_SEEDS

    quick = "a few hundred steps and fewer settings: a smoke test whose claims are 'not testable'"
    workers = f"(default: one per thread, at most {MAX_DEFAULT_WORKERS}; 1 trains in this process)"
    w_o = "(the posts' model has none: embedding, one attention layer, unembedding)"
    return (
        Option("--steps", None, "training steps", int),
        Option("--quick", False, quick),
        Option("--init-std", INIT_STD, "std of the N(0, s^2) initialisation (nanoGPT: 0.02)", float),
        Option("--lr", LR, "Adam learning rate", float),
        Option("--batch-size", BATCH_SIZE, "sequences per step", int),
        Option("--seeds", 1, "seeds per setting", int),
        Option("--threads", None, "CPU threads in all (default: every core)", int, low=1),
        Option("--workers", None, f"processes that train groups of models at once {workers}", int),
        Option("--out-proj", False, f"add an attention output matrix W_O {w_o}"),
        Option("--fresh", False, "ignore finished runs in <out>/runs and train everything again"),
        Option(
            "--robustness",
            False,
            "also run the headline claims over a grid of the settings the posts do not state (lr x {0.3, 1, 3}, batch "
            "{128, 256}, init std {0.02, 1.0}, W_O off/on) and --robustness-seeds seeds: a 'held in k of n' table and "
            "figure (much longer than the default run)",
        ),
        Option("--robustness-seeds", ROBUSTNESS_SEEDS, "seeds per setting of --robustness", int),
    )


def command_options(command: Command) -> list[Option]:
    """Every option of ``command`` in ``--help`` order: a model script's are the model's, the output's, the prompts',
    ``--heads``, its own, the submatrix's and the engine's; a toy post's the output's and :func:`toy_options`, each
    it states again (its ``--steps``) replaced in place."""
    if not isinstance(command, Script):
        return list(command.options)
    if not command.post.needs_model:  # each option the script states again replaces the toys' in its place
        mine = {o.flag: o for o in command.options}
        return [mine.pop(o.flag, o) for o in output_options() + toy_options()] + list(mine.values())
    opts = [*MODEL_OPTIONS, *output_options()]
    if command.n_prompts is not None:
        opts += prompt_options(command.n_prompts, command.seq_len)
    if command.heads is not None:
        opts.append(Option("--heads", None, command.heads.help()))
    opts += [*command.options, *(SUBMATRIX_OPTIONS if command.submatrix else ())]
    auto = "auto: hook-free fast path when it reproduces the model (checked), else TransformerLens hooks"
    return opts + list(engine_options(command.engines, auto) if command.engines else ())


def _add(p: argparse.ArgumentParser, o: Option) -> None:
    """``o`` on the parser (a list option is parsed after: :func:`option_value`)."""
    if not o.flag.startswith("-"):
        return p.add_argument(o.flag, help=o.help)
    kw = {"append": dict(action="append"), "negatable": dict(action=argparse.BooleanOptionalAction)}.get(o.action)
    if kw is None and o.type is None and o.default is False:
        return p.add_argument(o.flag, action="store_true", help=o.help)
    if kw is None and not o.parse:
        kw = dict(type=o.type, choices=o.choices)
    p.add_argument(o.flag, default=o.default, help=o.help, **(kw or {}))


def option_value(o: Option, value):
    """The value of ``o`` as given, checked (one ``error:`` line naming the flag and its range)."""
    if o.parse == "int_list":
        return int_list(o.flag, value, int(o.low or 0))
    if o.parse == "float_list":
        return float_list(o.flag, value, o.low)
    if o.type in (int, float) and o.low is not None and value is not None:
        return positive(o.flag, value, o.low, o.high, kind="an integer" if o.type is int else "a number")
    return value  # a "layers" option is checked against the model's layers by the set-up (cli.checks)


def parse(command: Command, argv=None, prog: str | None = None) -> argparse.Namespace:
    """``argv`` parsed by ``command``'s options, each checked (a list option's value is the parsed list)."""
    p, opts = Parser(description=command.usage, prog=prog), command_options(command)
    for o in opts:
        _add(p, o)
    args = p.parse_args(argv)
    for o in opts:
        setattr(args, o.dest, option_value(o, getattr(args, o.dest)))
    return args


def run_declared(script: Script, argv=None):
    """Run ``script``'s command: the checks that need no model before it loads (:func:`.experiment.setup`),
    ``prepare`` with the model, the claim function, its console lines, its results folder; returns the result."""
    args = parse(script, argv)
    if not script.post.needs_model:
        return run_toy(script, args)
    options = {o.dest: getattr(args, o.dest) for o in script.options}
    kwargs = {o.keyword: options[o.dest] for o in script.options if o.keyword}
    if script.engines:
        check_engine_args(args)
        kwargs["engine"] = args.engine
    if script.prepare is not None:  # the checks that need no model, before it loads
        script.prepare(None, kwargs, args)
    shape = {k: getattr(script, k) for k in ("heads", "ranking", "above_layer0", "layer_final")}
    exp = setup(args, f"{script.name}.py", prompts=script.n_prompts is not None, **shape)
    if exp.prompts is not None:
        print(f"{exp.label}: {len(exp.prompts)} prompts x {exp.prompts.shape[1]} tokens from {exp.source}")
    if script.heads is not None:
        kwargs["heads"] = exp.heads
    if script.submatrix:
        kwargs.update(start=args.start, size=args.size)
    if "seed" in script.takes:
        kwargs["seed"] = args.seed
    if "progress" in script.takes:  # a command shows its progress
        kwargs["progress"] = True
    for o in script.options:
        if o.parse == "layers" and o.keyword:
            kwargs[o.keyword] = list(exp.checked.layers) if exp.checked.layers is not None else None
    if script.prepare is not None:
        script.prepare(exp.model, kwargs, args)
    try:
        result = script.function(**kwargs, run=ModelRun.of(exp))
    except NothingMeasuredError as e:  # its tables are written, every claim not testable (main_entry says why)
        for name, table in getattr(getattr(e, "result", None), "tables", {}).items():
            exp.out.csv(table, name)
        raise
    if script.console is not None:
        script.console(result, options)
    result.write(exp.out, exp.describe())
    return result


def run_toy(script: Script, args) -> None:
    """Run a toy post's claim function with its own options and every :class:`~gpt2_posheads.toy.posts.ToyRun` one
    (``steps``/``workers`` None: the post's defaults); ``runs/`` of the output keeps finished runs for the next run
    (kept if this one fails, emptied by ``--fresh``)."""
    import torch

    from ..toy.posts import ToyRun

    ToyRun.check(vars(args), lambda field: "--" + field.replace("_", "-"))
    if args.threads:
        torch.set_num_threads(args.threads)
    out = open_output(args, script.name, per_model=False, quick=args.quick)
    args.runs_dir = out.persistent_dir("runs")
    if args.fresh:
        shutil.rmtree(args.runs_dir)
        args.runs_dir.mkdir()
    training = {f.name: getattr(args, f.name) for f in fields(ToyRun)}
    own = {o.keyword: getattr(args, o.dest) for o in script.options if o.keyword and o.keyword not in training}
    script.function(**own, **training).write(out)
