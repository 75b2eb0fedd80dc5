"""The 3-D PCA helix of W_pos and of the extended positional embeddings at a layer (GPT-2 post).

The command lives in the package (``gpt2_posheads.commands.pos_embed_helix``); in any folder, once installed:
``gpt2-posheads pos_embed_helix [options]`` or ``python -m gpt2_posheads pos_embed_helix [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("pos_embed_helix", sys.argv[1:]))
