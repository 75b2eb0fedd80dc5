"""The catalogue: every post this toolkit tests and every claim script of each, filled by the declarations.

A claim script is declared once, beside its measurement, in its post's module: ``register_post(Post(...))``, its
claims (:func:`~gpt2_posheads.claims.verdicts.declare_claim`), and its function decorated with :func:`declare`.
Everything else (the command, its ``--help``, the command list, the main job, the page) reads the declaration; every
other command (a :class:`Command`) and a researcher's own module (named in ``$GPT2_POSHEADS_POSTS``) declare the same
way. This module imports nothing that measures, so every layer can read it.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PLUGINS_ENV = "GPT2_POSHEADS_POSTS"  # comma-separated modules of a researcher's own declared claims


@dataclass(frozen=True)
class Post:
    """A post this toolkit tests."""

    key: str  # its seed's number
    title: str
    author: str
    date: str
    seed: str  # the seed file
    subject: str  # its package: gpt2_posheads.posts.<subject>
    needs_model: bool  # its scripts run on a transformer (else they train toy models)
    order: int = 99  # its place in the reading order

    @property
    def scripts(self) -> tuple[str, ...]:  # in the post's reading order
        mine = [s for s in _SCRIPTS.values() if s.post.key == self.key and not s.report]
        return tuple(s.name for s in sorted(mine, key=lambda s: s.order))


@dataclass(frozen=True)
class Option:
    """One option of a command; its range and list checks run as soon as the options are parsed, before the model
    loads."""

    flag: str  # ``--group-size``; without dashes: positional
    default: Any
    help: str
    type: type | None = None  # int, float or str; ``None`` with a ``False`` default: a switch
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    parse: str = ""  # "int_list"/"float_list" (comma-separated, each >= low) or "layers" (checked by the set-up)
    kwarg: str | None = ""  # the claim function's keyword ("": the flag's; None: read by Script.console alone)
    action: str = ""  # "append" (once per value) or "negatable" (a --no- form)

    dest = property(lambda self: self.flag.lstrip("-").replace("-", "_"))
    keyword = property(lambda self: self.dest if self.kwarg == "" else self.kwarg)


@dataclass(frozen=True)
class Command:
    """A command of ``gpt2-posheads``: its name, its help (``usage``; its first line is the command list's), options."""

    name: str
    usage: str = field(default="", kw_only=True)
    options: tuple[Option, ...] = field(default=(), kw_only=True)

    line = property(lambda self: (self.usage.strip().splitlines() or [""])[0])


@dataclass(frozen=True)
class Script(Command):
    """A claim script: the command of a post's claim function and the claims it judges (in the order it writes them).
    Its options: the model's, the prompts', ``--heads``, its own, the submatrix's and the engine's (a toy post's: the
    training options of every toy post, then its own). ``report``: a report over the post's scripts' results with
    claims of its own (the organism report: in :func:`claims`, not in ``Post.scripts``; the main job runs it after
    them, the page gives it its own table)."""

    post: Post = None
    function: Callable = None
    claims: tuple[str, ...] = ()
    n_prompts: int | None = None  # its natural-text prompts' defaults (None: it makes its own inputs)
    seq_len: int = 256
    heads: Any = None  # its --heads default (a HeadDefault)
    submatrix: bool = False  # it shows a --start/--size submatrix
    engines: tuple[str, ...] = ()  # its --engine choices
    ranking: bool = True  # the set-up ranks the heads first
    above_layer0: bool = False  # --heads in layer 0 are refused
    layer_final: bool = False  # --layer may name the final residual stream
    takes: tuple[str, ...] = ()  # "seed", "progress": set-up values passed as keywords
    report: bool = False
    prepare: Callable | None = None  # (model, kwargs, args): checks beyond ranges (UsageError naming the option),
    # called with model=None before the model loads and again with it
    console: Callable | None = None  # (result, options): what the command prints
    command: bool = False  # run by its own module in gpt2_posheads.commands
    order: int = 99  # its place in the post's reading order

    def __post_init__(self):
        unknown = set(self.takes) - {"seed", "progress"}
        if unknown:
            raise ValueError(f"takes: {sorted(unknown)} of script {self.name!r}; allowed: 'seed', 'progress'")


_POSTS: dict[str, Post] = {}
_SCRIPTS: dict[str, Script] = {}


def register_post(post: Post) -> Post:
    """Add ``post`` to the catalogue (again with the same values: nothing changes)."""
    known = _POSTS.get(post.key)
    if known is not None and known != post:
        raise ValueError(f"post: {post.key!r} is declared twice with different values ({known.title!r})")
    _POSTS[post.key] = post
    return post


def declare(post: Post, name: str, **spec) -> Callable[[Callable], Callable]:
    """Decorate a claim function to declare it as script ``name`` of ``post`` (the fields of :class:`Script`;
    ``claims`` as keys or specs); the function gets ``.script``, and checks its arguments and holds its model's lock
    (:func:`~gpt2_posheads.model.state.measures_caller_model`, applied where it is not yet)."""

    def register(fn: Callable) -> Callable:
        if not hasattr(fn, "__wrapped__"):
            from ..model.state import measures_caller_model  # imported here: the catalogue itself measures nothing

            fn = measures_caller_model(fn)
        register_post(post)
        claims = tuple(getattr(c, "key", c) for c in spec.pop("claims", ()))
        script = Script(name, post, fn, claims, **spec)
        known = _SCRIPTS.get(name)
        if known is not None and known.function.__module__ != fn.__module__:
            raise ValueError(f"script: {name!r} is declared twice ({known.function.__module__} and {fn.__module__})")
        _SCRIPTS[name] = script
        fn.script = script
        return fn

    return register


def posts() -> tuple[Post, ...]:  # in reading order
    return tuple(sorted(_POSTS.values(), key=lambda p: (p.order, p.key)))


def scripts() -> dict[str, Script]:
    """``{name: declaration}`` of every claim script, post by post in reading order."""
    return {name: _SCRIPTS[name] for p in posts() for name in p.scripts}


script = _SCRIPTS.get  # (name) -> its Script, None for a command that is not a claim script


def model_scripts() -> tuple[str, ...]:  # the claim scripts that run on a transformer
    return tuple(name for name, s in scripts().items() if s.post.needs_model)


def toy_scripts() -> tuple[str, ...]:  # the claim scripts that train their own toy models
    return tuple(name for name, s in scripts().items() if not s.post.needs_model)


def script_claims() -> dict[str, tuple[str, ...]]:
    """``{model script: the keys of the claims it judges, in the order it writes them}``."""
    return {name: s.claims for name, s in scripts().items() if s.post.needs_model}


# a claim as its post declares it: the ``script`` that judges it, the post's sentence (``claim``), its rule's text at
# the post's own settings and its ``role`` (``""`` for a toy post's claim)
DeclaredClaim = namedtuple("DeclaredClaim", "key post script claim rule role")


def claims() -> dict[str, DeclaredClaim]:
    """``{key: DeclaredClaim}`` of every claim every script declares, post by post in reading order (a record's key
    with settings, ``plateau_near_V/2 (V=4 seed=0)``, is the claim before `` (``). A key a script names without
    declaring it (judged inline) is listed with its post and script alone."""
    from .verdicts import CLAIMS

    out = {}
    reports = [s for s in _SCRIPTS.values() if s.report]
    for s in [*scripts().values(), *reports]:
        for key in s.claims:
            spec = CLAIMS[key].at() if key in CLAIMS else None
            said = (spec.claim, spec.rule.text, spec.role) if spec else ("", "", "")
            out[key] = DeclaredClaim(key, s.post, s.name, *said)
    return out
