"""The package's face: what `import gpt2_posheads` loads, and names that moved keep working with a warning."""

import subprocess
import sys
import warnings

import pytest

import gpt2_posheads


def test_import_loads_what_a_claim_needs_and_no_more():
    """The organism's compiler, trainer and probe, the explorer and the activation store load on first use."""
    code = (
        "import sys, gpt2_posheads\n"
        "heavy = ('gpt2_posheads.organism.compiled', 'gpt2_posheads.organism.train', 'gpt2_posheads.organism.probe',"
        " 'gpt2_posheads.report.explorer', 'gpt2_posheads.store.cache')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
        "gpt2_posheads.Explorer, gpt2_posheads.PosheadsCache\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == ""
    assert out[1] == "gpt2_posheads.report.explorer,gpt2_posheads.store.cache"


def test_a_compiled_model_is_built_when_only_the_package_was_imported(tmp_path, monkeypatch):
    """The compiler registers itself when a compiled model is first asked for by name."""
    from gpt2_posheads.model import paths

    monkeypatch.setenv(paths.MODELS_ENV, str(tmp_path))
    monkeypatch.setattr(paths, "_BUILDER", {})
    folder = paths.shipped_model_dir("lookalike-none")
    assert (folder / "config.json").is_file() and paths._BUILDER


def test_a_moved_name_warns_and_is_the_new_one():
    from gpt2_posheads.analysis.diagonals import prev_token_ranking

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = gpt2_posheads.rank_prev_heads
    assert old is prev_token_ranking
    assert "prev_token_ranking" in str(caught[0].message) and caught[0].category is DeprecationWarning
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = gpt2_posheads.no_such_name
