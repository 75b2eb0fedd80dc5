"""Sparse attention 1 (003): copying the current token with one attention layer (no positions)

The command lives in the package (``gpt2_posheads.commands.toy_sticky_plateau``); in any folder, once installed:
``gpt2-posheads toy_sticky_plateau [options]`` or ``python -m gpt2_posheads toy_sticky_plateau [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("toy_sticky_plateau", sys.argv[1:]))
