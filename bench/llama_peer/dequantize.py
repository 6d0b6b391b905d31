"""llama.cpp's quantized weights as a kev bundle, so that a quantization's decision agreement can be
measured on the peer's own values (bench/quant_agreement.py --peer).

    bundle = peer_bundle(kev, llama_src, gguf_path, exact_bundle, synth, pin_args, out)

From a GGUF that llama-quantize made from `exact_bundle`'s weights (llama_peer.ggufs), every tensor
llama.cpp stores quantized (Q4_K, Q6_K, Q8_0, ...) is read back with llama.cpp's own gguf-py
(`gguf.quants.dequantize`, run from the llama.cpp source tree; nothing of it is copied here),
returned to kev's tensor names and row/column order, rounded to BF16 and written into a copy of the
bundle's base weights; every other tensor keeps the exact bundle's bytes. The copy is exported the
way the exact bundle was (`kev pin` + `kev export`), with the synthetic adapter's B matrices zeroed,
so the merge adds nothing: the new bundle holds exactly the peer's weights (to BF16, whose rounding,
2^-9 relative, is below a 4- or 8-bit step; a -0 comes out +0, the merge's one change) and is
scored with kev's exact fp32 mode. What this leaves out of llama.cpp's own arithmetic: it quantizes
the activations too (to 8 bits, Q8_0 / Q8_K) for those products, so its decisions move at least
this much.

The order: llama.cpp's converter puts a Qwen3.5 GDN layer's value heads in tiled order when there
are more value heads than key heads (rows of in_proj_qkv's V part, in_proj_z, in_proj_a/b; columns
of out_proj); `untile_value_heads` undoes that. Every replaced tensor is checked to be within 25%
relative RMS of the exact one, so a name or order taken wrongly fails loudly.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "pylib"))
import kevtest  # noqa: E402
from exact_fp import bf16_bits_array  # noqa: E402

MAX_REL_RMS = 0.25


def gguf_module(llama_src):
    path = os.path.join(llama_src, "gguf-py")
    if path not in sys.path:
        sys.path.insert(0, path)
    import gguf
    return gguf


def field(reader, key):
    f = reader.fields[key]
    v = f.parts[f.data[0]]
    return bytes(v).decode() if f.types and f.types[0].name == "STRING" else int(v[0])


def untile_value_heads(x, axis, k_heads, v_per_k, dim):
    """The inverse of the converter's grouped -> tiled reorder along `axis` (0 rows, 1 columns)."""
    if axis == 0:
        return x.reshape(v_per_k, k_heads, dim, -1).transpose(1, 0, 2, 3).reshape(x.shape)
    return x.reshape(x.shape[0], v_per_k, k_heads, dim).transpose(0, 2, 1, 3).reshape(x.shape)


def kev_order(name, x, text):
    """x [rows, cols] from the GGUF, in kev's (the checkpoint's) order."""
    kh, vh = text.get("linear_num_key_heads", 0), text.get("linear_num_value_heads", 0)
    if not (kh and vh and kh != vh and ".linear_attn." in name):
        return x
    r, dk, dv = vh // kh, text["linear_key_head_dim"], text["linear_value_head_dim"]
    if ".in_proj_qkv." in name:
        qk = 2 * kh * dk
        return np.concatenate([x[:qk], untile_value_heads(x[qk:], 0, kh, r, dv)])
    if ".in_proj_z." in name:
        return untile_value_heads(x, 0, kh, r, dv)
    if ".in_proj_a." in name or ".in_proj_b." in name:
        return untile_value_heads(x, 0, kh, r, 1)
    if ".out_proj." in name:
        return untile_value_heads(x, 1, kh, r, dv)
    return x


