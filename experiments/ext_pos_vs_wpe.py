"""Extended positional embeddings against W_pos, layer by layer (GPT-2 post: "Concept: extended

The command lives in the package (``gpt2_posheads.commands.ext_pos_vs_wpe``); in any folder, once installed:
``gpt2-posheads ext_pos_vs_wpe [options]`` or ``python -m gpt2_posheads ext_pos_vs_wpe [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("ext_pos_vs_wpe", sys.argv[1:]))
