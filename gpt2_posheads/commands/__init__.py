"""The command-line programs (``gpt2-posheads NAME``, or ``experiments/NAME.py`` in a checkout): every declared claim
script, and each module here (``main(argv)``), found through the package (:func:`commands`), never through a path.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from collections.abc import Sequence
from pathlib import Path


def commands() -> dict[str, str]:
    """``{command name: the first line of its help}``; a module's docstring is read without importing it (instant)."""
    from ..claims.catalogue import script, scripts

    out = {name: s.line for name, s in scripts().items()}
    for m in pkgutil.iter_modules(__path__):
        if m.name.startswith("_") or m.name in out:
            continue
        declared = script(m.name)  # a report: a claim script of no post's list
        path = Path(__path__[0]) / f"{m.name}.py"
        doc = declared.usage if declared else ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        out[m.name] = doc.strip().splitlines()[0] if doc.strip() else ""
    return dict(sorted(out.items()))


def normalize(name: str) -> str:
    """A command as typed: ``run-all`` and ``run_all.py`` are ``run_all``."""
    return name.removesuffix(".py").replace("-", "_")


def load(name: str):
    """Command ``name``'s program (``main(argv)``): its module, or one built from a claim script's declaration."""
    from ..claims.catalogue import script

    name = normalize(name)
    if name not in commands():
        raise KeyError(f"{name!r} is not a command; commands: {', '.join(commands())}")
    declared = script(name)
    if declared is not None and not declared.command:  # main(argv) as a module has, its help as __doc__
        from types import SimpleNamespace

        from ..cli.declared import run_declared

        return SimpleNamespace(main=lambda argv=None: run_declared(declared, argv), __doc__=declared.usage)
    return importlib.import_module(f"{__name__}.{name}")


def plugins_failed() -> bool:
    """Whether a module of ``$GPT2_POSHEADS_POSTS`` could not be imported, said in one ``error:`` line."""
    from ..claims.catalogue import PLUGINS_ENV
    from ..posts import PLUGIN_ERRORS

    if PLUGIN_ERRORS:
        importable = "module names importable from here or PYTHONPATH"
        print(f"error: ${PLUGINS_ENV}: {PLUGIN_ERRORS[0]}; {importable}", file=sys.stderr)
    return bool(PLUGIN_ERRORS)


def run(name: str, argv: Sequence[str] | None = None) -> int:
    """Run command ``name`` as a program does (:func:`~gpt2_posheads.cli.args.main_entry`); its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if plugins_failed():
        return 2
    from ..claims.catalogue import toy_scripts

    name = normalize(name)
    if name in toy_scripts() and not {"-h", "--help"} & set(argv):  # their first second loads torch: said at once
        print(f"{name}: loading torch and the toolkit", flush=True)
    from ..cli.args import main_entry

    code = main_entry(lambda a: load(name).main(a), argv)  # a stop signal while it imports is handled too
    return code if isinstance(code, int) and not isinstance(code, bool) else 0


def run_experiment(name: str, args: Sequence[str], env: dict[str, str] | None = None) -> int:
    """Run command ``name`` in a fresh ``python -m gpt2_posheads`` (with ``env`` added); its exit status. Stopped here,
    the child is terminated too and given time to drop its staged output and release its lock."""
    import os
    import subprocess

    name = normalize(name)
    if name not in commands():
        raise FileNotFoundError(name)
    # the package this process imported, first on the child's path: a checkout without an install runs itself
    package_parent = str(Path(__path__[0]).resolve().parents[1])
    path_env = os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, **(env or {}), "PYTHONPATH": path_env}
    child = subprocess.Popen([sys.executable, "-m", "gpt2_posheads", name, *args], env=env)
    try:
        return child.wait()
    except BaseException:
        child.terminate()  # SIGTERM: the child cleans up as it does on Ctrl-C
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
        raise
