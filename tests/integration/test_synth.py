"""`kev synth` writes the released Kev layout: checked with torch and an independent reader.

Expected names and shapes are derived here from the documented layout (REFERENCE.md sections
2-4 and the synth spec), not from the C++ code.
"""
import collections
import json
import math
import os
import re
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "pylib"))
from kevtest import KEV_BIN, read_safetensors, read_safetensors_header, run_kev  # noqa: E402

SHARDS = ["model.safetensors-00001-of-00002.safetensors", "model.safetensors-00002-of-00002.safetensors"]
DELIMITERS = ["<|fim_prefix|>", "<|fim_middle|>", "<|box_start|>", "<|box_end|>", "<|fim_suffix|>"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|box_start|>", "<|box_end|>",
            "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>"]
TINY = dict(H=64, I=96, L=32, NH=4, NKV=2, HD=16, LK=2, LV=4, LKD=8, LVD=8, P=32)
FOUR_B = dict(H=2560, I=9216, L=32, NH=16, NKV=4, HD=256, LK=16, LV=32, LKD=128, LVD=128, P=256, V=248320)


def expected_language_tensors(d):
    """{name: (dtype, shape)} for the language model, from REFERENCE.md section 3."""
    H, I = d["H"], d["I"]
    lm = "model.language_model."
    out = {lm + "embed_tokens.weight": ("BF16", [d["V"], H]), lm + "norm.weight": ("BF16", [H])}
    for n in range(d["L"]):
        p = f"{lm}layers.{n}."
        out[p + "input_layernorm.weight"] = ("BF16", [H])
        out[p + "post_attention_layernorm.weight"] = ("BF16", [H])
        out[p + "mlp.gate_proj.weight"] = ("BF16", [I, H])
        out[p + "mlp.up_proj.weight"] = ("BF16", [I, H])
        out[p + "mlp.down_proj.weight"] = ("BF16", [H, I])
        if n % 4 == 3:
            a = p + "self_attn."
            out[a + "q_proj.weight"] = ("BF16", [d["NH"] * d["HD"] * 2, H])
            out[a + "k_proj.weight"] = ("BF16", [d["NKV"] * d["HD"], H])
            out[a + "v_proj.weight"] = ("BF16", [d["NKV"] * d["HD"], H])
            out[a + "o_proj.weight"] = ("BF16", [H, d["NH"] * d["HD"]])
            out[a + "q_norm.weight"] = ("BF16", [d["HD"]])
            out[a + "k_norm.weight"] = ("BF16", [d["HD"]])
        else:
            g = p + "linear_attn."
            conv = 2 * d["LK"] * d["LKD"] + d["LV"] * d["LVD"]
            out[g + "in_proj_qkv.weight"] = ("BF16", [conv, H])
            out[g + "in_proj_z.weight"] = ("BF16", [d["LV"] * d["LVD"], H])
            out[g + "in_proj_a.weight"] = ("BF16", [d["LV"], H])
            out[g + "in_proj_b.weight"] = ("BF16", [d["LV"], H])
            out[g + "out_proj.weight"] = ("BF16", [H, d["LV"] * d["LVD"]])
            out[g + "conv1d.weight"] = ("BF16", [conv, 1, 4])
            out[g + "A_log"] = ("F32", [d["LV"]])
            out[g + "dt_bias"] = ("BF16", [d["LV"]])
            out[g + "norm.weight"] = ("F32", [d["LVD"]])
    return out


