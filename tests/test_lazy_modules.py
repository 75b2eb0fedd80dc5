"""`import gpt2_posheads` loads what a claim needs: no module of the organism, the explorer or the store."""

import subprocess
import sys

LAZY = ("gpt2_posheads.organism", "gpt2_posheads.report.explorer", "gpt2_posheads.store")


def test_import_loads_no_organism_explorer_or_store_module():
    """A fresh interpreter (a subprocess), so that no other test's imports count."""
    code = (
        "import sys, gpt2_posheads\n"
        f"lazy = {LAZY!r}\n"
        "print(','.join(sorted(m for m in sys.modules if any(m == p or m.startswith(p + '.') for p in lazy))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
