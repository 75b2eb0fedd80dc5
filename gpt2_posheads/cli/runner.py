"""Finding and running the experiment scripts (one command per claim), each in a fresh process."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from ..model.paths import REPO_ROOT

EXPERIMENTS = REPO_ROOT / "experiments"


def list_experiments() -> dict[str, str]:
    """``{script name: first line of its docstring}`` for every script in ``experiments/``."""
    out = {}
    for p in sorted(EXPERIMENTS.glob("*.py")):
        if p.name.startswith("_"):
            continue
        doc = ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or ""
        out[p.stem] = doc.strip().splitlines()[0] if doc.strip() else ""
    return out


def run_experiment(name: str, args: list[str], check: bool = False, env: dict[str, str] | None = None) -> int:
    """Run ``experiments/<name>.py`` with ``args`` (and ``env`` added to this process's environment) in a fresh Python
    process; its exit status (130 when it was interrupted, 143 when terminated). Interrupted or terminated here, the
    child is terminated too and given time to drop its staged output and release its lock before this raises."""
    path = EXPERIMENTS / f"{name}.py"
    if not path.exists():
        raise FileNotFoundError(name)
    path_env = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    child = subprocess.Popen(
        [sys.executable, str(path), *args], env={**os.environ, **(env or {}), "PYTHONPATH": path_env}
    )
    try:
        code = child.wait()
    except BaseException:
        child.terminate()  # SIGTERM: the child cleans up as it does on Ctrl-C
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
        raise
    if check and code:
        raise subprocess.CalledProcessError(code, [str(path), *args])
    return code
