"""Sparse attention 4 (000): a previous-token head from positional embeddings.

The command is built from the claim's declaration in ``gpt2_posheads.posts.prev_token_toy.copying``; in any
folder, once installed:
``gpt2-posheads toy_prev_token [options]`` or ``python -m gpt2_posheads toy_prev_token [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("toy_prev_token", sys.argv[1:]))
