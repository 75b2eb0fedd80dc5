"""Extended positional embeddings against W_pos, layer by layer (GPT-2 post: "Concept: extended

The command is built from the claim's declaration in ``gpt2_posheads.posts.gpt2_prev_heads.extended``; in any
folder, once installed:
``gpt2-posheads ext_pos_vs_wpe [options]`` or ``python -m gpt2_posheads ext_pos_vs_wpe [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("ext_pos_vs_wpe", sys.argv[1:]))
