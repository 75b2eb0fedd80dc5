"""A head atlas across models: every head's previous-token ratio and top offset, induction and duplicate-token

The command lives in the package (``gpt2_posheads.commands.head_atlas``); in any folder, once installed:
``gpt2-posheads head_atlas [options]`` or ``python -m gpt2_posheads head_atlas [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("head_atlas", sys.argv[1:]))
