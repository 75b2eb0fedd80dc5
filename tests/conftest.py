"""Shared fixtures: small GPT-2-architecture models built here (random or with hand-set heads)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
import torch

from gpt2_posheads.model.paths import ORGANISM_DIR, REPO_ROOT, SHARED_ENV, shared_dir

MINI_DIR = ORGANISM_DIR


def pytest_addoption(parser):
    parser.addoption(
        "--shared-dir", default=None, help="path to the shared/ data folder (GPT-2 W_pos, tokenizer, corpus)"
    )


def pytest_configure(config):
    p = config.getoption("--shared-dir")
    if p:
        os.environ[SHARED_ENV] = str(Path(p).resolve())
    torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def shared():
    root = shared_dir()
    if root is None:
        pytest.skip("shared/ data folder not given (pytest --shared-dir PATH or $GPT2_POSHEADS_SHARED)")
    return root


@pytest.fixture(scope="session")
def small_tokenizer():
    """A small real BPE tokenizer: the mini model's (4k vocab) when shipped, else GPT-2's from shared/."""
    if (MINI_DIR / "tokenizer.json").exists():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(MINI_DIR)
    if shared_dir() is not None:
        from gpt2_posheads import gpt2_tokenizer

        return gpt2_tokenizer()
    pytest.skip("no tokenizer available: neither data/mini-gpt2 nor shared/ is present")


def conv1d_zero_outputs(n_layers: int, d_model: int, layers=None) -> dict[str, torch.Tensor]:
    """HF parameter overrides that zero attention and MLP outputs of ``layers`` (default: all)."""
    layers = range(n_layers) if layers is None else layers
    sd = {}
    for l in layers:
        sd[f"transformer.h.{l}.attn.c_proj.weight"] = torch.zeros(d_model, d_model)
        sd[f"transformer.h.{l}.attn.c_proj.bias"] = torch.zeros(d_model)
        sd[f"transformer.h.{l}.mlp.c_proj.weight"] = torch.zeros(4 * d_model, d_model)
        sd[f"transformer.h.{l}.mlp.c_proj.bias"] = torch.zeros(d_model)
    return sd


HANDSET = dict(n_layers=2, n_heads=4, d_model=64, n_ctx=16)


def handset_state_dict(vocab_size: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Weights for a model whose residual stream is ``W_pos`` at every layer, with known heads.

    Token embeddings are zero and every block writes nothing, so each head reads
    ``LN(W_pos[p]) ~ 7.9 * e_p`` (positions one-hot in dims 0..15). Layer 0:
    head 0 attends to the previous position (query slot i reads dim i+1, key slot i reads dim i),
    head 1 to the current position (query = key = identity), head 2 uniformly (zero query), head 3
    away from the current position (query = -key): a self-suppressing head.
    Layer 1 keeps GPT-2's random N(0, 0.02) initialisation: nearly uniform heads.
    """
    c = HANDSET
    d, n_ctx, dh = c["d_model"], c["n_ctx"], c["d_model"] // c["n_heads"]
    sd = conv1d_zero_outputs(c["n_layers"], d)
    sd["transformer.wte.weight"] = torch.zeros(vocab_size, d)
    sd["transformer.wpe.weight"] = torch.eye(n_ctx, d)
    w = torch.zeros(d, 3 * d)
    for i in range(dh):
        if i + 1 < n_ctx:
            w[i + 1, 0 * dh + i] = scale  # head 0 query: slot i <- position i+1
        w[i, d + 0 * dh + i] = scale  # head 0 key: slot i <- position i
        w[i, 1 * dh + i] = scale  # head 1 query: identity
        w[i, d + 1 * dh + i] = scale  # head 1 key: identity
        w[i, 3 * dh + i] = -scale  # head 3 query: minus identity (suppresses its own position)
        w[i, d + 3 * dh + i] = scale  # head 3 key: identity
    sd["transformer.h.0.attn.c_attn.weight"] = w
    sd["transformer.h.0.attn.c_attn.bias"] = torch.zeros(3 * d)
    return sd


