"""Loading on one copy of the weights gives TransformerLens's own processed weights: the checkpoint read into memory
(not mapped) and processed one layer at a time equals ``boot_transformers`` + ``enable_compatibility_mode``."""

import types
import weakref

import pytest
import torch
from safetensors.torch import save_file

from gpt2_posheads import load_model
from gpt2_posheads.model import memory

from conftest import ARCHITECTURES


def transformerlens_processing(folder):
    """TransformerLens's own loading: the checkpoint mapped, the whole state dict processed at once."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoTokenizer

    bridge = TransformerBridge.boot_transformers(
        str(folder), device="cpu", dtype=torch.float32, tokenizer=AutoTokenizer.from_pretrained(folder)
    )
    bridge.enable_compatibility_mode(disable_warnings=True)
    return bridge.eval()


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_processed_weights_equal_transformerlens_processing(arch, arch_dirs, monkeypatch):
    """Every processed parameter to 1e-6 and the logits, on GPT-2, GPT-Neo, OPT, Pythia and Llama; the layerwise
    pass is the one that ran (not TransformerLens's whole-model pass as a fallback)."""
    ran = []
    layerwise = memory.process_weights_layerwise
    monkeypatch.setattr(memory, "process_weights_layerwise", lambda *a, **k: (layerwise(*a, **k), ran.append(1)))
    ours = load_model(arch_dirs[arch], device="cpu")
    assert ran == [1]
    ref = transformerlens_processing(arch_dirs[arch])
    a, b = ref.state_dict(), ours.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-6, rtol=0, msg=k)
    toks = torch.randint(0, ref.cfg.d_vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        torch.testing.assert_close(ours(toks), ref(toks), atol=1e-6, rtol=0)


def test_where_the_split_does_not_apply_transformerlens_processes_the_whole(tiny_dir, tiny_model, monkeypatch):
    monkeypatch.setattr(memory, "_layerwise_supported", lambda *a: "a model this test declares unsplittable")
    model = load_model(tiny_dir, device="cpu")
    a, b = tiny_model.state_dict(), model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_read_checkpoint_reads_every_dtype_exactly(tmp_path):
    """Known tensors of several dtypes come back bit for bit; float16/bfloat16 are widened to float32 exactly when
    float32 is asked, float64 is not narrowed (that is from_pretrained's to do)."""
    g = torch.Generator().manual_seed(0)
    tensors = {
        "a.f32": torch.randn(3, 5, generator=g),
        "b.f16": torch.randn(7, generator=g).half(),
        "c.bf16": torch.randn(2, 2, 2, generator=g).bfloat16(),
        "d.f64": torch.randn(4, generator=g).double(),
        "e.i64": torch.arange(6).view(2, 3),
        "f.scalar": torch.tensor(-1e4),
        "g.empty": torch.zeros(0, 4),
        "h.bool": torch.tensor([True, False, True]),
    }
    path = tmp_path / "model.safetensors"
    save_file(tensors, path)
    same = memory.read_checkpoint([path])
    assert same.keys() == tensors.keys()
    for k, t in tensors.items():
        assert same[k].dtype == t.dtype and same[k].shape == t.shape and torch.equal(same[k], t), k
    wide = memory.read_checkpoint([path], dtype=torch.float32)
    assert wide["b.f16"].dtype == wide["c.bf16"].dtype == torch.float32
    for k in ("b.f16", "c.bf16"):
        assert torch.equal(wide[k], tensors[k].float()), k
    assert wide["d.f64"].dtype == torch.float64 and wide["e.i64"].dtype == torch.int64
    assert memory.read_checkpoint([path], names={"a.f32"}).keys() == {"a.f32"}


class _Reads(torch.nn.Module):
    """A model that computes with the parameter a loader could take for a leftover of the checkpoint."""

    def __init__(self):
        super().__init__()
        self.cfg = types.SimpleNamespace(d_vocab=5, n_ctx=4)
        self.emb = torch.nn.Embedding(5, 3)
        self.out = torch.nn.Linear(3, 5)

    def forward(self, toks):
        return self.out(self.emb(toks))


def test_dropped_leftovers_the_model_reads_are_read_back(tmp_path):
    """The safety net of dropping a processed layer's leftovers at once: a dropped parameter the model turns out to
    compute with is read back from the checkpoint, and the output is the loaded model's."""
    torch.manual_seed(0)
    model = _Reads().eval()
    path = tmp_path / "model.safetensors"
    save_file({k: v.detach().clone() for k, v in model.state_dict().items()}, path)
    toks = torch.tensor([[0, 1, 2, 3]])
    with torch.inference_mode():
        expected = model(toks)
    loader = memory.CheckpointLoader([path], on_mismatch=lambda *a: None)
    loader.named = {id(p): (weakref.ref(p), n) for n, p in model.named_parameters()}
    loader.drop_unreplaced(model.out)
    assert len(loader.dropped) == 2 and model.out.weight.untyped_storage().nbytes() <= 4  # a placeholder
    assert memory.release_source_copies(model, loader) == 0
    with torch.inference_mode():
        torch.testing.assert_close(model(toks), expected, atol=0, rtol=0)
    assert model.out.weight.untyped_storage().nbytes() == 5 * 3 * 4


def test_leftovers_the_model_does_not_read_are_released(tiny_dir):
    """GPT-2's fused c_attn, split into per-head Q, K, V by the bridge, is dropped once its layer is processed: the
    loaded model holds no copy of it, and computes as the Hugging Face model does (test_loading, test_memory)."""
    model = load_model(tiny_dir, device="cpu")
    fused = [p for n, p in model.named_parameters() if "qkv._original_component" in n or n.endswith("c_attn.weight")]
    assert fused and all(p.untyped_storage().nbytes() <= p.element_size() for p in fused)
