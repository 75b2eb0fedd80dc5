"""``python -m gpt2_posheads`` (or ``gpt2-posheads``): list the commands (each claim script by post), or run one.

gpt2-posheads                                        # list (python -m gpt2_posheads does the same)
gpt2-posheads rank_prev_heads --model route-gpt2     # a claim script on a shipped model (or --model-dir FOLDER)
gpt2-posheads run_all                                # the main job: every claim, then results/index.html
gpt2-posheads explore --model mini-gpt2              # the attention explorer, live on 127.0.0.1
"""

from __future__ import annotations

import difflib
import sys

from .commands import commands, normalize, plugins_failed, run

LAST = ("explore",)  # listed after the other tools


def listing() -> str:
    """Every command: the claim scripts by post with the claims each judges, then the tools."""
    from .claims.catalogue import posts, script_claims

    found = commands()
    lines = [__doc__.strip().splitlines()[0], "", "claims, by post (each also a function: gpt2_posheads.posts):"]
    for post in posts():
        lines.append(f"  {post.key}: {post.title}")
        for name in post.scripts:
            lines.append(f"    {name:<22} {found.get(name, '')}")
            if script_claims().get(name):
                lines.append(f"    {'':<22} claims: {', '.join(script_claims()[name])}")
    scripts = {s for p in posts() for s in p.scripts}
    tools = sorted((n for n in found if n not in scripts), key=lambda n: n in LAST)
    lines += ["", "tools:", *(f"  {name:<24} {found[name]}" for name in tools)]
    lines += ["", "run one: gpt2-posheads NAME [options]  (or python -m gpt2_posheads NAME; NAME --help: its options)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if plugins_failed():
        return 2
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    name, found = normalize(argv[0]), sorted(commands(), key=lambda n: n in LAST)
    if name not in found:
        near = difflib.get_close_matches(name, found, n=1)
        hint = f"did you mean {near[0]}?" if near else "gpt2-posheads lists them"
        print(f"error: command: {argv[0]!r} is unknown; allowed {', '.join(found)}; {hint}", file=sys.stderr)
        return 2
    try:
        return run(name, argv[1:])
    except SystemExit as e:  # a mistake (one line already said) or --help: its status
        return e.code


if __name__ == "__main__":
    sys.exit(main())