@pytest.fixture(scope="session")
def handset_dir(tmp_path_factory, small_tokenizer):
    from gpt2_posheads import make_random_model_dir

    out = tmp_path_factory.mktemp("handset")
    return make_random_model_dir(
        out, tokenizer=small_tokenizer, state_dict=handset_state_dict(len(small_tokenizer)), **HANDSET
    )


@pytest.fixture(scope="session")
def handset_model(handset_dir):
    from gpt2_posheads import load_model

    return load_model(handset_dir, device="cpu")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, small_tokenizer):
    from gpt2_posheads import make_random_model_dir

    return make_random_model_dir(
        tmp_path_factory.mktemp("tiny"), n_layers=3, n_heads=4, d_model=64, n_ctx=64, tokenizer=small_tokenizer, seed=1
    )


@pytest.fixture(scope="session")
def tiny_model(tiny_dir):
    from gpt2_posheads import load_model

    return load_model(tiny_dir, device="cpu")


EXPERIMENTS = REPO_ROOT / "experiments"


def load_script(name_or_path: str | Path):
    """A command (``gpt2_posheads.commands.<name>``) as a module, named as ``experiments/<name>.py`` or by name; its
    ``main`` is not run."""
    from gpt2_posheads.commands import load

    return load(Path(str(name_or_path)).stem)


def run_script(module_path: Path, argv: list[str]):
    """Call the ``main(argv)`` of the command that ``experiments/<name>.py`` runs."""
    return load_script(module_path).main(argv)


class Started:
    """Real processes started together, each awaited by the test that checks it. For processes that spend their time
    in a fresh interpreter's imports or in a wait: they overlap on a machine with more than one core, where one
    ``subprocess.run`` after another would not. Each result is what ``subprocess.run(..., capture_output=True,
    text=text)`` returns."""

    def __init__(self):
        self._procs: dict = {}

    def start(self, key, args: list[str], text: bool = True, **kwargs) -> None:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, **kwargs)
        self._procs[key] = (proc, time.perf_counter())

    def process(self, key) -> subprocess.Popen:
        """The process ``key`` itself, to talk to (its output pipes are open)."""
        return self._procs[key][0]

    def result(self, key, timeout: float | None = None) -> tuple[subprocess.CompletedProcess, float]:
        """The finished process ``key`` and the seconds from its start to when it was seen finished (at least its
        run time). ``timeout`` counts from its start, as ``subprocess.run``'s does: past it, TimeoutExpired."""
        proc, t0 = self._procs[key]
        left = None if timeout is None else max(0.0, timeout - (time.perf_counter() - t0))
        try:
            out, err = proc.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), time.perf_counter() - t0

    def stop(self) -> None:
        for proc, _ in self._procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


ARCHITECTURES = ("gpt2", "gpt-neo", "opt", "pythia", "llama")


