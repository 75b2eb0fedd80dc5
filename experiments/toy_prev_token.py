"""Sparse attention 4 (000): a previous-token head from positional embeddings.

The command lives in the package (``gpt2_posheads.commands.toy_prev_token``); in any folder, once installed:
``gpt2-posheads toy_prev_token [options]`` or ``python -m gpt2_posheads toy_prev_token [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("toy_prev_token", sys.argv[1:]))
