"""The route of the sharpest previous-token head read from the weights, with no data run (GPT-2 post).

The command lives in the package (``gpt2_posheads.commands.weight_route``); in any folder, once installed:
``gpt2-posheads weight_route [options]`` or ``python -m gpt2_posheads weight_route [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("weight_route", sys.argv[1:]))
