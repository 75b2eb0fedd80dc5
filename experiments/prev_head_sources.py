"""Which upstream heads make a head previous-token, and through query or key? (GPT-2 post: L4H11 aggregates

The command is built from the claim's declaration in ``gpt2_posheads.posts.gpt2_prev_heads.sources``; in any
folder, once installed:
``gpt2-posheads prev_head_sources [options]`` or ``python -m gpt2_posheads prev_head_sources [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("prev_head_sources", sys.argv[1:]))
