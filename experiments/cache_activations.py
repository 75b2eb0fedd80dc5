"""Build the activation cache the tests and reports read (see gpt2_posheads.store.cache).

The command lives in the package (``gpt2_posheads.commands.cache_activations``); in any folder, once installed:
``gpt2-posheads cache_activations [options]`` or ``python -m gpt2_posheads cache_activations [options]``.
"""

import sys

from gpt2_posheads.commands import run

if __name__ == "__main__":
    sys.exit(run("cache_activations", sys.argv[1:]))
