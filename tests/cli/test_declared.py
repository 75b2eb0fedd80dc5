"""A claim declared once, in a researcher's own module, is a command, has its help, writes its results folder and
is a row of the page, with no other file touched: the command list, the command, the main job and the page all read
the declaration (gpt2_posheads.claims.catalogue)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpt2_posheads.claims.catalogue import PLUGINS_ENV, model_scripts, posts, script, script_claims, scripts


def readme_claim() -> str:
    """The README's "Your own claim" module, as printed."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Your own claim") :]
    return section[section.index("```python\n") + len("```python\n") : section.index("```\n", 10)]


MODULE = readme_claim()


@pytest.fixture
def plugin(tmp_path):
    """The module in a folder of its own, named in $GPT2_POSHEADS_POSTS; the environment a subprocess needs."""
    (tmp_path / "my_claims.py").write_text(MODULE, encoding="utf-8")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, PLUGINS_ENV: "my_claims", "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}
    return tmp_path, env


def cli(env, cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "gpt2_posheads", *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_the_posts_own_declarations_make_the_catalogue():
    """Every claim script is declared by its function, in its post's package, with the claims it judges."""
    assert [p.key for p in posts()] == ["004", "003", "001", "000", "002"]
    assert model_scripts()[0] == "rank_prev_heads" and len(model_scripts()) == 10
    for name, s in scripts().items():
        assert (
            s.name == name
            and s.function.script is s
            and s.function.__module__.startswith(f"gpt2_posheads.posts.{s.post.subject}")
        )
    assert script_claims()["mask_prev_attention"] == ("mask_disrupts",)
    assert script("mask_prev_attention").options[1].default == 5  # the post's period, from the claims' one home
    assert script("run_all") is None


def test_a_declared_claim_is_a_command_a_results_folder_and_a_row_of_the_page(plugin):
    tmp, env = plugin
    listed = cli(env, tmp)
    assert listed.returncode == 0, listed.stderr
    assert "900: My note on sharp heads" in listed.stdout
    assert "sharp_mass" in listed.stdout and "claims: sharp_head_mass" in listed.stdout

    helped = cli(env, tmp, "sharp_mass", "--help")
    assert helped.returncode == 0 and "The sharpest head attends to the previous token." in helped.stdout
    assert "--threshold" in helped.stdout and "--n-prompts" in helped.stdout

    bad = cli(env, tmp, "sharp_mass", "--threshold", "2")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --threshold: 2.0 is out of range")

    # the same measurement judged by the rule at two thresholds from the declared option: held, then not held
    verdicts = {}
    for threshold in ("0.5", "0.999"):
        out = tmp / f"at{threshold}"
        r = cli(env, tmp, "sharp_mass", "--model", "route-gpt2", "--out", str(out), "--threshold", threshold)
        assert r.returncode == 0, r.stderr
        summary = json.loads((out / "summary.json").read_text())
        (claim,) = summary["claims"]
        assert claim["key"] == "sharp_head_mass" and summary["script"] == "sharp_mass"
        verdicts[threshold] = (claim["verdict"], summary["sharpest_prev_mass"])
    mass = verdicts["0.5"][1]
    assert 0.5 <= mass < 0.999 and verdicts["0.999"][1] == mass  # route-gpt2's sharp head: near 1, not all of it
    assert verdicts["0.5"][0] == "held" and verdicts["0.999"][0] == "not held"

    job = cli(env, tmp, "run_all", "--models", "route-gpt2", "--only", "sharp_mass", "--no-png", "--no-explorer")
    assert job.returncode == 0, job.stderr
    page = (tmp / "results" / "index.html").read_text()
    assert "My note on sharp heads" in page
    assert "the sharpest head attends mostly to the previous token" in page


def test_a_module_that_cannot_be_imported_is_one_line_before_anything_runs(tmp_path):
    (tmp_path / "broken_claims.py").write_text("raise RuntimeError('half written')\n", encoding="utf-8")
    env = {**os.environ, PLUGINS_ENV: "broken_claims", "PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    for args in ((), ("rank_prev_heads", "--model", "route-gpt2")):
        r = cli(env, tmp_path, *args)
        assert r.returncode == 2 and not (tmp_path / "results").exists()
        assert r.stderr.strip() == (
            "error: $GPT2_POSHEADS_POSTS: 'broken_claims' cannot be imported (RuntimeError: half written); "
            "module names importable from here or PYTHONPATH"
        )


def test_what_a_command_passes_is_declared_not_read_from_the_signature():
    """A declaration names the set-up's values its function takes (``takes``) and its layers option
    (``parse="layers"``); nothing reads the function's signature, and an unknown name is refused."""
    from gpt2_posheads.claims.catalogue import Script

    assert script("prev_head_sources").takes == ("seed", "progress")
    assert [o.flag for o in script("mask_prev_attention").options if o.parse == "layers"] == ["--layers"]
    with pytest.raises(ValueError, match="takes: \\['layer'\\]"):
        Script("x", posts()[0], print, takes=("layer",))


def test_every_command_is_one_declaration_parsed_by_one_function(capsys):
    """Each command — claim script, toy post, report, tool, ``explore`` — is a declared Command whose options its
    ``--help`` shows and whose defaults its parse gives; no command module builds a parser of its own."""
    import importlib

    from gpt2_posheads import __main__
    from gpt2_posheads.claims.catalogue import Command
    from gpt2_posheads.cli.declared import command_options, parse
    from gpt2_posheads.commands import commands, load

    package = Path(__main__.__file__).parent
    for path in [package / "__main__.py", *sorted((package / "commands").glob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        assert "add_argument" not in text and "ArgumentParser" not in text and "Parser(" not in text, path.name
    module = lambda name: importlib.import_module(f"gpt2_posheads.commands.{name}")  # noqa: E731
    declared = {name: script(name) or module(name).COMMAND for name in commands()}
    assert all(isinstance(c, Command) for c in declared.values())
    for name, command in declared.items():
        opts = command_options(command)
        with pytest.raises(SystemExit) as stop:
            load(name).main(["--help"])
        assert stop.value.code == 0, name
        shown = capsys.readouterr().out
        assert opts and all(o.flag in shown for o in opts), name
        given = parse(command, ["x" for o in opts if not o.flag.startswith("-")])  # the positionals: a value each
        for o in opts:
            if o.flag.startswith("-") and not o.parse:
                assert getattr(given, o.dest) == o.default, (name, o.flag)
