"""The catalogue: every post this toolkit tests and every claim script of each, filled by the declarations.

A claim script is declared once, beside its measurement, in its post's module, by decorating its function::

    POST = register_post(Post("004", "The positional embedding matrix and ...", author=..., date=..., seed=...,
                              subject="gpt2_prev_heads", needs_model=True, order=0))

    MASK_DISRUPTS = post_claim("mask_disrupts", "masking attention to p-1 ... disrupts the head",
                               "L4H11 visibly disrupted", predicate("held if ...", _drops_half), ROUTE)

    @declare(POST, "mask_prev_attention", claims=(MASK_DISRUPTS,), usage=__doc__, n_prompts=8, heads=HEADS,
             options=(Option("--every", MASK_EVERY, "mask queries p with p %% every == 0", int, low=2),))
    def mask_prev_attention(model=None, prompts=None, heads=None, *, every=MASK_EVERY, run=None): ...

Everything else reads the declaration: the command ``gpt2-posheads mask_prev_attention`` and its ``--help``
(:func:`gpt2_posheads.cli.declared.parse` builds them from ``usage``, the prompt defaults, ``heads`` and ``options``),
the command list, the main job's list of scripts, the page's sections and rows, the claims a script's results must
hold. A claim script is one kind of :class:`Command`; every other command (the main job, the tools, ``explore``)
is a ``Command`` declared in its module, its options stated the same way.
A researcher's own module declares its claims the same way; importing it registers them (for the command line and
the main job, name it in ``$GPT2_POSHEADS_POSTS``: :data:`PLUGINS_ENV`).

This module holds only the catalogue's data and its lookups: it imports nothing that measures, so every layer can
read it. The declarations fill it when :mod:`gpt2_posheads.posts` is imported (``import gpt2_posheads`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PLUGINS_ENV = "GPT2_POSHEADS_POSTS"  # comma-separated modules of a researcher's own declared claims


@dataclass(frozen=True)
class Post:
    """A post this toolkit tests: its seed's number (``key``), title, author, date, seed file, the subject its
    package is named by (``gpt2_posheads.posts.<subject>``), whether its scripts run on a transformer
    (``needs_model``; False: they train their own toy models) and its place in the reading order."""

    key: str
    title: str
    author: str
    date: str
    seed: str
    subject: str
    needs_model: bool
    order: int = 99

    @property
    def scripts(self) -> tuple[str, ...]:
        """The post's claim scripts, in its reading order."""
        mine = [s for s in _SCRIPTS.values() if s.post.key == self.key and not s.report]
        return tuple(s.name for s in sorted(mine, key=lambda s: s.order))


