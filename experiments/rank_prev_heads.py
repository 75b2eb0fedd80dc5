"""Rank every head by how previous-token-like it is (GPT-2 post: "a taxonomy of previous-token heads").

The command is built from the claim's declaration in ``gpt2_posheads.posts.gpt2_prev_heads.ranking``; in any
folder, once installed:
``gpt2-posheads rank_prev_heads [options]`` or ``python -m gpt2_posheads rank_prev_heads [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("rank_prev_heads", sys.argv[1:]))
