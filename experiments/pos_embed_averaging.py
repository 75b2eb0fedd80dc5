"""Averaging W_pos rows in groups barely matters (GPT-2 post, first section).

The command is built from the claim's declaration in ``gpt2_posheads.posts.gpt2_prev_heads.wpos_averaging``; in any
folder, once installed:
``gpt2-posheads pos_embed_averaging [options]`` or ``python -m gpt2_posheads pos_embed_averaging [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("pos_embed_averaging", sys.argv[1:]))
