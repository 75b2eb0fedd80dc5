"""Masking attention to the previous position in earlier layers disrupts the aggregator (GPT-2 post).

The command is built from the claim's declaration in ``gpt2_posheads.posts.gpt2_prev_heads.masking``; in any
folder, once installed:
``gpt2-posheads mask_prev_attention [options]`` or ``python -m gpt2_posheads mask_prev_attention [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("mask_prev_attention", sys.argv[1:]))
