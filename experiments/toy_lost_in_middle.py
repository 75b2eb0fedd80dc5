"""Sparse attention 7 (002): stacked causal attention without positional embeddings retrieves the

The command is built from the claim's declaration in ``gpt2_posheads.posts.lost_in_middle.retrieval``; in any
folder, once installed:
``gpt2-posheads toy_lost_in_middle [options]`` or ``python -m gpt2_posheads toy_lost_in_middle [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("toy_lost_in_middle", sys.argv[1:]))
