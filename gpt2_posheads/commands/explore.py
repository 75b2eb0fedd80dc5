"""The attention explorer of a model, live on 127.0.0.1 (your prompts), or one offline page (--out).

Every head of a model on a prompt, under each intervention of the toolkit: a grid of all heads, the chosen head large
with its difference from clean, the raw scores and the diagonal profile.

  gpt2-posheads explore --model mini-gpt2              # serve; type prompts
  gpt2-posheads explore --model mini-gpt2 --out e.html  # one offline page

docs/explorer.md is the reader's guide.
"""

import errno
import socket
import sys
from pathlib import Path

from ..claims.catalogue import Command, Option
from ..cli.args import MODEL_OPTIONS, Terminated, exit_status
from ..cli.checks import precheck
from ..cli.declared import parse
from ..cli.experiment import model_from_args, model_label
from ..model.validation import UsageError

PORTS = "allowed 0 (any free port) or 1024..65535"
COMMAND = Command(
    "explore",
    usage=__doc__,
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


def main(argv=None) -> int:
    """A stop signal stops the server (status 0), or the start before it (one line, status 128 + its number)."""
    args = parse(COMMAND, argv, prog="python -m gpt2_posheads explore")
    try:
        precheck(args)  # the model folder and the device
        if args.out is None and not (args.port == 0 or 1024 <= args.port <= 65535):
            raise UsageError("--port", f"{args.port} is out of range", PORTS)
        if args.out is not None and not args.out.endswith((".html", ".htm")):
            html = "a path ending in .html"
            raise UsageError("--out", f"{args.out!r} is not an .html file", html, "e.g. --out explorer.html")
        from ..report.explorer import MIN_TOKENS, write_explorer
        from ..report.explorer_server import LiveExplorer, max_tokens, prompt_tokens, serve

        if args.out is None and args.port != 0:  # a port in use is refused before the model loads
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", args.port))
                except OSError as e:
                    what = "in use" if e.errno == errno.EADDRINUSE else "not available"
                    problem, hint = f"{args.port} is {what} on 127.0.0.1", "pick another --port, or --port 0"
                    raise UsageError("--port", problem, PORTS, hint) from None
        model = model_from_args(args)
        top = max_tokens(model) if args.max_tokens is None else args.max_tokens
        if not MIN_TOKENS <= top <= model.cfg.n_ctx:
            raise UsageError("--max-tokens", f"{top} is out of range", f"allowed {MIN_TOKENS}..{model.cfg.n_ctx}")
        given = enumerate(args.prompt or ())
        prompts = [(f"prompt {i + 1}", prompt_tokens(model, t, top, "--prompt"), None) for i, t in given] or None
        if args.out is not None:
            path = write_explorer(model, args.out, model_label(args), prompts=prompts)
            print(f"wrote {path} ({Path(path).stat().st_size / 1e6:.2f} MB); it opens offline, from file://")
            return 0
        return serve(LiveExplorer(model, model_label(args), prompts, limit=top), args.port)
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM or SIGHUP (main_entry makes them KeyboardInterrupt)
        by = f" ({e.name})" if isinstance(e, Terminated) else ""
        print(f"\nstopped{by} before the server started", file=sys.stderr)
        return exit_status(e)