def dequantized_tensors(llama_src, gguf_path, names, text):
    """{kev name: float32 [rows, cols]} for every tensor of `names` that the GGUF holds quantized."""
    gguf = gguf_module(llama_src)
    reader = gguf.GGUFReader(gguf_path)
    arch = field(reader, "general.architecture")
    blocks = field(reader, arch + ".block_count")
    arch_enum = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
    tmap = gguf.get_tensor_name_map(arch_enum, blocks)
    plain = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16}
    by_name = {t.name: t for t in reader.tensors}
    out = {}
    for name in names:
        g = None
        for cand in (name, name.replace("model.language_model.", "model."), name.replace("model.language_model.", "")):
            g = tmap.get_name(cand, try_suffixes=(".weight", ".bias"))
            if g:
                break
        t = by_name.get(g)
        if t is None or t.tensor_type in plain:
            continue
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        out[name] = (kev_order(name, x.reshape(int(t.shape[1]), int(t.shape[0])), text), t.tensor_type.name)
    return out


def peer_bundle(kev, llama_src, gguf_path, exact_bundle, synth, pin_args, out):
    """-> the bundle directory under `out` (made once); also writes out/tensors.json (each replaced
    tensor's GGUF type and relative RMS difference from the exact weights)."""
    bundle = os.path.join(out, "bundle")
    if os.path.exists(os.path.join(bundle, "kev_export.json")):
        return bundle
    shutil.rmtree(out, ignore_errors=True)
    base, ckpt = os.path.join(out, "base"), os.path.join(out, "checkpoint")
    os.makedirs(base)
    shutil.copytree(os.path.join(synth, "checkpoint"), ckpt)
    with open(os.path.join(exact_bundle, "config.json")) as f:
        cfg = json.load(f)
    text = cfg.get("text_config", cfg)
    with open(os.path.join(exact_bundle, "model.safetensors.index.json")) as f:
        weight_map = json.load(f)["weight_map"]
    deq = dequantized_tensors(llama_src, gguf_path, list(weight_map), text)
    report = {}
    for shard in sorted(set(weight_map.values())):
        tensors = kevtest.read_safetensors(os.path.join(exact_bundle, shard))
        for name, t in tensors.items():
            if name not in deq:
                continue
            x, qtype = deq[name]
            exact = t.float().numpy()
            if x.shape != exact.shape:
                sys.exit(f"{name}: GGUF shape {x.shape} is not the bundle's {exact.shape}")
            rel = float(np.sqrt(np.mean((x - exact) ** 2) / max(np.mean(exact ** 2), 1e-30)))
            if not rel < MAX_REL_RMS:
                sys.exit(f"{name}: {qtype} values are {rel:.2f} relative RMS from the exact ones: "
                         "name or order mapped wrongly")
            bits = bf16_bits_array(np.ascontiguousarray(x, dtype=np.float32))
            tensors[name] = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
            report[name] = {"type": qtype, "rel_rms": round(rel, 5)}
        kevtest.write_safetensors(os.path.join(base, shard), tensors)
    missing = [n for n in deq if n not in report]
    if missing:
        sys.exit(f"not written: {missing[:5]}")
    for name in os.listdir(exact_bundle):
        if name.endswith(".json") and name != "kev_export.json" and not os.path.exists(os.path.join(base, name)):
            shutil.copy(os.path.join(exact_bundle, name), base)
    adapter = os.path.join(ckpt, "adapter_model.safetensors")
    a = kevtest.read_safetensors(adapter)
    kevtest.write_safetensors(adapter, {k: (v.zero_() if ".lora_B." in k else v) for k, v in a.items()})
    recipe = os.path.join(out, "recipe.json")
    subprocess.run([kev, "pin", "--base", base, "--checkpoint", ckpt, "--out", recipe, *pin_args], check=True)
    subprocess.run([kev, "export", "--recipe", recipe, "--base", base, "--checkpoint", ckpt, "--out", bundle,
                    "--quiet"], check=True)
    shutil.rmtree(base)
    with open(os.path.join(out, "tensors.json"), "w") as f:
        json.dump(report, f, indent=1)
    return bundle
