"""Runs llama.cpp's own convert_hf_to_gguf.py (from the llama.cpp source tree given as the first
argument, with its bundled gguf-py) without `transformers`: the shim next to this file stands in
for AutoConfig/AutoTokenizer, and the BPE pre-tokenizer is named ("qwen35", the type llama.cpp
uses for Qwen3.5) instead of recognised by hashing a test string's tokenization, and torch
dtypes newer than Debian's torch get placeholders. Every tensor is
converted by llama.cpp's own code. Remaining arguments go to the converter unchanged.

    python3 bench/llama_peer/convert.py LLAMA_SRC MODEL_DIR --outfile X.gguf --outtype f32 --no-nextn
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
src = os.path.abspath(sys.argv[1])
sys.path[:0] = [os.path.join(here, "shim"), os.path.join(src, "gguf-py"), src]
sys.argv = [os.path.join(src, "convert_hf_to_gguf.py")] + sys.argv[2:]

import torch  # noqa: E402

# Debian's torch (1.13) predates these dtypes; the converter only lists them in lookup tables.
# Placeholders keep those tables importable; a tensor of such a dtype cannot occur here (the
# synthetic checkpoints are BF16/F32).
for name in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "uint16", "uint32", "uint64"):
    if not hasattr(torch, name):
        setattr(torch, name, type(name, (), {})())

import conversion.base  # noqa: E402  (llama.cpp's)

for cls in vars(conversion.base).values():
    if isinstance(cls, type) and hasattr(cls, "get_vocab_base_pre"):
        cls.get_vocab_base_pre = lambda self, tokenizer: "qwen35"

import runpy  # noqa: E402

runpy.run_path(sys.argv[0], run_name="__main__")
