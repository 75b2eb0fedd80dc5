"""``python -m gpt2_posheads`` (or ``gpt2-posheads``): list the experiments, or run one by name.

python -m gpt2_posheads                                   # list
python -m gpt2_posheads rank_prev_heads --model-dir data/mini-gpt2
python -m gpt2_posheads run_all --model-dir data/mini-gpt2 --quick
"""

from __future__ import annotations

import difflib
import sys

from .cli.runner import list_experiments, run_experiment


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    experiments = list_experiments()
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(__doc__.strip().splitlines()[0] + "\n\nexperiments:")
        for name, line in experiments.items():
            print(f"  {name:<22} {line}")
        print("\nrun one: python -m gpt2_posheads NAME [options]   (NAME --help for its options)")
        return 0
    name = argv[0].removesuffix(".py")
    if name not in experiments:
        near = difflib.get_close_matches(name, list(experiments), n=1)
        print(
            f"error: experiment: {name!r} is unknown; allowed {', '.join(experiments)}"
            + (f"; did you mean {near[0]}?" if near else ""),
            file=sys.stderr,
        )
        return 2
    return run_experiment(name, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