def expected_targets(L):
    """The Kev LoRA targets (REFERENCE.md section 4): (layer, module path)."""
    out = []
    for n in range(L):
        mixer = ["self_attn." + m for m in ("q_proj", "k_proj", "v_proj", "o_proj")] if n % 4 == 3 else \
            ["linear_attn." + m for m in ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b", "out_proj")]
        out += [(n, m) for m in mixer + ["mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]]
    return out


def synth(tmp_path, name="out", *args):
    out = tmp_path / name
    run_kev("synth", "--out", out, *args)
    return out


def load_base(out):
    tensors, where, headers = {}, {}, {}
    for shard in SHARDS:
        path = out / "base" / shard
        headers[shard] = read_safetensors_header(path)[0]
        for name, t in read_safetensors(path).items():
            assert name not in tensors, f"{name} in two shards"
            tensors[name] = t
            where[name] = shard
    return tensors, where, headers


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return synth(tmp_path_factory.mktemp("synth"))


def test_layout_files(tiny):
    assert sorted(os.listdir(tiny)) == ["base", "checkpoint"]
    assert sorted(os.listdir(tiny / "base")) == sorted(
        ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors.index.json"] + SHARDS)
    assert sorted(os.listdir(tiny / "checkpoint")) == ["adapter_config.json", "adapter_model.safetensors", "head.pt"]


def tokenizer_size(out):
    tok = json.loads((out / "base" / "tokenizer.json").read_text())
    return max(list(tok["model"]["vocab"].values()) + [t["id"] for t in tok["added_tokens"]]) + 1


def test_config(tiny):
    cfg = json.loads((tiny / "base" / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert cfg["model_type"] == "qwen3_5" and cfg["tie_word_embeddings"] is True
    t = cfg["text_config"]
    want = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=32, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=4,
                linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
                full_attention_interval=4, rms_norm_eps=1e-6, tie_word_embeddings=True, attn_output_gate=True,
                hidden_act="silu", max_position_embeddings=262144, dtype="bfloat16", model_type="qwen3_5_text")
    for k, v in want.items():
        assert t[k] == v, k
    n = tokenizer_size(tiny)
    assert t["vocab_size"] == (n + 63) // 64 * 64
    assert t["layer_types"] == ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(32)]
    rope = t["rope_parameters"]
    assert rope["rope_theta"] == 10000000 and rope["partial_rotary_factor"] == 0.25
    assert rope["mrope_section"] == [11, 11, 10] and rope["mrope_interleaved"] is True
    assert cfg["vision_config"]["depth"] == 1 and cfg["vision_config"]["hidden_size"] == 16


def test_base_tensors_and_index(tiny):
    tensors, where, headers = load_base(tiny)
    d = dict(TINY, V=json.loads((tiny / "base" / "config.json").read_text())["text_config"]["vocab_size"])
    want = expected_language_tensors(d)
    lang = {n for n in tensors if n.startswith("model.language_model.")}
    assert lang == set(want)
    for name, (dtype, shape) in want.items():
        info = headers[where[name]][name]
        assert (info["dtype"], info["shape"]) == (dtype, shape), name
    others = set(tensors) - lang
    assert any(n.startswith("model.visual.") for n in others)
    assert any(n.startswith("mtp.") for n in others)
    assert all(n.startswith(("model.visual.", "mtp.")) for n in others)
    # Both shards are used, and the index maps every tensor to the shard that holds it.
    assert set(where.values()) == set(SHARDS)
    index = json.loads((tiny / "base" / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == where
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in tensors.values())


def bound(x, lo, hi, slack=1 / 128):
    """Values within [lo, hi] up to bf16 rounding; not all equal."""
    x = x.float()
    assert x.min().item() >= lo - abs(lo) * slack - 1e-9 and x.max().item() <= hi + abs(hi) * slack + 1e-9
    assert x.numel() < 4 or x.std().item() > 0


def test_value_ranges(tiny):
    tensors, _, _ = load_base(tiny)
    for name, t in tensors.items():
        if name.endswith("A_log"):
            bound(t, 0.0, math.log(16.0))
        elif name.endswith("dt_bias") or name.endswith("conv1d.weight"):
            bound(t, -0.5, 0.5)
        elif name.endswith("linear_attn.norm.weight"):
            bound(t, 0.9, 1.1)
        elif name.endswith("embed_tokens.weight"):
            bound(t, -1.0, 1.0)
        elif t.dim() == 1:
            bound(t, -0.1, 0.1)
        else:
            a = 1 / math.sqrt(t[0].numel())
            bound(t, -a, a)
            assert t.float().abs().max().item() > a / 2  # really scaled by 1/sqrt(in), not smaller


def test_adapter(tiny):
    cfg = json.loads((tiny / "checkpoint" / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 16 and cfg["lora_alpha"] == 32
    assert sorted(cfg["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                    "down_proj", "in_proj_qkv", "in_proj_z", "in_proj_a",
                                                    "in_proj_b", "out_proj"])
    assert cfg["lora_dropout"] == 0.05 and cfg["task_type"] == "FEATURE_EXTRACTION"
    assert cfg["use_dora"] is False and cfg["use_rslora"] is False and cfg["fan_in_fan_out"] is False
    assert cfg["bias"] == "none" and cfg["modules_to_save"] is None
    assert cfg["base_model_name_or_path"] == "Qwen/Qwen3.5-4B-Base"
    adapter = read_safetensors(tiny / "checkpoint" / "adapter_model.safetensors")
    base, _, _ = load_base(tiny)
    targets = expected_targets(32)
    assert len(targets) == 248 and len(adapter) == 496
    for n, module in targets:
        a = adapter[f"base_model.model.layers.{n}.{module}.lora_A.weight"]
        b = adapter[f"base_model.model.layers.{n}.{module}.lora_B.weight"]
        w = base[f"model.language_model.layers.{n}.{module}.weight"]
        assert a.dtype == torch.float32 and b.dtype == torch.float32
        assert list(a.shape) == [16, w.shape[1]] and list(b.shape) == [w.shape[0], 16]
        bound(a, -1 / math.sqrt(w.shape[1]), 1 / math.sqrt(w.shape[1]), slack=0)
        bound(b, -0.05, 0.05, slack=0)
        assert bool((b != 0).all())


def test_head_pt_with_torch(tiny):
    d = torch.load(tiny / "checkpoint" / "head.pt")
    assert type(d) is dict
    assert list(d) == ["base", "base_revision", "head", "lora", "head_dim", "option_isolation",
                       "special_embeddings", "weights_dtype", "weights", "temperature", "holdout", "args",
                       "suite_sha256", "init_source", "temperature_fit"]
    assert d["base"] == "Qwen/Qwen3.5-4B-Base"
    assert d["base_revision"] == "1001bb4d826a52d1f399e183466143f4da7b741b"
    assert type(d["head"]) is collections.OrderedDict
    assert list(d["head"]) == ["q.weight", "q.bias", "k.weight", "k.bias"]
    for k, shape in [("q.weight", [32, 64]), ("q.bias", [32]), ("k.weight", [32, 64]), ("k.bias", [32])]:
        t = d["head"][k]
        assert t.dtype == torch.float32 and list(t.shape) == shape and t.is_contiguous()
        assert t.std().item() > 0
    assert d["lora"] == 16 and d["head_dim"] == 32
    assert d["option_isolation"] is False and d["special_embeddings"] is False
    assert d["weights_dtype"] == "fp32" and d["weights"] == "lora"
    assert d["temperature"] == 2.406050072164233
    assert isinstance(d["holdout"], list) and isinstance(d["args"], dict)
    assert isinstance(d["temperature_fit"], dict) and isinstance(d["suite_sha256"], str)


def test_options_and_determinism(tmp_path):
    a = synth(tmp_path, "a", "--seed", "7", "--temperature", "1.5", "--pointer", "8", "--rank", "4", "--alpha", "8")
    b = synth(tmp_path, "b", "--seed", "7", "--temperature", "1.5", "--pointer", "8", "--rank", "4", "--alpha", "8")
    c = synth(tmp_path, "c", "--seed", "8", "--temperature", "1.5", "--pointer", "8", "--rank", "4", "--alpha", "8")
    for rel in ["base/" + s for s in SHARDS] + ["checkpoint/adapter_model.safetensors", "checkpoint/head.pt"]:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel
        assert (a / rel).read_bytes() != (c / rel).read_bytes(), rel
    d = torch.load(a / "checkpoint" / "head.pt")
    assert d["temperature"] == 1.5 and d["lora"] == 4 and d["head_dim"] == 8
    assert list(d["head"]["q.weight"].shape) == [8, 64]
    cfg = json.loads((a / "checkpoint" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8
    adapter = read_safetensors(a / "checkpoint" / "adapter_model.safetensors")
    assert list(adapter["base_model.model.layers.0.mlp.up_proj.lora_A.weight"].shape) == [4, 64]


def test_4b_dimensions(tmp_path):
    # The 4b shape's per-layer dimensions with a short stack (one full-attention layer).
    out = synth(tmp_path, "4b", "--shape", "4b", "--layers", "4", "--intermediate", "128", "--vocab", "1024")
    _, where, headers = load_base(out)
    want = expected_language_tensors(dict(FOUR_B, L=4, I=128, V=1024))
    assert {n for n in where if n.startswith("model.language_model.")} == set(want)
    for name, (dtype, shape) in want.items():
        info = headers[where[name]][name]
        assert (info["dtype"], info["shape"]) == (dtype, shape), name
    d = torch.load(out / "checkpoint" / "head.pt")
    assert list(d["head"]["k.weight"].shape) == [256, 2560] and d["head_dim"] == 256
    adapter_header = read_safetensors_header(out / "checkpoint" / "adapter_model.safetensors")[0]
    assert len([k for k in adapter_header if k != "__metadata__"]) == 2 * len(expected_targets(4))


def test_streaming_memory_is_flat(tmp_path):
    # A 256 MiB embedding must not be held in memory. The peak RSS is measured by a small
    # intermediate Python (a child forked from this torch-laden process would inherit its peak).
    out = tmp_path / "big"
    args = [KEV_BIN, "synth", "--quiet", "--out", str(out), "--vocab", str(1 << 20), "--hidden", "128", "--layers", "4"]
    probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    peak_kib = int(subprocess.run([sys.executable, "-S", "-c", probe, *args], check=True, capture_output=True,
                                  text=True).stdout)
    size = (out / "base" / SHARDS[0]).stat().st_size + (out / "base" / SHARDS[1]).stat().st_size
    assert size > 256 << 20
    assert peak_kib < 64 * 1024, f"peak RSS {peak_kib} KiB"


def test_refusals(tmp_path):
    out = synth(tmp_path, "x")
    again = run_kev("synth", "--out", out, check=False)
    assert again.returncode == 2 and "exists" in again.stderr
    bad = run_kev("synth", "--out", tmp_path / "y", "--shape", "9b", check=False)
    assert bad.returncode == 2 and "9b" in bad.stderr and not (tmp_path / "y").exists()
    bad = run_kev("synth", "--out", tmp_path / "z", "--heads", "3", check=False)
    assert bad.returncode == 2 and not (tmp_path / "z").exists()


# ---- tokenizer: an independent byte-level BPE ------------------------------------------------

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# The Qwen split pattern restricted to ASCII (\p{L} -> [A-Za-z], \p{N} -> [0-9]).
ASCII_SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*"
                         r"|\s*[\r\n]+|\s+(?!\S)|\s+")


class Bpe:
    def __init__(self, tok):
        self.vocab = tok["model"]["vocab"]
        self.ranks = {tuple(m.split(" ")): i for i, m in enumerate(tok["model"]["merges"])}
        self.b2u = bytes_to_unicode()
        self.u2b = {v: k for k, v in self.b2u.items()}
        self.inverse = {v: k for k, v in self.vocab.items()}

    def word(self, piece):
        syms = [self.b2u[b] for b in piece.encode()]
        while len(syms) > 1:
            pairs = [(self.ranks.get((syms[i], syms[i + 1]), 1 << 30), i) for i in range(len(syms) - 1)]
            rank, _ = min(pairs)
            if rank == 1 << 30:
                break
            a, b = [k for k, v in self.ranks.items() if v == rank][0]
            merged, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    merged.append(a + b)
                    i += 2
                else:
                    merged.append(syms[i])
                    i += 1
            syms = merged
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        return [i for piece in ASCII_SPLIT.findall(text) for i in self.word(piece)]

    def decode(self, ids):
        return bytes(self.u2b[c] for i in ids for c in self.inverse[i]).decode()


def test_default_tokenizer_is_a_byte_level_bpe(tiny):
    tok = json.loads((tiny / "base" / "tokenizer.json").read_text())
    assert tok["normalizer"]["type"] == "NFC"
    pre = tok["pre_tokenizer"]
    assert pre["type"] == "Sequence"
    split, byte_level = pre["pretokenizers"]
    assert split["type"] == "Split" and split["behavior"] == "Isolated" and "\\p{L}" in split["pattern"]["Regex"]
    assert byte_level == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    assert tok["decoder"]["type"] == "ByteLevel" and tok["model"]["type"] == "BPE"
    vocab, merges = tok["model"]["vocab"], tok["model"]["merges"]
    assert sorted(vocab.values()) == list(range(len(vocab)))
    b2u = bytes_to_unicode()
    assert all(vocab[b2u[b]] < 256 for b in range(256))
    assert 200 <= len(merges) <= 1000
    for m in merges:
        a, b = m.split(" ")
        assert a in vocab and b in vocab and a + b in vocab
    # Special tokens follow the BPE vocabulary, in order, and include the 5 Kev delimiters.
    added = tok["added_tokens"]
    assert [t["content"] for t in added] == SPECIALS
    assert [t["id"] for t in added] == list(range(len(vocab), len(vocab) + len(SPECIALS)))
    assert all(t["special"] for t in added)
    assert all(d in {t["content"] for t in added} and d not in vocab for d in DELIMITERS)
    cfg = json.loads((tiny / "base" / "tokenizer_config.json").read_text())
    assert {int(k): v["content"] for k, v in cfg["added_tokens_decoder"].items()} == {t["id"]: t["content"] for t in added}

    bpe = Bpe(tok)
    for text in ["The model reads a state and answers questions.", "Should the ticket be closed?",
                 "Numbers 12345 and symbols: {[()]} <|fim_prefix|> naïve café ✓", "  spaces\n\nand lines\t"]:
        ids = bpe.encode(text)
        assert bpe.decode(ids) == text
    ids = bpe.encode("the decision the options the state")
    assert len(ids) <= 8, ids  # common words are single tokens
    assert len(bpe.word(" the")) == 1


def test_custom_tokenizer_sets_vocab(tmp_path):
    tok = json.loads(open(synth(tmp_path, "t0") / "base" / "tokenizer.json").read())
    tok["added_tokens"].append({"id": 1000, "content": "<|extra|>", "single_word": False, "lstrip": False,
                                "rstrip": False, "normalized": False, "special": True})
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(tok))
    out = synth(tmp_path, "t1", "--tokenizer", path)
    assert (out / "base" / "tokenizer.json").read_bytes() == path.read_bytes()
    assert json.loads((out / "base" / "config.json").read_text())["text_config"]["vocab_size"] == 1024
