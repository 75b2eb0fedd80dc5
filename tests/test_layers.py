"""The package's layers (``docs/architecture.md``) import only the layers below them, at module level or inside a
function: above all, the library (``model`` to ``posts``) never imports the command line (``gpt2_posheads.cli``), so
a notebook user gets the claims without argparse, output folders or console handling. Read from the source, so a
lazy import counts too."""

from __future__ import annotations

import ast

import pytest

from gpt2_posheads.model.paths import PACKAGE_DIR

ORDER = ("model", "analysis", "store", "claims", "report", "organism", "toy", "posts", "cli", "commands")
LIBRARY = ORDER[: ORDER.index("cli")]


def imported_modules(source: str, package: list[str]) -> list[str]:
    """Every module ``source`` imports (and every ``module.name`` it takes from one), relative imports resolved
    against ``package`` (e.g. ``["gpt2_posheads", "posts", "gpt2_prev_heads"]``)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out += [mod] + [f"{mod}.{a.name}" for a in node.names]
    return out


def is_cli(module: str) -> bool:
    return module == "gpt2_posheads.cli" or module.startswith("gpt2_posheads.cli.")


@pytest.mark.parametrize("layer", LIBRARY)
def test_the_library_never_imports_the_command_line(layer):
    offenders = {}
    for p in sorted((PACKAGE_DIR / layer).rglob("*.py")):
        package = ["gpt2_posheads", *p.relative_to(PACKAGE_DIR).parent.parts]
        found = [m for m in imported_modules(p.read_text(encoding="utf-8"), package) if is_cli(m)]
        if found:
            offenders[str(p.relative_to(PACKAGE_DIR))] = found
    assert not offenders, offenders


@pytest.mark.parametrize(
    "source, package",
    [
        ("def f():\n    from ...cli.heads import HeadDefault\n", ["gpt2_posheads", "posts", "gpt2_prev_heads"]),
        ("from .. import cli\n", ["gpt2_posheads", "analysis"]),
        ("import gpt2_posheads.cli.args\n", ["gpt2_posheads", "model"]),
    ],
)
def test_the_reader_finds_every_form_of_the_import(source, package):
    assert any(is_cli(m) for m in imported_modules(source, package))


@pytest.mark.parametrize("layer", ORDER)
def test_each_layer_imports_only_the_layers_below_it(layer):
    above = set(ORDER[ORDER.index(layer) + 1 :])
    offenders = {}
    for p in sorted((PACKAGE_DIR / layer).rglob("*.py")):
        package = ["gpt2_posheads", *p.relative_to(PACKAGE_DIR).parent.parts]
        found = [m for m in imported_modules(p.read_text(encoding="utf-8"), package) if m.split(".")[1:2] and
                 m.split(".")[0] == "gpt2_posheads" and m.split(".")[1] in above]  # fmt: skip
        if found:
            offenders[str(p.relative_to(PACKAGE_DIR))] = found
    assert not offenders, offenders
