"""Sparse attention 1 (003): copying the current token with one attention layer (no positions)

The command is built from the claim's declaration in ``gpt2_posheads.posts.sticky_plateau.plateau``; in any
folder, once installed:
``gpt2-posheads toy_sticky_plateau [options]`` or ``python -m gpt2_posheads toy_sticky_plateau [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("toy_sticky_plateau", sys.argv[1:]))
