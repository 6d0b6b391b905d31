"""Quantized bundles (`kev quantize`), through the real binary, against an independent oracle.

The oracle is written here in numpy from the format's published description (it never asks kev):
which projections of a model are "big" (from config.json's layer_types and GDN widths), how a
spec (`class[@first-last],...`, `all`, `gdn_qkv`, `none`) selects class/layer pairs, the default
specs of `--format q4` / `--format q8` (F = ceil(layers / 4)), how a projection's rows are cut
into parts of one kind each (`W@r0-r1.bf16|q8|q4|q5|q4z|q5z`, a quantized part followed by its
`.scale`), and the q8 / q4 / q5 / q4z / q5z rules per row and 32-value block in float32 arithmetic
(nearbyint = round half to even, F16 scales rounded to nearest even, two nibbles per byte, low
nibble first, q5's fifth bits in a little-endian word after each block's nibbles, the q4z / q5z
search with its sums in k's order).
Safetensors files are parsed by a small reader here (u64 LE header length, JSON header, raw
data) so that I8 / U8 / F16 are compared as raw bytes.

Proved here:
- every tensor of a `--format q4`, a `--format q8`, a `--format q4z` and custom-spec bundles
  (`--q5` and `--q5z` rows among them) is byte-for-byte the oracle's (names, kinds, row ranges, dtypes, shapes, data, order
  within the shard); every other tensor and file is the source's; the index's weight_map names
  the shards' tensors; the manifest's `quantized` record and `outputs` digests; `kev verify`
  passes. The synthetic model
  has hidden 80 and intermediate 100, so the last 32-value block of a row is zero-padded;
- the bytes do not depend on the kernel level (KEV_ISA) or on --threads;
- scoring: a q8 bundle answers exactly as its source in `--precision int8`; a q4 bundle gives
  the same answers at every supported KEV_ISA level and at --threads 1 and 2; any other
  precision is refused (exit 5, naming --precision int8);
- refusals that leave nothing behind (no OUT, no `.<name>.kev-staging.*`): an existing OUT, a
  source that fails verification, an already quantized source, overlapping specs, an unknown
  class, a layer outside the model;
- damaged quantized bundles (a scale removed, a part of the wrong shape or scale dtype, a q4
  part named q5, q4z or q5z, rows missing between parts) are refused at load with a message naming the projection;
- a write failure, SIGINT or SIGTERM mid-quantization, and a selection that reduces nothing,
  leave nothing behind.
"""
import glob
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
import kevtest  # noqa: E402
from kevtest import run_kev, synth_bundle  # noqa: E402

HIDDEN, INTERMEDIATE = 80, 100  # not multiples of 32: the last block of each row is padded
CLASSES = ["attn_q", "attn_k", "attn_v", "attn_o", "gdn_q", "gdn_k", "gdn_v", "gdn_z", "gdn_out",
           "mlp_gate", "mlp_up", "mlp_down"]
ALIASES = {"all": CLASSES, "gdn_qkv": ["gdn_q", "gdn_k", "gdn_v"]}
RULE = "kev-quant-b32/1"
MANIFEST = "kev_export.json"
INDEX = "model.safetensors.index.json"
SCORE_LINES = 6
# KEV_GEMM_ISA (the family's own cap) wins over KEV_ISA: cleared wherever a level is forced.
NO_CAP = {"KEV_ISA": "", "KEV_GEMM_ISA": "", "KEV_AVX512_EMULATE": ""}


# ---- safetensors, raw ----