@dataclass(frozen=True)
class Option:
    """One option of a command, stated where the command is declared: ``flag`` (``--group-size``; a name without
    dashes is positional), its default and its help, as ``--help`` shows them.

    ``type`` int, float or str; ``None`` with a ``False`` default makes a switch. ``low``/``high``: the range an int
    or float is checked against as soon as the options are parsed, before the model loads (one ``error:`` line
    otherwise). ``parse``: ``"int_list"`` or ``"float_list"`` for a comma-separated list (checked, each >= ``low``);
    ``"layers"`` for comma-separated layers, checked against the model's by the set-up, which passes the checked
    tuple. ``action``: ``"append"`` for an option given once per value, ``"negatable"`` for a switch with a ``--no-``
    form. ``kwarg``: a claim script's keyword for it ("": the flag's name, ``--group-size`` -> ``group_size``;
    ``None``: an option of the command alone, e.g. how many rows it prints, which :attr:`Script.console` reads).
    """

    flag: str
    default: Any
    help: str
    type: type | None = None
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    parse: str = ""
    kwarg: str | None = ""
    action: str = ""

    @property
    def dest(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def keyword(self) -> str | None:
        return self.dest if self.kwarg == "" else self.kwarg


@dataclass(frozen=True)
class Command:
    """A command of ``gpt2-posheads``: its name, its help (``usage``: its first line is the command list's) and its
    options, each stated (:func:`gpt2_posheads.cli.declared.parse` parses them, the same for every command)."""

    name: str
    usage: str = field(default="", kw_only=True)
    options: tuple[Option, ...] = field(default=(), kw_only=True)

    @property
    def line(self) -> str:
        """The first line of its help: what the command list says of it."""
        text = self.usage.strip()
        return text.splitlines()[0] if text else ""


@dataclass(frozen=True)
class Script(Command):
    """A claim script: the command of a post's claim function, the claims it judges (in the order it writes them) and
    what the command needs; its options are the model's, the prompts', ``--heads``, its own, the submatrix's and the
    engine's (a toy post's: the training options of every toy post, then its own).

    ``n_prompts``/``seq_len``: the defaults of the natural-text prompts it measures on (``n_prompts=None``: it makes
    its own inputs). ``heads``: the :class:`~gpt2_posheads.analysis.heads.HeadDefault` of its ``--heads``.
    ``submatrix``: it shows a ``--start``/``--size`` submatrix. ``engines``: the engines of its ``--engine``.
    ``ranking``/``above_layer0``/``layer_final``: the set-up's (the heads ranked first; ``--heads`` in layer 0
    refused; a ``--layer`` may name the final residual stream). ``takes``: the set-up's values the function takes
    as keywords — ``"seed"`` (the prompts' ``--seed``) and ``"progress"`` (a command shows progress bars).
    ``report``: a report over the post's claim scripts' results with claims of its own (the organism report): its
    claims are in :func:`claims`, but it is none of the post's claim scripts (``Post.scripts``: the main job runs it
    after them, the page gives it a table of its own).
    ``prepare(model, kwargs, args)``: the command's checks and adjustments beyond the options' ranges, on the
    function's keywords (``UsageError`` naming the option), called with ``model=None`` before the model loads and
    again with the model. ``console(result, options)``: what the command prints beside the results folder.
    ``command``: the command is a module of :mod:`gpt2_posheads.commands` (its own flow) rather than run from this
    declaration. ``order``: its place in the post's reading order (the command list, the main job and the page
    follow it).
    """

    post: Post = None
    function: Callable = None
    claims: tuple[str, ...] = ()
    n_prompts: int | None = None
    seq_len: int = 256
    heads: Any = None
    submatrix: bool = False
    engines: tuple[str, ...] = ()
    ranking: bool = True
    above_layer0: bool = False
    layer_final: bool = False
    takes: tuple[str, ...] = ()
    report: bool = False
    prepare: Callable | None = None
    console: Callable | None = None
    command: bool = False
    order: int = 99

    def __post_init__(self):
        unknown = set(self.takes) - {"seed", "progress"}
        if unknown:
            raise ValueError(f"takes: {sorted(unknown)} of script {self.name!r}; allowed: 'seed', 'progress'")


_POSTS: dict[str, Post] = {}
_SCRIPTS: dict[str, Script] = {}


def register_post(post: Post) -> Post:
    """Add ``post`` to the catalogue (again with the same values: nothing changes) and return it."""
    known = _POSTS.get(post.key)
    if known is not None and known != post:
        raise ValueError(f"post: {post.key!r} is declared twice with different values ({known.title!r})")
    _POSTS[post.key] = post
    return post


def declare(post: Post, name: str, **spec) -> Callable[[Callable], Callable]:
    """Decorate a claim function to declare it as script ``name`` of ``post`` (the fields of :class:`Script`;
    ``claims`` the claims it judges, as keys or as the declared claims themselves); returns the function, with its
    declaration as ``.script``. Every claim function checks its arguments and holds its model's lock while it runs
    (:func:`~gpt2_posheads.model.state.measures_caller_model`, applied here to one not decorated with it yet)."""

    def register(fn: Callable) -> Callable:
        if not hasattr(fn, "__wrapped__"):
            from ..model.state import measures_caller_model  # imported here: the catalogue itself measures nothing

            fn = measures_caller_model(fn)
        register_post(post)
        # a claim may be declared by its spec (``claims.gpt2_post.post_claim``) or by its key alone
        claims = tuple(getattr(c, "key", c) for c in spec.pop("claims", ()))
        script = Script(name, post, fn, claims, **spec)
        known = _SCRIPTS.get(name)
        if known is not None and known.function.__module__ != fn.__module__:
            raise ValueError(f"script: {name!r} is declared twice ({known.function.__module__} and {fn.__module__})")
        _SCRIPTS[name] = script
        fn.script = script
        return fn

    return register


def posts() -> tuple[Post, ...]:
    """Every declared post, in reading order."""
    return tuple(sorted(_POSTS.values(), key=lambda p: (p.order, p.key)))


def scripts() -> dict[str, Script]:
    """``{name: declaration}`` of every claim script, post by post in reading order."""
    return {name: _SCRIPTS[name] for p in posts() for name in p.scripts}


def script(name: str) -> Script | None:
    """The declaration of claim script ``name``; ``None`` for a command that is not a claim script."""
    return _SCRIPTS.get(name)


def script_post() -> dict[str, Post]:
    return {name: s.post for name, s in scripts().items()}


def model_scripts() -> tuple[str, ...]:
    """The claim scripts that run on a transformer, in reading order."""
    return tuple(name for name, s in scripts().items() if s.post.needs_model)


def toy_scripts() -> tuple[str, ...]:
    """The claim scripts that train their own toy models, in reading order."""
    return tuple(name for name, s in scripts().items() if not s.post.needs_model)


def script_claims() -> dict[str, tuple[str, ...]]:
    """``{model script: the keys of the claims it judges, in the order it writes them}``."""
    return {name: s.claims for name, s in scripts().items() if s.post.needs_model}


@dataclass(frozen=True)
class DeclaredClaim:
    """A claim as its post declares it: its ``key``, its ``post``, the ``script`` that judges it, the post's sentence
    (``claim``), its rule's text at the post's own settings (``rule``) and its ``role`` (``"route"``,
    ``"describes"``; ``""`` for a toy post's claim)."""

    key: str
    post: Post
    script: str
    claim: str
    rule: str
    role: str


def claims() -> dict[str, DeclaredClaim]:
    """``{key: DeclaredClaim}`` of every claim every script declares, post by post in reading order. A record whose
    key adds its settings (``plateau_near_V/2 (V=4 seed=0)``, a ``--robustness`` grid's ``(C=16)``) is the claim of
    the key before the first `` (``. A key a script names without declaring it (a claim judged inline, by
    :func:`~gpt2_posheads.claims.verdicts.judge`) is listed with its post and script alone."""
    from .verdicts import CLAIMS  # the declarations themselves (plain data, as this module)

    out = {}
    reports = [s for s in _SCRIPTS.values() if s.report]
    for s in [*scripts().values(), *reports]:
        for key in s.claims:
            spec = CLAIMS[key].at() if key in CLAIMS else None  # a script may name a claim it judges inline
            said = (spec.claim, spec.rule.text, spec.role) if spec else ("", "", "")
            out[key] = DeclaredClaim(key, s.post, s.name, *said)
    return out
