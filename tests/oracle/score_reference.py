"""Independent reference of the whole Kev scoring path (REFERENCE.md sections 4-8), in torch.

Shares nothing with the C++ code:
- encoding: encode_reference.py (upstream rules in Python, token ids from transformers.js);
- weights: the synthetic checkpoint's base shards and adapter, merged here by the merge
  contract (docs/bundle-format.md: the reference loader's
  `(W.float() + (B.float() @ A.float()) * scale).to(torch.bfloat16)` with B @ A as one FMA
  chain in rank order), evaluated exactly in numpy by exact_fp. Not by torch's own matmul: its
  summation order depends on the CPU (test_export.py probes it), and where it is another order
  a few BF16 weights move by an ulp, which this random test model turns into probability
  differences at the size of test_score's budget (1.24e-5 on an Intel Xeon with AVX-512);
- backbone: qwen35_reference.Reference in float64, each question run as its own full causal row
  (state + branch; no prefix reuse);
- head: torch.load of head.pt (torch's own unpickler), q/k as float64 linear maps,
  softmax(logit / T) per question;
- answers: the formulas of REFERENCE.md section 8 in float64.
"""
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
import exact_fp  # noqa: E402
import kevtest  # noqa: E402
from encode_reference import reference_encode  # noqa: E402
from qwen35_reference import Reference  # noqa: E402

LANG = "model.language_model."


class WidenOnUse(dict):
    """Weights kept as stored (BF16 after the merge) and widened to `dtype` at each use: exact,
    since every BF16 value is a float64 one, and a Kev-4B-sized float64 copy (~32 GB) need not fit
    in memory. `rows` widens only the embedding rows asked for."""

    def __init__(self, tensors, dtype):
        super().__init__(tensors)
        self.dtype = dtype

    def __getitem__(self, name):
        return super().__getitem__(name).to(self.dtype)

    def rows(self, name, index):
        return super().__getitem__(name)[index].to(self.dtype)


def merged_weights(synth_dir, dtype=torch.float64, widen_on_use=False):
    """(text_config, {name without prefix: `dtype` tensor}) with the LoRA merged to BF16 first
    (a WidenOnUse of the stored tensors with widen_on_use)."""
    base = os.path.join(synth_dir, "base")
    ckpt = os.path.join(synth_dir, "checkpoint")
    cfg = json.load(open(os.path.join(base, "config.json")))
    tc = cfg["text_config"]
    index = json.load(open(os.path.join(base, "model.safetensors.index.json")))
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(kevtest.read_safetensors(os.path.join(base, shard)))
    acfg = json.load(open(os.path.join(ckpt, "adapter_config.json")))
    scale = acfg["lora_alpha"] / acfg["r"]
    adapter = kevtest.read_safetensors(os.path.join(ckpt, "adapter_model.safetensors"))
    for name, a in adapter.items():
        if not name.endswith(".lora_A.weight"):
            continue
        stem = name[len("base_model.model."):-len(".lora_A.weight")]
        b = adapter[name.replace("lora_A", "lora_B")]
        target = LANG + stem + ".weight"
        w_bits = tensors[target].view(torch.int16).numpy().view(np.uint16)
        merged = exact_fp.merged_bf16_bits_array(w_bits, b.float().numpy(), a.float().numpy(), scale)
        tensors[target] = torch.from_numpy(merged.view(np.int16)).view(torch.bfloat16)
    if widen_on_use:
        return tc, WidenOnUse({k[len(LANG):]: v for k, v in tensors.items() if k.startswith(LANG)}, dtype)
    w = {k[len(LANG):]: v.to(dtype) for k, v in tensors.items() if k.startswith(LANG)}
    return tc, w


class Head:
    def __init__(self, head_pt):
        ckpt = torch.load(head_pt, map_location="cpu")
        h = ckpt["head"]
        self.qw, self.qb = h["q.weight"].double(), h["q.bias"].double()
        self.kw, self.kb = h["k.weight"].double(), h["k.bias"].double()
        self.temperature = float(ckpt["temperature"])

    def probabilities(self, decide, options):
        decide, options = decide.double(), options.double()
        q = self.qw @ decide + self.qb
        k = options @ self.kw.T + self.kb
        logits = (k @ q) / math.sqrt(q.numel())
        return torch.softmax(logits / self.temperature, dim=-1)


def answer(qtype, keys, options, probs):
    """Kev 1.0's to_answers (REFERENCE.md section 8), in float64, unrounded: confidences on the normalised
    distribution; score confidence max(0, 1 - E|i - mode| / D), D the mean |i - (L-1)/2| over the levels."""
    p = [float(x) for x in probs]
    if qtype == "noul":
        return {"type": "noul", "noul": p[1]}
    total = math.fsum(p)
    n = [x / total for x in p] if total else [1 / len(p)] * len(p)
    if qtype == "choice":
        k = len(p)
        best = max(range(k), key=lambda i: (p[i], -i))
        conf = 1.0 if k == 1 else (max(n) - 1 / k) / (1 - 1 / k)
        return {"type": "choice", "choice": keys[best], "confidence": conf, "probabilities": dict(zip(keys, p))}
    levels = len(p)
    mode = max(range(levels), key=lambda i: (n[i], -i))
    spread = math.fsum(abs(i - (levels - 1) / 2) for i in range(levels)) / levels
    conf = 1.0 if levels == 1 else max(0.0, 1 - math.fsum(ni * abs(i - mode) for i, ni in enumerate(n)) / spread)
    return {"type": "score", "score": sum(i * pi for i, pi in enumerate(p)),
            "legend": {str(i): o for i, o in enumerate(options)},
            "probabilities": {str(i): pi for i, pi in enumerate(p)}, "confidence": conf}


class ScoringReference:
    def __init__(self, synth_dir, dtype=torch.float64, widen_on_use=False):
        tc, w = merged_weights(synth_dir, dtype, widen_on_use)
        self.model = Reference(tc, w)
        self.head = Head(os.path.join(synth_dir, "checkpoint", "head.pt"))
        self.tokenizer = os.path.join(synth_dir, "base", "tokenizer.json")

    def score(self, requests, max_state=65536, max_row=73728, truncate=False):
        """Per request: {"error": ...} or {"answers": {id: answer}, "probabilities": {id: [p]}, "encoding": e}."""
        out = []
        for e in reference_encode(requests, self.tokenizer, max_state, max_row, truncate):
            if "error" in e:
                out.append(e)
                continue
            answers, probs = {}, {}
            for q, row in zip(e["questions"], e["rows"]):
                hidden = self.model.forward(row["ids"], list(range(len(row["ids"]))))
                p = self.head.probabilities(hidden[row["decide"]], hidden[row["options"]])
                probs[q["id"]] = [float(x) for x in p]
                answers[q["id"]] = answer(q["type"], q["keys"], q["options"], p)
            out.append({"answers": answers, "probabilities": probs, "encoding": e})
        return out
