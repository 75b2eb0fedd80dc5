"""One page on a model organism: does it have the GPT-2 post's mechanism, and claim by claim, does the post's causal

The command lives in the package (``gpt2_posheads.commands.mini_gpt2_report``); in any folder, once installed:
``gpt2-posheads mini_gpt2_report [options]`` or ``python -m gpt2_posheads mini_gpt2_report [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("mini_gpt2_report", sys.argv[1:]))
