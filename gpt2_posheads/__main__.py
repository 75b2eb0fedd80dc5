"""``python -m gpt2_posheads`` (or ``gpt2-posheads``): list the commands (each claim script by post), run one,
or explore a model.

gpt2-posheads                                        # list (python -m gpt2_posheads does the same)
gpt2-posheads rank_prev_heads --model route-gpt2     # a claim script on a shipped model (or --model-dir FOLDER)
gpt2-posheads run_all                                # the main job: every claim, then results/index.html
gpt2-posheads explore --model mini-gpt2              # the attention explorer, live on 127.0.0.1
"""

from __future__ import annotations

import difflib
import sys

from .claims.catalogue import Command, Option
from .cli.args import MODEL_OPTIONS
from .commands import commands, normalize, plugins_failed, run

EXPLORE = Command(
    "explore",
    usage=(
        "Every head of a model on a prompt, under each intervention of the toolkit: a grid of all heads, the\n"
        "chosen head large with its difference from clean, the raw scores and the diagonal profile.\n\n"
        "  gpt2-posheads explore --model mini-gpt2              # serve; type prompts\n"
        "  gpt2-posheads explore --model mini-gpt2 --out e.html  # one offline page\n\n"
        "docs/explorer.md is the reader's guide."
    ),
    options=(
        *MODEL_OPTIONS,
        Option("--port", 8765, "port on 127.0.0.1; 0 picks a free one", int),
        Option(
            "--prompt",
            None,
            "an opening prompt (repeat for several; default: natural text, the post's repeat-string prompt and a "
            "repeated random sequence)",
            action="append",
        ),
        Option("--max-tokens", None, "longest prompt taken (default: what the model's size allows)", int),
        Option("--out", None, "write one self-contained offline page to this .html file and exit"),
    ),
)
EXPLORE_LINE = "the attention explorer of a model, live on 127.0.0.1 (your prompts), or one offline page (--out)"


def explore(argv: list[str]) -> int:
    """``explore``: a mistake is one ``error:`` line and status 2; a stop signal stops the server (status 0), or the
    start before it (one line, status 128 + the signal's number)."""
    from .cli.args import Terminated, exit_status, stop_on_signals
    from .cli.checks import precheck
    from .cli.declared import parse
    from .cli.experiment import model_from_args, model_label
    from .model.validation import UsageError

    try:
        args = parse(EXPLORE, argv, prog="python -m gpt2_posheads explore")
    except SystemExit as e:  # --help, or an argparse error already printed
        return e.code if isinstance(e.code, int) else 2
    restore = stop_on_signals()  # SIGTERM and SIGHUP stop the server as Ctrl-C does
    stopped = None
    try:
        precheck(args)  # the model folder and the device
        if args.out is None and not (args.port == 0 or 1024 <= args.port <= 65535):
            raise UsageError("--port", f"{args.port} is out of range", "allowed 0 (any free port) or 1024..65535")
        if args.out is not None and not args.out.endswith((".html", ".htm")):
            raise UsageError(
                "--out", f"{args.out!r} is not an .html file", "a path ending in .html", "e.g. --out explorer.html"
            )
        from .report.explorer import MIN_TOKENS
        from .report.explorer_server import LiveExplorer, max_tokens, prompt_tokens, serve

        if args.out is None:  # a port in use is refused before the model loads
            _check_port_free(args.port)
        model = model_from_args(args)
        label = model_label(args)
        top = max_tokens(model) if args.max_tokens is None else args.max_tokens
        if not MIN_TOKENS <= top <= model.cfg.n_ctx:
            raise UsageError("--max-tokens", f"{top} is out of range", f"allowed {MIN_TOKENS}..{model.cfg.n_ctx}")
        given = enumerate(args.prompt or ())
        prompts = [(f"prompt {i + 1}", prompt_tokens(model, t, top, "--prompt"), None) for i, t in given] or None
        if args.out is not None:
            from pathlib import Path

            from .report.explorer import write_explorer

            path = write_explorer(model, args.out, label, prompts=prompts)
            print(f"wrote {path} ({Path(path).stat().st_size / 1e6:.2f} MB); it opens offline, from file://")
            return 0
        return serve(LiveExplorer(model, label, prompts, limit=top), args.port)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        stopped = e
        by = f" ({e.name})" if isinstance(e, Terminated) else ""
        print(f"\nstopped{by} before the server started", file=sys.stderr)
        return exit_status(e)
    finally:
        if restore is not None:
            restore(stopped)


def _check_port_free(port: int) -> None:
    """A one-line error now when ``port`` on 127.0.0.1 cannot be bound."""
    import errno
    import socket

    from .model.validation import UsageError

    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as e:
            busy = e.errno == errno.EADDRINUSE
            raise UsageError(
                "--port",
                f"{port} is {'in use' if busy else 'not available'} on 127.0.0.1",
                "allowed 0 (any free port) or 1024..65535",
                "pick another --port, or --port 0",
            ) from None


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
    lines += ["", "tools:"]
    lines += [f"  {name:<24} {line}" for name, line in found.items() if name not in scripts]
    lines.append(f"  {EXPLORE.name:<24} {EXPLORE_LINE}")
    lines += ["", "run one: gpt2-posheads NAME [options]  (or python -m gpt2_posheads NAME; NAME --help: its options)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if plugins_failed():
        return 2
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    name = normalize(argv[0])
    if name == EXPLORE.name:
        return explore(argv[1:])
    found = commands()
    if name not in found:
        near = difflib.get_close_matches(name, [*found, EXPLORE.name], n=1)
        print(
            f"error: command: {argv[0]!r} is unknown; allowed {', '.join([*found, EXPLORE.name])}"
            + (f"; did you mean {near[0]}?" if near else "; gpt2-posheads lists them"),
            file=sys.stderr,
        )
        return 2
    return run(name, argv[1:])


if __name__ == "__main__":
    sys.exit(main())
