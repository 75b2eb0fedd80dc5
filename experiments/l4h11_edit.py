"""Editing the aggregator's attention and scaling its output redirects induction (GPT-2 post, last section).

The command is built from the claim's declaration in ``gpt2_posheads.posts.gpt2_prev_heads.edit``; in any
folder, once installed:
``gpt2-posheads l4h11_edit [options]`` or ``python -m gpt2_posheads l4h11_edit [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("l4h11_edit", sys.argv[1:]))