def random_arch_dir(
    out: Path,
    arch: str,
    tokenizer,
    n_layers: int = 3,
    n_heads: int = 4,
    d_model: int = 64,
    n_ctx: int = 128,
    seed: int = 0,
) -> Path:
    """A random-weight local Hugging Face folder of ``arch`` (``transformers`` config classes) with ``tokenizer``:
    GPT-2, GPT-Neo (global and local attention layers), OPT (learned absolute positions), Pythia (GPT-NeoX, partial
    rotary, parallel attention and MLP), Llama (rotary, RMSNorm, grouped-query attention)."""
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        GPTNeoConfig,
        GPTNeoForCausalLM,
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
        OPTConfig,
        OPTForCausalLM,
    )

    V = len(tokenizer)
    common = dict(vocab_size=V, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    cfg, cls = {
        "gpt2": (
            GPT2Config(n_layer=n_layers, n_head=n_heads, n_embd=d_model, n_positions=n_ctx, **common),
            GPT2LMHeadModel,
        ),
        "gpt-neo": (
            GPTNeoConfig(
                num_layers=n_layers,
                num_heads=n_heads,
                hidden_size=d_model,
                max_position_embeddings=n_ctx,
                attention_types=[[["global", "local"], (n_layers + 1) // 2]]
                if n_layers % 2 == 0
                else [[["global", "local"], n_layers // 2], [["global"], 1]],
                window_size=16,
                **common,
            ),
            GPTNeoForCausalLM,
        ),
        "opt": (
            OPTConfig(
                num_hidden_layers=n_layers,
                num_attention_heads=n_heads,
                hidden_size=d_model,
                ffn_dim=4 * d_model,
                max_position_embeddings=n_ctx,
                word_embed_proj_dim=d_model,
                **common,
            ),
            OPTForCausalLM,
        ),
        "pythia": (
            GPTNeoXConfig(
                num_hidden_layers=n_layers,
                num_attention_heads=n_heads,
                hidden_size=d_model,
                intermediate_size=4 * d_model,
                max_position_embeddings=n_ctx,
                rotary_pct=0.25,
                **common,
            ),
            GPTNeoXForCausalLM,
        ),
        "llama": (
            LlamaConfig(
                num_hidden_layers=n_layers,
                num_attention_heads=n_heads,
                num_key_value_heads=n_heads // 2,
                hidden_size=d_model,
                intermediate_size=2 * d_model,
                max_position_embeddings=n_ctx,
                **common,
            ),
            LlamaForCausalLM,
        ),
    }[arch]
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def arch_dirs(tmp_path_factory, small_tokenizer) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("archs")
    return {a: random_arch_dir(root / a, a, small_tokenizer) for a in ARCHITECTURES}


# nanoGPT's Shakespeare character set: no digits but 3, no double quote
SHAKESPEARE = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


@pytest.fixture(scope="session")
def char_tokenizer():
    """A character-level tokenizer over the Shakespeare characters, BOS ``<|endoftext|>`` (65 + 1 tokens)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<|endoftext|>": 0, **{c: i + 1 for i, c in enumerate(SHAKESPEARE)}}
    t = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    t.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    t.decoder = decoders.Fuse()
    special = dict(bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    return PreTrainedTokenizerFast(tokenizer_object=t, **special)


@pytest.fixture(scope="session")
def bpe50_tokenizer():
    """A byte-pair tokenizer trained here to a 50-token vocabulary (no word of the post's is one token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    t = Tokenizer(models.BPE(unk_token="<unk>"))
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    text = [
        "the cat sat on the mat and the dog ran to the park " * 20,
        "a quick brown fox jumps over the lazy dog " * 10,
    ]
    t.train_from_iterator(text, trainers.BpeTrainer(vocab_size=50, special_tokens=["<|endoftext|>", "<unk>"]))
    tok = PreTrainedTokenizerFast(tokenizer_object=t, bos_token="<|endoftext|>", unk_token="<unk>")
    assert len(tok) == 50
    return tok


# ----- a local Hugging Face hub (tests/hubserver.py): the real clients talk to it through HF_ENDPOINT


@pytest.fixture(scope="session")
def hub(shared, tmp_path_factory):
    """A hub-protocol server on a free 127.0.0.1 port holding the standard content (``hubserver.standard_content``:
    ``gpt2`` as the GPT-2 stand-in, ``stas/openwebtext-10k`` with its loading script and parquet export, a gated
    repo and a repo whose weights stall). Built once per run; stopped at the end."""
    from hubserver import HubServer, standard_content

    server = HubServer()
    try:
        standard_content(server, tmp_path_factory.mktemp("hubserver"), shared)
        yield server
    finally:
        server.stop()


@pytest.fixture
def hub_env(hub, tmp_path):
    """The environment of a subprocess that uses ``hub``, with a fresh ``HF_HOME`` under ``tmp_path``."""
    return hub.env(tmp_path / "hf_home")


@pytest.fixture(autouse=True)
def _hub_faults_cleared(request):
    """Faults a test injects into ``hub`` end with the test (only tests that use ``hub`` start it)."""
    if "hub" not in request.fixturenames:
        yield
        return
    server = request.getfixturevalue("hub")
    yield
    server.clear_faults()
