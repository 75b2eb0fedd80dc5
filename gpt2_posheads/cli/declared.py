"""The command of a declared claim script, built from its declaration (:mod:`gpt2_posheads.claims.catalogue`).

``gpt2-posheads NAME`` for a script declared with ``@declare(...)`` is ``parse → check → setup → call → write``:
the options every model command takes, the prompt options at the declaration's defaults, ``--heads`` when it
measures heads, the declaration's own options; every check that needs no model before the model loads
(:func:`~gpt2_posheads.cli.experiment.setup`), then the declaration's ``prepare`` with the model, then the claim
function on the shared run, its console lines and its results folder (``ClaimResult.write``).
"""

from __future__ import annotations

import argparse

from ..claims.catalogue import Option, Script
from ..model.validation import NothingMeasuredError, positive
from ..posts.gpt2_prev_heads._run import ModelRun
from .args import add_prompt_args, add_submatrix_args, experiment_parser, float_list, int_list
from .engine import add_engine_args, check_engine_args
from .experiment import setup
from .heads import add_heads_arg


def add_option(p: argparse.ArgumentParser, o: Option) -> None:
    """``o`` on the parser: a switch, a choice, a comma-separated list (parsed after) or a typed value."""
    if o.type is None and o.default is False:
        p.add_argument(o.flag, action="store_true", help=o.help)
    elif o.parse:
        p.add_argument(o.flag, default=o.default, help=o.help)
    else:
        p.add_argument(o.flag, type=o.type, default=o.default, choices=o.choices, help=o.help)


def option_value(o: Option, value):
    """The value of ``o`` as given, checked (one ``error:`` line naming the flag and its range)."""
    if o.parse == "int_list":
        return int_list(o.flag, value, int(o.low or 0))
    if o.parse == "float_list":
        return float_list(o.flag, value, o.low)
    if o.parse == "layers":  # checked against the model's layers by the set-up (cli.checks), which passes them
        return value
    if o.type in (int, float) and o.low is not None and value is not None:
        return positive(o.flag, value, o.low, o.high, kind="an integer" if o.type is int else "a number")
    return value


def parser(script: Script) -> argparse.ArgumentParser:
    """The command's options: the model's, the prompts' (at the declaration's defaults), ``--heads``, the
    declaration's, the submatrix's and the engine's."""
    p = experiment_parser(script.usage)
    if script.n_prompts is not None:
        add_prompt_args(p, n_prompts=script.n_prompts, seq_len=script.seq_len)
    if script.heads is not None:
        add_heads_arg(p, script.heads)
    for o in script.options:
        add_option(p, o)
    if script.submatrix:
        add_submatrix_args(p)
    if script.engines:
        add_engine_args(
            p,
            script.engines,
            help="auto: hook-free fast path when it reproduces the model (checked), else TransformerLens hooks",
        )
    return p


def run_declared(script: Script, argv=None):
    """Run the command of ``script`` with ``argv`` (``main(argv)`` of a command module); returns the result."""
    args = parser(script).parse_args(argv)
    options = {o.dest: option_value(o, getattr(args, o.dest)) for o in script.options}  # each checked once
    kwargs = {o.keyword: options[o.dest] for o in script.options if o.keyword}
    if script.engines:
        check_engine_args(args)
        kwargs["engine"] = args.engine
    if script.prepare is not None:  # the checks that need no model, before it loads
        script.prepare(None, kwargs, args)
    exp = setup(
        args,
        f"{script.name}.py",
        heads=script.heads,
        prompts=script.n_prompts is not None,
        ranking=script.ranking,
        above_layer0=script.above_layer0,
        layer_final=script.layer_final,
    )
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


class DeclaredCommand:
    """The program of a declared claim script: ``main(argv)`` as a command module has, and its help as ``__doc__``."""

    def __init__(self, script: Script):
        self.script = script
        self.__doc__ = script.usage

    def main(self, argv=None):
        return run_declared(self.script, argv)