def read_st(path):
    """{"meta": __metadata__ or None, "order": names in header order, "by_offset": names in
    data order, "t": {name: (dtype, shape, raw bytes)}}; asserts the data region is exactly
    covered by the tensors, back to back."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = header.pop("__metadata__", None)
    tensors, spans = {}, []
    for name, info in header.items():
        b, e = info["data_offsets"]
        tensors[name] = (info["dtype"], list(info["shape"]), data[b:e])
        spans.append((b, e, name))
    spans.sort()
    pos = 0
    for b, e, name in spans:
        assert b == pos, (path, name, "data not back to back")
        pos = e
    assert pos == len(data), (path, "bytes after the last tensor")
    return {"meta": meta, "order": list(header), "by_offset": [s[2] for s in spans], "t": tensors}


def write_st(path, entries, meta=None):
    """entries: [(name, dtype, shape, raw bytes)] in order."""
    header, offset = {}, 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, _, raw in entries:
            f.write(raw)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---- the oracle: plan ----

def text_config(bundle):
    with open(os.path.join(bundle, "config.json")) as f:
        cfg = json.load(f)
    return cfg.get("text_config", cfg)


def parse_spec(spec, layers):
    """A spec -> {(class, layer)}; raises ValueError where the format refuses it."""
    out = set()
    spec = spec.strip()
    if spec in ("", "none"):
        return out
    for entry in spec.split(","):
        entry = entry.strip()
        cls, _, rng = entry.partition("@")
        if cls not in CLASSES and cls not in ALIASES:
            raise ValueError(f"unknown class {cls!r}")
        first, last = 0, layers - 1
        if rng:
            a, b = rng.split("-")
            first, last = int(a), int(b)
            if not 0 <= first <= last < layers:
                raise ValueError(f"layers {rng} outside 0-{layers - 1}")
        for c in ALIASES.get(cls, [cls]):
            for layer in range(first, last + 1):
                out.add((c, layer))
    return out


def default_sets(fmt, layers, first=None):
    """(q8 set, q4 set) of a format's defaults for a model of `layers` layers (q4: its first
    `first` layers at 8 bits, a quarter rounded up unless given)."""
    first = -(-layers // 4) if first is None else first
    late = {(c, l) for c in CLASSES if c not in ("gdn_q", "gdn_k") for l in range(first, layers)}
    if fmt == "q8":
        return late, set()
    early = {(c, l) for c in CLASSES for l in range(first)}
    qk = {(c, l) for c in ("gdn_q", "gdn_k") for l in range(first, layers)}
    return early | qk, late


def q5_layer_sets(layers, first, five):
    """(q8, q5, q4 sets) of `--format q4 --q8-layers first --q5-layers five`: layers [0, first) at
    8 bits, [first, first + five) at 5, after them the GDN query/key rows at 5 and the rest at 4."""
    after = first + five
    q8 = {(c, l) for c in CLASSES for l in range(first)}
    q5 = {(c, l) for c in CLASSES for l in range(first, after)}
    q5 |= {(c, l) for c in ("gdn_q", "gdn_k") for l in range(after, layers)}
    q4 = {(c, l) for c in CLASSES if c not in ("gdn_q", "gdn_k") for l in range(after, layers)}
    return q8, q5, q4


def projection_classes(cfg):
    """{name without prefix: (layer, [(class, row0, row1 or None)])}; row1 None: to the end."""
    out = {}
    nk, dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
    nv, dv = cfg["linear_num_value_heads"], cfg["linear_value_head_dim"]
    for layer, kind in enumerate(cfg["layer_types"]):
        p = f"layers.{layer}."
        if kind == "full_attention":
            for c in "qkvo":
                out[f"{p}self_attn.{c}_proj.weight"] = (layer, [(f"attn_{c}", 0, None)])
        else:
            assert kind == "linear_attention", kind
            q = nk * dk
            out[f"{p}linear_attn.in_proj_qkv.weight"] = (
                layer, [("gdn_q", 0, q), ("gdn_k", q, 2 * q), ("gdn_v", 2 * q, 2 * q + nv * dv)])
            out[f"{p}linear_attn.in_proj_z.weight"] = (layer, [("gdn_z", 0, None)])
            out[f"{p}linear_attn.out_proj.weight"] = (layer, [("gdn_out", 0, None)])
        for c in ("gate", "up", "down"):
            out[f"{p}mlp.{c}_proj.weight"] = (layer, [(f"mlp_{c}", 0, None)])
    assert len(cfg["layer_types"]) == cfg["num_hidden_layers"]
    return out


def row_parts(layer, classes, rows, q8, q4, q5=frozenset(), q4z=frozenset(), q5z=frozenset()):
    """[(row0, row1, kind)]: consecutive rows of one kind merged, in row order."""
    parts = []
    for cls, r0, r1 in classes:
        r1 = rows if r1 is None else r1
        kinds = [k for k, sel in (("q8", q8), ("q5", q5), ("q4", q4), ("q4z", q4z), ("q5z", q5z))
                 if (cls, layer) in sel]
        assert len(kinds) <= 1, (cls, layer, kinds)
        kind = kinds[0] if kinds else "bf16"
        if parts and parts[-1][2] == kind:
            parts[-1] = (parts[-1][0], r1, kind)
        else:
            parts.append((r0, r1, kind))
    assert parts[-1][1] == rows, (classes, rows)
    return parts


# ---- the oracle: numbers ----

F32 = np.float32


def bf16_rows(raw, rows, cols):
    u16 = np.frombuffer(raw, dtype="<u2").reshape(rows, cols)
    return (u16.astype(np.uint32) << 16).view(np.float32)


def blocks(x):
    n, c = x.shape
    nb = -(-c // 32)
    padded = np.zeros((n, nb * 32), dtype=F32)
    padded[:, :c] = x
    return padded.reshape(n, nb, 32), nb


def q8_oracle(x):
    """-> (I8 bytes [n, B*32], F32 scale bytes [n, B])"""
    blk, nb = blocks(x)
    amax = np.abs(blk).max(axis=2)
    ok = amax >= F32(1e-30)  # false for NaN too
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        inv = (F32(127) / np.where(ok, amax, F32(1))).astype(F32)
        q = np.rint((blk * inv[:, :, None]).astype(F32))
        scale = (amax / F32(127)).astype(F32)
    q = np.clip(q, -127, 127)
    q[~ok] = 0
    scale = np.where(ok, scale, F32(0)).astype(F32)
    assert q.dtype == F32 and inv.dtype == F32
    return q.astype(np.int8).reshape(x.shape[0], nb * 32).tobytes(), scale.astype("<f4").tobytes()


def q4_oracle(x, bits=4):
    """-> (U8 bytes [n, B*16], F16 scale bytes [n, B]); bits=5: q5's U8 bytes [n, B*20]"""
    blk, nb = blocks(x)
    mag = np.abs(blk)
    amax = mag.max(axis=2)
    m = np.take_along_axis(blk, np.argmax(mag, axis=2)[:, :, None], axis=2)[:, :, 0]  # first largest
    lo = -(1 << (bits - 1))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s16 = (m / F32(lo)).astype(F32).astype(np.float16)
        s = s16.astype(F32)
        ok = (amax >= F32(1e-30)) & (s != 0)
        q = np.rint((blk / np.where(ok, s, F32(1))[:, :, None]).astype(F32))
    assert np.all(np.isfinite(s[ok])), "an F16 scale overflowed: not in this test's data"
    q = np.clip(q, lo, -lo - 1)
    q[~ok] = 0
    s16 = np.where(ok, s16, np.float16(0)).astype(np.float16)
    u = q.astype(np.int8).view(np.uint8)
    nib = (u & 0x0F).reshape(x.shape[0], nb, 16, 2)
    packed = (nib[..., 0] | (nib[..., 1] << 4)).astype(np.uint8)
    if bits == 5:  # each block's 16 bytes, then the fifth bits as a little-endian 32-bit word
        fifth = ((u >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
        word = np.bitwise_or.reduce(fifth, axis=2).astype("<u4").view(np.uint8).reshape(x.shape[0], nb, 4)
        packed = np.concatenate([packed, word], axis=2)
    return packed.reshape(x.shape[0], -1).tobytes(), s16.view("<u2").tobytes()


FITTED = {  # bits -> (t's lowest, t's highest, the zero's unit u, span, guard, bytes per block)
    4: (-8, 7, 8, 15, 14, 18),
    5: (-16, 15, 4, 31, 30, 22),
}


def fitted_fit(v, d, sc, z, bits=4):
    """q4z's (bits 4) or q5z's (bits 5) fit at step d * sc and zero z for blocks v [N, 32]: (t [N,
    32], squared error [N]), the error summed in k's order as the format says (not numpy's
    pairwise sum)."""
    tlo, thi, u = FITTED[bits][:3]
    inv = F32(1) / F32(u)
    s = (d * sc).astype(F32)
    step, zf = (s * inv).astype(F32), (z * inv).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.clip(np.rint((v / s[:, None]).astype(F32) - zf[:, None]), tlo, thi).astype(F32)
    e = (v - step[:, None] * (F32(u) * t + z[:, None])).astype(F32)
    err = np.zeros(v.shape[0], dtype=F32)
    for k in range(32):
        err = (err + e[:, k] * e[:, k]).astype(F32)
    return t, err


def fitted_refit(v, t, d, bits=4):
    """(ok, sc, z) of the least-squares line v ~ a t + c, sums in k's order."""
    u = FITTED[bits][2]
    st, stt, sv, stv = (np.zeros(v.shape[0], dtype=F32) for _ in range(4))
    for k in range(32):
        st = (st + t[:, k]).astype(F32)
        stt = (stt + t[:, k] * t[:, k]).astype(F32)
        sv = (sv + v[:, k]).astype(F32)
        stv = (stv + t[:, k] * v[:, k]).astype(F32)
    n = F32(32)
    det = (n * stt - st * st).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = ((n * stv - st * sv).astype(F32) / det).astype(F32)
        c = ((sv - a * st).astype(F32) / n).astype(F32)
        ok = (det > 0) & (a > 0)
        sc = np.clip(np.rint((a / d).astype(F32)), 1, 255).astype(F32)
        z = np.clip(np.rint((F32(u) * c / (d * sc).astype(F32)).astype(F32)), -63, 63).astype(F32)
    return ok, sc, z


def fitted_oracle(x, bits=4):
    """-> (U8 bytes [n, B*18] (q5z: B*22), F16 super-scale bytes [n, ceil(B/8)]): the q4z / q5z
    search (gemm_int8.h)"""
    u, span, guard, block_bytes = FITTED[bits][2:]
    blk, nb = blocks(x)
    n, nsb = x.shape[0], -(-nb // 8)
    lo, hi = blk.min(axis=2), blk.max(axis=2)
    r = np.maximum((hi - lo).astype(F32) / F32(span), np.maximum(-lo, hi) / F32(guard)).astype(F32)
    rpad = np.zeros((n, nsb * 8), dtype=F32)
    rpad[:, :nb] = r
    rmax = (rpad.reshape(n, nsb, 8).max(axis=2) + F32(0)).astype(F32)  # never -0
    d16 = (rmax / F32(255)).astype(F32).astype(np.float16)
    assert np.all(np.isfinite(d16)), "an F16 super-scale overflowed: not in this test's data"
    d = np.repeat(d16.astype(F32), 8, axis=1)[:, :nb].reshape(-1)
    v, lo, hi, r = blk.reshape(-1, 32), lo.reshape(-1), hi.reshape(-1), r.reshape(-1)
    live = d > 0
    dd = np.where(live, d, F32(1)).astype(F32)
    best_err = np.full(v.shape[0], np.inf, dtype=F32)
    best_sc, best_z = np.zeros_like(best_err), np.zeros_like(best_err)

    def consider(sc, z, mask):
        t, err = fitted_fit(v, dd, sc, z, bits)
        better = mask & (err < best_err)
        best_err[better], best_sc[better], best_z[better] = err[better], sc[better], z[better]
        return t

    sc0 = np.clip(np.rint((r / dd).astype(F32)), 1, 255).astype(F32)
    for f in (F32(1), F32(0.98), F32(0.96)):
        sc = np.clip(np.rint((sc0 * f).astype(F32)), 1, 255).astype(F32)
        with np.errstate(over="ignore"):
            mid = ((lo + hi).astype(F32) / (F32(2) * (dd * sc).astype(F32))).astype(F32)
            z0 = np.rint((F32(u) * (mid + F32(0.5))).astype(F32))
        for dz in (F32(-1), F32(0), F32(1)):
            z = np.clip(z0 + dz, -63, 63).astype(F32)
            t = consider(sc, z, live)
            ok, sc2, z2 = fitted_refit(v, t, dd, bits)
            consider(sc2, z2, live & ok)
    t, _ = fitted_fit(v, dd, best_sc, best_z, bits)
    t[~live] = 0
    q = t.astype(np.int8).view(np.uint8)
    nib = (q & 0x0F).reshape(-1, 16, 2)
    parts = [(nib[..., 0] | (nib[..., 1] << 4)).astype(np.uint8)]
    if bits == 5:  # the fifth bits as a little-endian 32-bit word after the nibbles
        fifth = ((q >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
        parts.append(np.bitwise_or.reduce(fifth, axis=1).astype("<u4").view(np.uint8).reshape(-1, 4))
    tail = np.stack([best_sc.astype(np.uint8), best_z.astype(np.int8).view(np.uint8)], axis=1)
    tail[~live] = 0
    parts.append(tail)
    out = np.concatenate(parts, axis=1)
    assert out.shape[1] == block_bytes
    return out.reshape(n, nb * block_bytes).tobytes(), d16.view("<u2").tobytes()


def expected_parts(full_name, raw, rows, cols, parts):
    """The oracle's replacement tensors for one reduced projection: [(name, dtype, shape, raw)]."""
    x = bf16_rows(raw, rows, cols)
    nb = -(-cols // 32)
    out = []
    for r0, r1, kind in parts:
        n = r1 - r0
        name = f"{full_name}@{r0}-{r1}.{kind}"
        if kind == "bf16":
            out.append((name, "BF16", [n, cols], raw[r0 * cols * 2:r1 * cols * 2]))
        elif kind == "q8":
            data, scale = q8_oracle(x[r0:r1])
            out += [(name, "I8", [n, nb * 32], data), (name + ".scale", "F32", [n, nb], scale)]
        elif kind in ("q4z", "q5z"):
            bits = 5 if kind == "q5z" else 4
            data, scale = fitted_oracle(x[r0:r1], bits)
            out += [(name, "U8", [n, nb * FITTED[bits][5]], data),
                    (name + ".scale", "F16", [n, -(-nb // 8)], scale)]
        else:
            bits = 5 if kind == "q5" else 4
            data, scale = q4_oracle(x[r0:r1], bits)
            out += [(name, "U8", [n, nb * (20 if bits == 5 else 16)], data),
                    (name + ".scale", "F16", [n, nb], scale)]
    return out


# ---- the model the tests share ----

class Source:
    def __init__(self, bundle):
        self.bundle = bundle
        self.cfg = text_config(bundle)
        self.layers = self.cfg["num_hidden_layers"]
        with open(os.path.join(bundle, INDEX)) as f:
            self.index = json.load(f)
        names = [n for n in self.index["weight_map"] if n.endswith("embed_tokens.weight")]
        assert len(names) == 1, names
        self.prefix = names[0][:-len("embed_tokens.weight")]
        self.shards = sorted(set(self.index["weight_map"].values()))
        self.st = {s: read_st(os.path.join(bundle, s)) for s in self.shards}
        self.classes = projection_classes(self.cfg)
        with open(os.path.join(bundle, MANIFEST), "rb") as f:
            self.manifest_bytes = f.read()
        self.manifest = json.loads(self.manifest_bytes)

    def tensor(self, rel):
        name = self.prefix + rel
        return self.st[self.index["weight_map"][name]]["t"][name]

    def plan(self, q8, q4, q5=frozenset(), q4z=frozenset(), q5z=frozenset()):
        """{name without prefix: [(row0, row1, kind)]} for every big projection."""
        out = {}
        for rel, (layer, classes) in self.classes.items():
            dtype, shape, _ = self.tensor(rel)
            assert dtype == "BF16" and len(shape) == 2, (rel, dtype, shape)
            if classes[-1][2] is not None:
                assert shape[0] == classes[-1][2], (rel, shape, "in_proj_qkv rows != q + k + v")
            out[rel] = row_parts(layer, classes, shape[0], q8, q4, q5, q4z, q5z)
        return out

    def expected_shard(self, shard, plan):
        src = self.st[shard]
        assert src["order"] == src["by_offset"]
        entries = []
        for name in src["order"]:
            dtype, shape, raw = src["t"][name]
            rel = name[len(self.prefix):] if name.startswith(self.prefix) else None
            parts = plan.get(rel)
            if parts is None or parts == [(0, shape[0], "bf16")]:
                entries.append((name, dtype, shape, raw))
            else:
                entries += expected_parts(name, raw, shape[0], shape[1], parts)
        return entries


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    _, bundle = synth_bundle(tmp_path_factory.mktemp("quant_src"), "--seed", 21, "--hidden", HIDDEN,
                             "--intermediate", INTERMEDIATE)
    return Source(bundle)


@pytest.fixture(scope="module")
def quantized(source, tmp_path_factory):
    """quantized(key, *args) -> a bundle made once per key by `kev quantize ... *args`."""
    root = tmp_path_factory.mktemp("quant_out")
    made = {}

    def get(key, *args):
        if key not in made:
            out = str(root / key)
            run_kev("quantize", "--bundle", source.bundle, "--out", out, "--quiet", *args)
            made[key] = out
        return made[key]
    return get


def q4_bundle(quantized):
    return quantized("q4", "--format", "q4")


def q8_bundle(quantized):
    return quantized("q8", "--format", "q8")


def levels():
    report = json.loads(run_kev("cpu", env=NO_CAP).stdout)
    return [k for k in ("portable", "avx2", "avx512", "neon") if report["supported"].get(k)]


def level_env(level):
    env = dict(NO_CAP, KEV_ISA=level)
    kernels = json.loads(run_kev("cpu", env=env).stdout)["kernels"]
    assert kernels["gemm_int8"] == level, kernels
    return env


# ---- 1. the bytes ----

def check_bundle(source, out, q8, q4, q5=None, q4z=None, q5z=None):
    """Asserts every file of `out` is what the oracle derives for the selection (q8, q4, q5, q4z,
    q5z)."""
    assert sorted(os.listdir(out)) == sorted(os.listdir(source.bundle))
    plan = source.plan(q8, q4, q5 or frozenset(), q4z or frozenset(), q5z or frozenset())
    reduced = {rel for rel, parts in plan.items() if parts != [(0, parts[-1][1], "bf16")]}

    with open(os.path.join(out, INDEX)) as f:
        index = json.load(f)
    weight_map, total = {}, 0
    for shard in source.shards:
        got = read_st(os.path.join(out, shard))
        assert got["meta"] == source.st[shard]["meta"], shard
        want = source.expected_shard(shard, plan)
        assert got["order"] == [e[0] for e in want], shard
        assert got["by_offset"] == got["order"], shard
        for name, dtype, shape, raw in want:
            g = got["t"][name]
            assert (g[0], g[1]) == (dtype, shape), (name, g[:2], (dtype, shape))
            if g[2] != raw:
                a = np.frombuffer(g[2], dtype=np.uint8)
                b = np.frombuffer(raw, dtype=np.uint8)
                bad = np.flatnonzero(a != b)
                raise AssertionError(f"{name}: {bad.size} of {b.size} bytes differ from the oracle, "
                                     f"first at byte {bad[0]} (kev {a[bad[0]]}, oracle {b[bad[0]]})")
            weight_map[name] = shard
            total += len(raw)
    assert index["weight_map"] == weight_map
    if "total_size" in source.index.get("metadata", {}):
        assert index["metadata"]["total_size"] == total
    # every reduced projection has its parts; every other tensor kept its single name
    for rel, parts in plan.items():
        name = source.prefix + rel
        if rel in reduced:
            assert name not in weight_map
            assert all(f"{name}@{r0}-{r1}.{k}" in weight_map for r0, r1, k in parts)
        else:
            assert name in weight_map
    for f in os.listdir(source.bundle):
        if f not in source.shards and f not in (INDEX, MANIFEST):
            assert sha256_file(os.path.join(out, f)) == sha256_file(os.path.join(source.bundle, f)), f

    with open(os.path.join(out, MANIFEST)) as f:
        manifest = json.load(f)
    quant = manifest["quantized"]
    assert quant["rule"] == RULE
    assert parse_spec(quant["q8"], source.layers) == q8, quant["q8"]
    assert parse_spec(quant["q4"], source.layers) == q4, quant["q4"]
    if q5 is None:
        assert "q5" not in quant  # the manifests of q8 / q4 bundles are as they were
    else:
        assert parse_spec(quant["q5"], source.layers) == q5, quant["q5"]
    for kind, sel in (("q4z", q4z), ("q5z", q5z)):
        if sel is None:
            assert kind not in quant
        else:
            assert parse_spec(quant[kind], source.layers) == sel, quant[kind]
    assert quant["source"] == {"manifest_sha256": hashlib.sha256(source.manifest_bytes).hexdigest(),
                               "outputs": source.manifest["outputs"]}
    files = sorted(f for f in os.listdir(out) if f != MANIFEST)
    assert manifest["outputs"] == {f: sha256_file(os.path.join(out, f)) for f in files}

    proc = run_kev("verify", out, check=False)
    assert proc.returncode == 0, proc.stderr
    return plan, reduced


@pytest.mark.parametrize("fmt", ["q4", "q8"])
def test_default_formats_match_the_oracle(source, quantized, fmt):
    out = q4_bundle(quantized) if fmt == "q4" else q8_bundle(quantized)
    q8, q4 = default_sets(fmt, source.layers)
    plan, reduced = check_bundle(source, out, q8, q4)
    kinds = {k for rel in reduced for _, _, k in plan[rel]}
    assert kinds == ({"q8", "q4"} if fmt == "q4" else {"q8", "bf16"}), kinds
    # the spot checks a reader can follow: layer 0 (GDN) and the last full-attention layer
    last = source.layers - 1
    assert source.cfg["layer_types"][last] == "full_attention"
    qkv0 = source.tensor("layers.0.linear_attn.in_proj_qkv.weight")[1][0]
    if fmt == "q4":
        assert plan["layers.0.linear_attn.in_proj_qkv.weight"] == [(0, qkv0, "q8")]
        assert plan[f"layers.{last}.self_attn.o_proj.weight"][0][2] == "q4"
    else:
        assert "layers.0.mlp.up_proj.weight" not in reduced
        assert plan[f"layers.{last}.mlp.down_proj.weight"][0][2] == "q8"


@pytest.mark.parametrize("first", [0, 1])
def test_q8_layers_moves_the_8_bit_layers(source, quantized, first):
    out = quantized(f"q4-first{first}", "--format", "q4", "--q8-layers", str(first))
    q8, q4 = default_sets("q4", source.layers, first)
    assert default_sets("q4", source.layers) != (q8, q4)  # not the default's selection
    plan, _ = check_bundle(source, out, q8, q4)
    qkv0 = source.tensor("layers.0.linear_attn.in_proj_qkv.weight")[1][0]
    q = source.cfg["linear_num_key_heads"] * source.cfg["linear_key_head_dim"]
    want = [(0, qkv0, "q8")] if first else [(0, 2 * q, "q8"), (2 * q, qkv0, "q4")]
    assert plan["layers.0.linear_attn.in_proj_qkv.weight"] == want


@pytest.mark.parametrize("first, five", [(1, 2), (0, 0)])
def test_q5_layers_puts_layers_and_query_key_rows_at_5_bits(source, quantized, first, five):
    out = quantized(f"q4-first{first}-five{five}", "--format", "q4", "--q8-layers", str(first), "--q5-layers",
                    str(five))
    q8, q5, q4 = q5_layer_sets(source.layers, first, five)
    plan, _ = check_bundle(source, out, q8, q4, q5)
    q = source.cfg["linear_num_key_heads"] * source.cfg["linear_key_head_dim"]
    for layer in range(4):  # layers 0-2 are GDN layers
        if source.cfg["layer_types"][layer] != "linear_attention":
            continue
        rows = source.tensor(f"layers.{layer}.linear_attn.in_proj_qkv.weight")[1][0]
        kind = "q8" if layer < first else "q5" if layer < first + five else None
        want = [(0, rows, kind)] if kind else [(0, 2 * q, "q5"), (2 * q, rows, "q4")]
        assert plan[f"layers.{layer}.linear_attn.in_proj_qkv.weight"] == want, layer


@pytest.mark.parametrize("args, needles", [
    (("--q8-layers", "LAYERS+1"), ("--q8-layers", "layers")),
    (("--format", "q8", "--q8-layers", "1"), ("--q8-layers", "q8")),
    (("--q8-layers", "1", "--q8", "none", "--q4", "all"), ("--q8-layers", "--q8 / --q4")),
    (("--format", "q8", "--q5-layers", "1"), ("--q5-layers", "q8")),
    (("--q8-layers", "2", "--q5-layers", "LAYERS-1"), ("--q8-layers 2", "--q5-layers", "layers")),
    (("--q5-layers", "1", "--q5", "none", "--q8", "all", "--q4", "none"), ("--q5-layers", "--q5")),
], ids=["past-the-layers", "q8-format", "with-specs", "q5-q8-format", "q5-past-the-layers",
        "q5-with-specs"])
def test_bad_q8_layers_are_refused(source, tmp_path, args, needles):
    args = [str(source.layers + 1) if a == "LAYERS+1" else str(source.layers - 1) if a == "LAYERS-1" else a
            for a in args]
    proc = refuse(str(tmp_path), source.bundle, *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)
    assert_nothing_left(str(tmp_path))


CUSTOM = {
    # the brief's example: GDN in_proj_qkv becomes a bf16 part (q, k) and a q4 part (v)
    "custom_a": ("mlp_down@3-5", "gdn_v,attn_o@0-7"),
    # three kinds in one in_proj_qkv (layer 1: q4 q, q8 k, bf16 v), aliases, single layers
    "custom_b": ("gdn_k@0-2,gdn_qkv@30-31,mlp_gate@31-31", "gdn_q@1-4,mlp_up"),
    "custom_c": ("none", "all"),
}


@pytest.mark.parametrize("key", sorted(CUSTOM))
def test_custom_specs_match_the_oracle(source, quantized, key):
    spec8, spec4 = CUSTOM[key]
    out = quantized(key, "--q8", spec8, "--q4", spec4)
    q8, q4 = parse_spec(spec8, source.layers), parse_spec(spec4, source.layers)
    plan, _ = check_bundle(source, out, q8, q4)
    q = source.cfg["linear_num_key_heads"] * source.cfg["linear_key_head_dim"]
    rows = source.tensor("layers.0.linear_attn.in_proj_qkv.weight")[1][0]
    if key == "custom_a":
        assert plan["layers.0.linear_attn.in_proj_qkv.weight"] == [(0, 2 * q, "bf16"), (2 * q, rows, "q4")]
        with open(os.path.join(out, INDEX)) as f:
            names = [n for n in json.load(f)["weight_map"] if "layers.0.linear_attn.in_proj_qkv" in n]
        assert sorted(n[len(source.prefix):] for n in names) == sorted([
            f"layers.0.linear_attn.in_proj_qkv.weight@0-{2 * q}.bf16",
            f"layers.0.linear_attn.in_proj_qkv.weight@{2 * q}-{rows}.q4",
            f"layers.0.linear_attn.in_proj_qkv.weight@{2 * q}-{rows}.q4.scale"])
    elif key == "custom_b":
        assert plan["layers.1.linear_attn.in_proj_qkv.weight"] == [(0, q, "q4"), (q, 2 * q, "q8"),
                                                                   (2 * q, rows, "bf16")]
        assert plan["layers.0.linear_attn.in_proj_qkv.weight"] == [(0, q, "bf16"), (q, 2 * q, "q8"),
                                                                   (2 * q, rows, "bf16")]


@pytest.mark.parametrize("five", ["q5", "q5z", "both"])
def test_q5_specs_match_the_oracle(source, quantized, decisions, five):
    """--q5 / --q5z: rows at 5 bits (q5's rule, or q5z's fitted step and zero) beside q8 and q4
    ones (four kinds in one in_proj_qkv: layer 1 has a 5-bit query, a q8 key and a q4 value; layer
    2 a 5-bit query and key beside a bf16 value); both flags at once split the 5-bit rows between
    the rules. Its answers do not depend on the kernel level."""
    spec8, spec5, spec4 = "gdn_k@0-1", "gdn_q@0-2,gdn_k@2-2,mlp_down", "gdn_v@1-1,attn_o"
    if five == "both":
        flags, spec5, spec5z = ["--q5", "gdn_q@0-2", "--q5z", "gdn_k@2-2,mlp_down"], "gdn_q@0-2", "gdn_k@2-2,mlp_down"
    else:
        flags, spec5z = [f"--{five}", spec5], spec5
        spec5, spec5z = (spec5, None) if five == "q5" else (None, spec5z)
    out = quantized(f"custom_{five}", "--q8", spec8, "--q4", spec4, *flags)
    q8, q4 = parse_spec(spec8, source.layers), parse_spec(spec4, source.layers)
    q5, q5z = (None if s is None else parse_spec(s, source.layers) for s in (spec5, spec5z))
    plan, reduced = check_bundle(source, out, q8, q4, q5, None, q5z)
    q = source.cfg["linear_num_key_heads"] * source.cfg["linear_key_head_dim"]
    rows = source.tensor("layers.1.linear_attn.in_proj_qkv.weight")[1][0]
    k1 = "q5" if five != "q5z" else "q5z"  # layer 1's query; layer 2's key is q5z unless only --q5
    k2 = "q5" if five == "q5" else "q5z"
    assert plan["layers.1.linear_attn.in_proj_qkv.weight"] == [(0, q, k1), (q, 2 * q, "q8"), (2 * q, rows, "q4")]
    want2 = [(0, 2 * q, k1)] if k1 == k2 else [(0, q, k1), (q, 2 * q, k2)]
    assert plan["layers.2.linear_attn.in_proj_qkv.weight"] == want2 + [(2 * q, rows, "bf16")]
    want = score(out, decisions, "--threads", "1", env=level_env("portable"))
    best = levels()[-1]
    assert score(out, decisions, "--threads", "2", env=level_env(best)) == want, best
    assert want != score(source.bundle, decisions)  # the 5-bit rows are in effect


@pytest.mark.parametrize("first, five", [(None, None), (1, 1)])
def test_q4z_format_matches_the_oracle(source, quantized, decisions, first, five):
    """--format q4z: q4's selection with its 4-bit rows by the q4z rule (a fitted step and zero
    per block, F16 scales per 8 blocks) and its 5-bit ones by the q5z rule; with --q8-layers /
    --q5-layers, q8, q5z and q4z rows side by side. Its answers do not depend on the kernel level
    or the threads."""
    args = ["--format", "q4z"] + ([] if first is None else ["--q8-layers", str(first), "--q5-layers", str(five)])
    out = quantized(f"q4z-{first}-{five}", *args)
    if first is None:
        (q8, q4z), q5z = default_sets("q4", source.layers), None
    else:
        q8, q5z, q4z = q5_layer_sets(source.layers, first, five)
    plan, reduced = check_bundle(source, out, q8, set(), None, q4z, q5z)
    kinds = {k for rel in reduced for _, _, k in plan[rel]}
    assert kinds == ({"q8", "q4z"} if first is None else {"q8", "q5z", "q4z"}), kinds
    if first is None:  # q4z is kev quantize's default format
        with open(os.path.join(out, MANIFEST)) as f, open(os.path.join(quantized("default"), MANIFEST)) as g:
            assert json.load(f)["outputs"] == json.load(g)["outputs"]
        return
    want = score(out, decisions, "--threads", "1", env=level_env("portable"))
    best = levels()[-1]
    assert score(out, decisions, "--threads", "2", env=level_env(best)) == want, best
    assert want != score(source.bundle, decisions)  # the fitted rows are in effect


def decode_fitted(data, scale, bits):
    """(t [32], sc, z, d) of the first block of a fitted row, read as the format describes."""
    b = np.frombuffer(data, dtype=np.uint8)
    t = np.empty(32, dtype=np.int32)
    t[0::2], t[1::2] = (b[:16] & 0xF), (b[:16] >> 4)
    if bits == 5:
        word = int.from_bytes(b[16:20].tobytes(), "little")
        t |= np.array([(word >> k) & 1 for k in range(32)], dtype=np.int32) << 4
    t = np.where(t >= (1 << (bits - 1)), t - (1 << bits), t)
    tail = FITTED[bits][5] - 2
    return t.astype(F32), F32(b[tail]), F32(b[tail + 1].astype(np.int8)), F32(np.frombuffer(scale, dtype="<f2")[0])


@pytest.mark.parametrize("bits", [4, 5])
def test_fitted_oracles_on_hand_values(bits):
    """The q4z / q5z oracle on a block whose answer is known by hand: values on a grid of step
    1/8 with 16 (q5z: 32) levels, from -L/16 to (L-1)/16, are stored exactly, with d = f16(r /
    255) where r = max(span / (L - 1), largest / (L - 2)) = 1/8, and sc, z that make
    d sc / u (u t + z) hit every level (u = 8, q5z 4)."""
    levels, u = 1 << bits, FITTED[bits][2]
    row = np.zeros((1, 32), dtype=F32)
    grid = np.arange(-levels // 2, levels // 2, dtype=F32) / F32(8)
    row[0, :] = np.resize(np.concatenate([grid, grid[::-1]]), 32)
    data, scale = fitted_oracle(row, bits)
    t, sc, z, d = decode_fitted(data, scale, bits)
    assert d == F32(np.float16(0.125 / 255))
    back = d * sc / F32(u) * (F32(u) * t + z)
    assert np.abs(back - row[0]).max() < 0.02 * 0.125, (sc, z, back - row[0])
    # a block of one value: r = |v| / (L - 2), the grid shifted by z (clamped at 63) to reach it
    row[0, :] = 0.7
    data, scale = fitted_oracle(row, bits)
    t, sc, z, d = decode_fitted(data, scale, bits)
    assert abs(d * sc / F32(u) * (F32(u) * t[0] + z) - F32(0.7)) < 0.7 / 50, (d, sc, z, t[0])


def test_oracle_rules_on_edge_values():
    """The oracle itself, on values whose answer is known by hand (ties, zero blocks, clamps)."""
    row = np.zeros((1, 40), dtype=F32)
    row[0, :4] = [127.0, 0.5, -0.5, 1.5]  # amax 127: inv 1, ties to even: 0, -0, 2
    row[0, 32:34] = [0.0, 0.0]  # the second block is all zero (and padded)
    data, scale = q8_oracle(row)
    q = np.frombuffer(data, dtype=np.int8)
    assert list(q[:4]) == [127, 0, 0, 2] and not q[4:].any()
    assert list(np.frombuffer(scale, dtype="<f4")) == [1.0, 0.0]
    row = np.zeros((1, 32), dtype=F32)
    row[0, :4] = [8.0, -3.5, 2.5, -8.0]  # m = 8 (the first): s = -1; -8, 4, -2 (ties to even), 8 -> 7
    data, scale = q4_oracle(row)
    assert list(np.frombuffer(data, dtype=np.uint8)[:2]) == [0x48, 0x7E] and len(data) == 16
    assert np.frombuffer(scale, dtype="<f2")[0] == -1.0
    row[0, :4] = [-0.5, 0.25, 0.0, 0.1875]  # m = -0.5: s = 1/16; -8, 4, 0, 3
    data, scale = q4_oracle(row)
    assert list(np.frombuffer(data, dtype=np.uint8)[:2]) == [0x48, 0x30]
    assert np.frombuffer(scale, dtype="<f2")[0] == 0.0625
    row[0, :6] = [16.0, -3.5, 2.5, -16.0, 0.0, 9.0]  # q5: s = -1; -16, 4, -2, 16 -> 15, 0, -9
    data, scale = q4_oracle(row, bits=5)
    b = np.frombuffer(data, dtype=np.uint8)
    assert len(data) == 20 and list(b[:3]) == [0x40, 0xFE, 0x70] and list(b[16:]) == [0x25, 0, 0, 0]
    assert np.frombuffer(scale, dtype="<f2")[0] == -1.0


# ---- 2. the same bytes everywhere ----

@pytest.mark.parametrize("fmt", ["q4", "q4z"])
def test_bytes_do_not_depend_on_kernel_level_or_threads(source, quantized, tmp_path, fmt):
    made = q4_bundle(quantized) if fmt == "q4" else quantized("q4z-None-None", "--format", "q4z")
    with open(os.path.join(made, MANIFEST)) as f:
        want = json.load(f)["outputs"]
    variants = [("portable", dict(NO_CAP, KEV_ISA="portable"), ()), ("threads1", None, ("--threads", "1")),
                ("threads3", None, ("--threads", "3"))]
    for name, env, extra in variants:
        out = str(tmp_path / name)
        run_kev("quantize", "--bundle", source.bundle, "--out", out, "--quiet", "--format", fmt, *extra, env=env)
        with open(os.path.join(out, MANIFEST)) as f:
            assert json.load(f)["outputs"] == want, name


# ---- 3. scoring ----

@pytest.fixture(scope="module")
def decisions():
    with open(os.path.join(kevtest.SOURCE_DIR, "examples", "typed-decisions.jsonl")) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    return "\n".join(lines[:SCORE_LINES]) + "\n"


def score(bundle, text, *extra, env=None, precision="int8"):
    proc = run_kev("score", "--bundle", bundle, "--jsonl", "--decimals", "-1", "--precision", precision,
                   *extra, input=text, env=env)
    answers = [json.loads(l) for l in proc.stdout.splitlines()]
    assert len(answers) == SCORE_LINES
    for a in answers:
        assert "answers" in a, a
        a.pop("latency_ms")
    return answers


def test_q8_bundle_answers_as_its_source_in_int8(source, quantized, decisions):
    q8 = q8_bundle(quantized)
    for level in levels():
        env = level_env(level)
        assert score(q8, decisions, env=env) == score(source.bundle, decisions, env=env), level


def test_q4_bundle_answers_are_the_same_on_every_level_and_thread_count(quantized, decisions):
    q4 = q4_bundle(quantized)
    want = score(q4, decisions, "--threads", "1", env=level_env("portable"))
    for level in levels():
        for threads in ("1", "2"):
            assert score(q4, decisions, "--threads", threads, env=level_env(level)) == want, (level, threads)


# Every int8 kernel name a build may register (precision_kernels.h; `kev cpu` lists what runs).
INT8_KERNELS = ("portable", "avx2", "avx512bw", "avx512vnni", "avx512vnni-emulated", "amxint8",
                "amxint8-emulated", "neon")
# The byte kernels: 8-bit activations (`--precision w8a8`) only; int8 keeps its own kernel.
BYTE_KERNELS = ("avx512vnni-a8", "avx512vnni-a8-emulated", "avxvnni-a8", "avxvnni-a8-emulated",
                "neon-dotprod")


def test_every_int8_kernel_by_name_answers_alike(quantized, decisions):
    """KEV_INT8_KERNEL runs the named int8 kernel: each one this CPU runs (on x86-64 at least the
    AMX kernel's emulation, and the AMX kernel itself where the CPU and OS offer it) answers the q4
    bundle bit for bit as the portable kernel; a name this CPU cannot run, or no kernel's name, is
    refused at start-up."""
    q4 = q4_bundle(quantized)
    want = score(q4, decisions, env=dict(NO_CAP, KEV_INT8_KERNEL="portable"))
    ran = []
    for name in INT8_KERNELS:
        env = dict(NO_CAP, KEV_INT8_KERNEL=name)
        cpu = run_kev("cpu", env=env, check=False)
        if cpu.returncode != 0:
            assert cpu.returncode == 2 and "KEV_INT8_KERNEL=" + name in cpu.stderr, (name, cpu.stderr)
            continue
        assert json.loads(cpu.stdout)["kernels"]["gemm_int8_kernel"] == name
        assert score(q4, decisions, "--threads", "2", env=env) == want, name
        ran.append(name)
    if json.loads(run_kev("cpu", env=NO_CAP).stdout)["arch"] == "x86-64":
        assert "amxint8-emulated" in ran, ran
    # w8a8 through every kernel (the byte kernels among them) answers alike too, and not as int8.
    want8 = score(q4, decisions, env=dict(NO_CAP, KEV_INT8_KERNEL="portable"), precision="w8a8")
    assert want8 != want
    for name in INT8_KERNELS + BYTE_KERNELS:
        env = dict(NO_CAP, KEV_INT8_KERNEL=name)
        cpu = run_kev("cpu", env=env, check=False)
        if cpu.returncode != 0:
            continue
        kernels = json.loads(cpu.stdout)["kernels"]
        assert kernels["gemm_int8_a8_kernel"] == name
        if name in BYTE_KERNELS:
            assert kernels["gemm_int8_kernel"] != name
        assert score(q4, decisions, "--threads", "2", env=env, precision="w8a8") == want8, name
        ran.append(name)
    if json.loads(run_kev("cpu", env=NO_CAP).stdout)["arch"] == "x86-64":
        assert {"avx512vnni-a8-emulated", "avxvnni-a8-emulated"} <= set(ran), ran
    proc = run_kev("score", "--bundle", q4, "--jsonl", "--precision", "int8", input=decisions,
                   env=dict(NO_CAP, KEV_INT8_KERNEL="avx1024"), check=False)
    assert proc.returncode == 2 and "no such int8 kernel" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("precision", [None, "fp32", "bf16"])
def test_quantized_bundle_refuses_other_precisions(quantized, decisions, precision):
    extra = () if precision is None else ("--precision", precision)
    for bundle in (q4_bundle(quantized), q8_bundle(quantized)):
        proc = run_kev("score", "--bundle", bundle, "--jsonl", *extra, input=decisions, check=False)
        assert proc.returncode == 5, (precision, proc.returncode, proc.stderr)
        assert "--precision int8" in proc.stderr, proc.stderr
        assert proc.stdout == ""


def test_served_quantized_bundle_says_so_and_answers_as_kev_score(quantized, decisions):
    """kev serve on a q4 bundle: /v1/models says how the weights are stored, and each answer is
    kev score's for the same request."""
    q4 = q4_bundle(quantized)
    want = score(q4, decisions)
    server = kevtest.ServeProcess(q4, "--precision", "int8", "--decimals", "-1")
    try:
        status, _, models = server.request("GET", "/v1/models")
        assert status == 200
        assert {m["weights"] for m in models["models"]} == {"q4+q8"}
        assert {m["dtype"] for m in models["models"]} == {"int8"}
        for line, w in zip(decisions.splitlines(), want):
            status, _, got = server.score(json.loads(line))
            assert status == 200, got
            got.pop("latency_ms")
            assert got == w
    finally:
        server.close()


# ---- 4. refusals that leave nothing behind ----

def refuse(parent, bundle, *args, env=None):
    """Runs kev quantize into parent/out; returns the process."""
    out = os.path.join(parent, "out")
    return run_kev("quantize", "--bundle", bundle, "--out", out, "--quiet", *args, check=False, env=env)


def assert_nothing_left(parent, allowed=()):
    assert sorted(os.listdir(parent)) == sorted(allowed), os.listdir(parent)
    assert not glob.glob(os.path.join(parent, ".*kev-staging*")), os.listdir(parent)


def test_existing_out_is_refused(source, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    proc = refuse(str(tmp_path), source.bundle)
    assert proc.returncode == 2, proc.stderr
    assert "exists" in proc.stderr, proc.stderr
    assert_nothing_left(str(tmp_path), ["out"])
    assert os.listdir(out) == ["mine.txt"] and (out / "mine.txt").read_text() == "keep"


def test_damaged_source_is_refused_as_verify_refuses_it(source, tmp_path):
    damaged = str(tmp_path / "damaged")
    shutil.copytree(source.bundle, damaged)
    shard = os.path.join(damaged, source.shards[-1])
    with open(shard, "r+b") as f:
        size = f.seek(0, 2)
        f.seek(size - 1001)
        b = f.read(1)
        f.seek(size - 1001)
        f.write(bytes([b[0] ^ 0x10]))
    verify = run_kev("verify", damaged, check=False)
    assert verify.returncode not in (0, 1) and verify.returncode < 128, verify.stderr
    parent = tmp_path / "parent"
    parent.mkdir()
    proc = refuse(str(parent), damaged)
    assert proc.returncode == verify.returncode, (proc.returncode, verify.returncode, proc.stderr)
    assert source.shards[-1] in proc.stderr, proc.stderr
    assert_nothing_left(str(parent))


def test_quantized_source_is_refused(quantized, tmp_path):
    proc = refuse(str(tmp_path), q4_bundle(quantized))
    assert proc.returncode not in (0, 1) and proc.returncode < 128, proc.stderr
    assert "quantized" in proc.stderr, proc.stderr
    assert_nothing_left(str(tmp_path))


@pytest.mark.parametrize("args, needles", [
    (("--q8", "mlp_up@3-5", "--q4", "mlp_up@5-6"), ("--q8", "--q4", "mlp_up")),
    (("--q8", "all@0-0", "--q4", "gdn_qkv@0-0"), ("--q8", "--q4")),
    (("--format", "q8", "--q8", "gdn_v", "--q4", "gdn_qkv@30-30"), ("--q8", "--q4", "gdn_v")),
    (("--q8", "mlp_sideways", "--q4", "none"), ("--q8", "mlp_sideways")),
    (("--q8", "none", "--q4", "attn_q,mlp_sideways@1-2"), ("--q4", "mlp_sideways")),
    (("--q8", "mlp_up@3-32", "--q4", "none"), ("--q8", "mlp_up@3-32")),
    (("--q8", "none", "--q4", "attn_o@40-41"), ("--q4", "attn_o@40-41")),
    (("--q8", "none", "--q4", "mlp_up@3-5", "--q5", "mlp_up@5-6"), ("--q5", "--q4", "mlp_up")),
    (("--q8", "gdn_qkv@2-2", "--q4", "none", "--q5", "gdn_k@0-3"), ("--q8", "--q5", "gdn_k")),
    (("--q8", "none", "--q4", "none", "--q5", "mlp_sideways"), ("--q5", "mlp_sideways")),
    (("--q8", "none", "--q4", "none", "--q4z", "mlp_up@3-5", "--q5z", "mlp_up@5-6"), ("--q5z", "--q4z", "mlp_up")),
    (("--q8", "none", "--q4", "none", "--q5", "gdn_k@1-1", "--q5z", "gdn_qkv@0-2"), ("--q5", "--q5z", "gdn_k")),
    (("--q8", "none", "--q4", "none", "--q5z", "attn_o@40-41"), ("--q5z", "attn_o@40-41")),
], ids=["overlap", "overlap-aliases", "overlap-q8-format", "unknown-q8", "unknown-q4", "range-q8",
        "range-q4", "overlap-q5-q4", "overlap-q8-q5", "unknown-q5", "overlap-q5z-q4z", "overlap-q5-q5z",
        "range-q5z"])
def test_bad_specs_are_refused(source, tmp_path, args, needles):
    # the oracle agrees: the specs are refused, or they select rows of one layer twice
    flags = ("--q8", "--q4", "--q5", "--q4z", "--q5z")
    specs = [args[args.index(f) + 1] if f in args else "none" for f in flags]
    try:
        sets = [parse_spec(s, source.layers) for s in specs]
        present = {(c, layer) for layer, classes in source.classes.values() for c, _, _ in classes}
        assert any(sets[i] & sets[j] & present for i in range(len(sets)) for j in range(i + 1, len(sets)))
    except ValueError:
        pass
    proc = refuse(str(tmp_path), source.bundle, *args)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr)
    assert_nothing_left(str(tmp_path))


# ---- 5. damaged quantized bundles ----

def rewrite(bundle, dest, edit):
    """Copies `bundle` to dest and rewrites the shard holding tensor `edit.target`: its tensors
    become edit(entries) (entries: [(name, dtype, shape, raw)] in order), and the index's
    weight_map lists that shard's new names."""
    shutil.copytree(bundle, dest)
    with open(os.path.join(dest, INDEX)) as f:
        index = json.load(f)
    shard = index["weight_map"][edit.target]
    st = read_st(os.path.join(dest, shard))
    entries = [(n, *st["t"][n]) for n in st["order"]]
    entries = edit(entries)
    write_st(os.path.join(dest, shard), entries, st["meta"])
    wm = {n: s for n, s in index["weight_map"].items() if s != shard}
    wm.update({e[0]: shard for e in entries})
    index["weight_map"] = dict(sorted(wm.items()))
    with open(os.path.join(dest, INDEX), "w") as f:
        json.dump(index, f)


def edits(source):
    """{case: (projection name, edit)} on the q4 bundle's tensors."""
    p = source.prefix
    q = source.cfg["linear_num_key_heads"] * source.cfg["linear_key_head_dim"]
    qkv = p + "layers.8.linear_attn.in_proj_qkv.weight"  # q8 rows [0, 2q), q4 rows [2q, end)
    up = p + "layers.10.mlp.up_proj.weight"
    up_rows = source.tensor("layers.10.mlp.up_proj.weight")[1][0]
    up_q4 = f"{up}@0-{up_rows}.q4"

    def keep(entries):
        return entries
    keep.target = up_q4

    def drop_scale(entries):
        return [e for e in entries if e[0] != up_q4 + ".scale"]
    drop_scale.target = up_q4

    def short_part(entries):  # the q4 part one row short of its name
        out = []
        for n, d, s, raw in entries:
            if n == up_q4:
                s, raw = [s[0] - 1, s[1]], raw[:(s[0] - 1) * s[1]]
            out.append((n, d, s, raw))
        return out
    short_part.target = up_q4

    def f32_scale(entries):  # the q4 scale stored as F32 instead of F16
        out = []
        for n, d, s, raw in entries:
            if n == up_q4 + ".scale":
                d, raw = "F32", np.frombuffer(raw, dtype="<f2").astype("<f4").tobytes()
            out.append((n, d, s, raw))
        return out
    f32_scale.target = up_q4

    def as_q5(entries):  # the q4 part (and its scale) renamed q5: 16 bytes a block, not 20
        return [(n.replace(up_q4, up_q4[:-1] + "5"), d, s, raw) for n, d, s, raw in entries]
    as_q5.target = up_q4

    def as_q4z(entries):  # renamed q4z: 16 bytes a block, not 18, and a scale per block, not per 8
        return [(n.replace(up_q4, up_q4 + "z"), d, s, raw) for n, d, s, raw in entries]
    as_q4z.target = up_q4

    def as_q5z(entries):  # renamed q5z: 16 bytes a block, not 22, and a scale per block, not per 8
        return [(n.replace(up_q4, up_q4[:-1] + "5z"), d, s, raw) for n, d, s, raw in entries]
    as_q5z.target = up_q4

    first = f"{qkv}@0-{2 * q}.q8"

    def gap(entries):  # the q8 part (and its scale) one row shorter and renamed: row 2q-1 missing
        out = []
        for n, d, s, raw in entries:
            if n in (first, first + ".scale"):
                row = len(raw) // s[0]
                n = n.replace(f"@0-{2 * q}.", f"@0-{2 * q - 1}.")
                s, raw = [s[0] - 1, s[1]], raw[:(s[0] - 1) * row]
            out.append((n, d, s, raw))
        return out
    gap.target = first

    def missing_part(entries):  # the q8 part and its scale gone: rows [0, 2q) missing
        return [e for e in entries if e[0] not in (first, first + ".scale")]
    missing_part.target = first

    return {"intact-rewrite": (up, keep), "scale-removed": (up, drop_scale), "part-wrong-shape": (up, short_part),
            "scale-wrong-dtype": (up, f32_scale), "q4-named-q5": (up, as_q5),
            "q4-named-q4z": (up, as_q4z), "q4-named-q5z": (up, as_q5z), "rows-gap": (qkv, gap),
            "part-missing": (qkv, missing_part)}


CASES = ["intact-rewrite", "scale-removed", "part-wrong-shape", "scale-wrong-dtype", "q4-named-q5", "q4-named-q4z",
         "q4-named-q5z", "rows-gap", "part-missing"]


@pytest.mark.parametrize("case", CASES)
def test_damaged_quantized_bundle_is_refused_at_load(source, quantized, decisions, tmp_path, case):
    q4 = q4_bundle(quantized)
    plan = source.plan(*default_sets("q4", source.layers))
    assert plan["layers.8.linear_attn.in_proj_qkv.weight"][0][2] == "q8"
    assert plan["layers.10.mlp.up_proj.weight"] == [(0, plan["layers.10.mlp.up_proj.weight"][0][1], "q4")]
    projection, edit = edits(source)[case]
    dest = str(tmp_path / "damaged")
    rewrite(q4, dest, edit)
    one = decisions.splitlines()[0] + "\n"
    proc = run_kev("score", "--bundle", dest, "--jsonl", "--decimals", "-1", "--precision", "int8",
                   input=one, check=False)
    if case == "intact-rewrite":  # the rewriting itself is faithful: kev runs it as before
        assert proc.returncode == 0, proc.stderr
        got = [json.loads(l) for l in proc.stdout.splitlines()]
        got[0].pop("latency_ms")
        want = run_kev("score", "--bundle", q4, "--jsonl", "--decimals", "-1", "--precision", "int8", input=one)
        w = json.loads(want.stdout)
        w.pop("latency_ms")
        assert got == [w]
        return
    print(f"{case}: exit {proc.returncode}: {proc.stderr.strip()}")
    assert proc.returncode not in (0, 1) and proc.returncode < 128, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    rel = projection[len(source.prefix):]
    assert rel in proc.stderr, proc.stderr


# ---- 6. faults and signals mid-quantization leave nothing behind ----

def test_write_failure_leaves_nothing(source, tmp_path):
    # The write fault seam of test builds: the first shard fails a little way in.
    proc = refuse(str(tmp_path), source.bundle, env={"KEV_FAULT_WRITE_AFTER_BYTES": "20000"})
    assert proc.returncode == 4 and "No space left" in proc.stderr, proc.stderr
    assert_nothing_left(str(tmp_path))


def test_a_selection_that_reduces_nothing_is_refused(source, tmp_path):
    proc = refuse(str(tmp_path), source.bundle, "--q8", "none", "--q4", "none")
    assert proc.returncode == 2 and "reduce no projection" in proc.stderr, proc.stderr
    assert_nothing_left(str(tmp_path))


@pytest.fixture(scope="module")
def big_bundle(tmp_path_factory):
    """Wide enough that quantizing takes a noticeable time (signals are sent mid-stream)."""
    _, bundle = kevtest.synth_bundle(tmp_path_factory.mktemp("quant_big"), "--hidden", "512",
                                     "--intermediate", "2048")
    return bundle


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_quantization_leaves_nothing(big_bundle, tmp_path, sig):
    out = str(tmp_path / "out")
    proc = subprocess.Popen([kevtest.KEV_BIN, "quantize", "--bundle", big_bundle, "--out", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        staging = glob.glob(os.path.join(str(tmp_path), ".out.kev-staging.*"))
        if staging and glob.glob(os.path.join(staging[0], "*.safetensors")):
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.002)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
    assert_nothing_left(str(tmp_path))
