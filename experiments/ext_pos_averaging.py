"""Averaging extended positional embeddings in groups of 10 hurts early previous-token heads much more

The command is built from the claim's declaration in ``gpt2_posheads.posts.gpt2_prev_heads.ext_averaging``; in any
folder, once installed:
``gpt2-posheads ext_pos_averaging [options]`` or ``python -m gpt2_posheads ext_pos_averaging [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("ext_pos_averaging", sys.argv[1:]))
