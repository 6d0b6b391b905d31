"""`kev forward` against the float64 torch reference (qwen35_reference.py), plus the
reproducibility promises (prefix reuse, batching, GDN forms) and refusal of bad model dirs.

Gates (frozen): max |h_native - h_ref| <= 1e-4 * max(1, |h_ref|) per value;
prefix+row vs one row and row alone vs batched: identical; recurrent vs chunked GDN: <= 1e-5
absolute (see REPORT in docs/performance.md "Backbone parity": FP32 reassociation, measured ~1e-6).
"""
import json
import os
import sys

import pytest
import torch

HERE = os.path.dirname(__file__)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
import kevtest  # noqa: E402
import qwen35_reference as ref  # noqa: E402

ODD = dict(ref.TINY, hidden=80, intermediate=136, layers=8, heads=4, kv_heads=1, head_dim=24,
           lin_k_heads=2, lin_v_heads=6, lin_k_dim=12, lin_v_dim=10, vocab=200, theta=10000.0)
SHAPES = {"tiny": (ref.TINY, 5), "odd": (ODD, 9)}
MAXIMA = {}


def forward(model_dir, tmp_path, payload, *extra, check=True):
    inp = tmp_path / f"in{len(os.listdir(tmp_path))}.json"
    out = tmp_path / f"out{len(os.listdir(tmp_path))}.safetensors"
    inp.write_text(json.dumps(payload))
    proc = kevtest.run_kev("forward", "--bundle", model_dir, "--input", inp, "--output", out, *extra, check=check)
    if not check:
        return proc
    return kevtest.read_safetensors(str(out))


def ids(n, seed, vocab):
    return torch.randint(0, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def gate(native, expected, what):
    err = (native.double() - expected).abs()
    bound = 1e-4 * expected.abs().clamp(min=1.0)
    worst = (err / bound).max().item()
    MAXIMA[what] = max(MAXIMA.get(what, 0.0), err.max().item())
    assert worst <= 1.0, f"{what}: max error {err.max().item():.3e} exceeds the 1e-4 gate"


@pytest.fixture(scope="module", params=sorted(SHAPES))
def model(request, tmp_path_factory):
    dims, seed = SHAPES[request.param]
    path = str(tmp_path_factory.mktemp(request.param) / "model")
    ref.write_model_dir(path, dims, seed=seed)
    tc, w = ref.load_model_dir(path)
    return request.param, dims, path, ref.Reference(tc, w)


def test_parity_with_prefix_rows_and_reuse(model, tmp_path):
    name, dims, path, oracle = model
    v = dims["vocab"]
    prefix = ids(37, 1, v)
    rows = [ids(1, 2, v), ids(70, 3, v), ids(300, 4, v)]
    # A branch with explicit positions restarting inside the prefix range (Kev's sibling rows).
    rows.append(ids(12, 5, v))
    positions = [len(prefix) - 3 + i for i in range(12)]
    payload = {"prefix": prefix, "rows": [{"ids": r} for r in rows[:3]] + [{"ids": rows[3], "positions": positions}]}
    out = {}
    for mode in ("recurrent", "chunked"):
        out[mode] = forward(path, tmp_path, payload, "--with-prefix", "--gdn", mode)
        full = oracle.forward(prefix, list(range(len(prefix))))
        gate(out[mode]["prefix"], full, f"{name}/{mode}/prefix")
        for i, r in enumerate(rows):
            pos = positions if i == 3 else list(range(len(prefix), len(prefix) + len(r)))
            expected = oracle.forward(prefix + r, list(range(len(prefix))) + pos)[len(prefix):]
            assert out[mode][f"row.{i}"].shape == (len(r), dims["hidden"])
            gate(out[mode][f"row.{i}"], expected, f"{name}/{mode}/rows")
    # Recurrent vs chunked: same math, different FP32 association.
    diff = max((out["recurrent"][k] - out["chunked"][k]).abs().max().item() for k in out["recurrent"])
    MAXIMA[f"{name}/recurrent-vs-chunked"] = diff
    assert diff <= 1e-5, diff

    # Prefix + row == the same tokens as one row (bitwise, recurrent form).
    whole = forward(path, tmp_path, {"rows": [{"ids": prefix + rows[1]}]})["row.0"]
    assert torch.equal(whole[len(prefix):], out["recurrent"]["row.1"])
    assert torch.equal(whole[:len(prefix)], out["recurrent"]["prefix"])
    # A row alone == the same row in a batch (and batch order does not matter).
    alone = forward(path, tmp_path, {"prefix": prefix, "rows": [{"ids": rows[1]}]})["row.0"]
    assert torch.equal(alone, out["recurrent"]["row.1"])
    rev = forward(path, tmp_path, {"prefix": prefix, "rows": [{"ids": r} for r in reversed(rows[:3])]})
    for i in range(3):
        assert torch.equal(rev[f"row.{2 - i}"], out["recurrent"][f"row.{i}"])
    # A prefix longer than one prefill chunk (2,048 tokens) == the same tokens as one row.
    long_prefix = ids(2300, 77, v)
    split = forward(path, tmp_path, {"prefix": long_prefix, "rows": [{"ids": rows[1]}]}, "--with-prefix")
    one = forward(path, tmp_path, {"rows": [{"ids": long_prefix + rows[1]}]})["row.0"]
    assert torch.equal(split["prefix"], one[:len(long_prefix)])
    assert torch.equal(split["row.0"], one[len(long_prefix):])
    # Without --with-prefix no prefix row is read (the last layer skips their outputs in every
    # 2,048-token step): the row keeps its bits.
    state_only = forward(path, tmp_path, {"prefix": long_prefix, "rows": [{"ids": rows[1]}]})
    assert "prefix" not in state_only
    assert torch.equal(state_only["row.0"], split["row.0"])
    # More rows than one internal batch holds (4,096 tokens): still each row's own result.
    many = [ids(300, 100 + i, v) for i in range(15)] + [rows[1]]
    big = forward(path, tmp_path, {"prefix": prefix, "rows": [{"ids": r} for r in many]})
    assert torch.equal(big["row.15"], out["recurrent"]["row.1"])
    first = forward(path, tmp_path, {"prefix": prefix, "rows": [{"ids": many[0]}]})["row.0"]
    assert torch.equal(big["row.0"], first)


def test_parity_without_prefix_and_long_chunked(model, tmp_path):
    name, dims, path, oracle = model
    v = dims["vocab"]
    rows = [ids(1, 11, v), ids(130, 12, v)]
    for mode in ("recurrent", "chunked"):
        out = forward(path, tmp_path, {"rows": [{"ids": r} for r in rows]}, "--gdn", mode)
        for i, r in enumerate(rows):
            gate(out[f"row.{i}"], oracle.forward(r, list(range(len(r)))), f"{name}/{mode}/no-prefix")
    # Thread count must not change a single bit.
    one = forward(path, tmp_path, {"rows": [{"ids": rows[1]}]}, "--threads", "1")["row.0"]
    two = forward(path, tmp_path, {"rows": [{"ids": rows[1]}]}, "--threads", "3")["row.0"]
    assert torch.equal(one, two)


def test_prefix_variants_and_single_file(tmp_path):
    dims = dict(ref.TINY, layers=4)
    row = ids(9, 21, dims["vocab"])
    outs = []
    for i, (prefix, shards) in enumerate([("model.language_model.", 2), ("model.", 1), ("", 1)]):
        path = ref.write_model_dir(str(tmp_path / f"m{i}"), dims, seed=4, prefix=prefix, shards=shards)
        outs.append(forward(path, tmp_path, {"rows": [{"ids": row}]})["row.0"])
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_synth_checkpoint_matches_reference(tmp_path):
    """The team's `kev synth` layout (32 layers, real names, two shards) loads and matches."""
    out = tmp_path / "synth"
    kevtest.run_kev("synth", "--out", out, "--seed", "3")
    base = str(out / "base")
    tc, w = ref.load_model_dir(base)
    row = ids(40, 31, tc["vocab_size"])
    got = forward(base, tmp_path, {"rows": [{"ids": row}]})["row.0"]
    gate(got, ref.Reference(tc, w).forward(row, list(range(len(row)))), "synth-tiny/recurrent")


# ---- refusals ----

def bad_dir(tmp_path, mutate=None, config_edit=None, after=None):
    path = ref.write_model_dir(str(tmp_path / "bad"), dict(ref.TINY), seed=2, mutate=mutate)
    if config_edit:
        cfg = json.load(open(os.path.join(path, "config.json")))
        config_edit(cfg["text_config"])
        json.dump(cfg, open(os.path.join(path, "config.json"), "w"))
    if after:
        after(path)
    return path


def refused(tmp_path, path, *needles):
    proc = forward(path, tmp_path, {"rows": [{"ids": [1, 2, 3]}]}, check=False)
    assert proc.returncode != 0, "bad model directory was accepted"
    for n in needles:
        assert n in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc


P = "model.language_model."


def test_refuses_missing_tensor(tmp_path):
    path = bad_dir(tmp_path, mutate=lambda t: t.pop(P + "layers.2.linear_attn.in_proj_z.weight"))
    refused(tmp_path, path, "layers.2.linear_attn.in_proj_z.weight", "missing")


def test_refuses_wrong_shape(tmp_path):
    def m(t):
        t[P + "layers.3.self_attn.q_proj.weight"] = t[P + "layers.3.self_attn.q_proj.weight"][:-1]
    refused(tmp_path, bad_dir(tmp_path, mutate=m), "layers.3.self_attn.q_proj.weight", "shape")


def test_refuses_wrong_dtype(tmp_path):
    def m(t):
        t[P + "layers.0.mlp.up_proj.weight"] = t[P + "layers.0.mlp.up_proj.weight"].float()
    refused(tmp_path, bad_dir(tmp_path, mutate=m), "layers.0.mlp.up_proj.weight", "F32", "BF16")


def test_refuses_truncated_shard(tmp_path):
    def cut(path):
        f = os.path.join(path, "model.safetensors-00002-of-00002.safetensors")
        os.truncate(f, os.path.getsize(f) - 10)
    refused(tmp_path, bad_dir(tmp_path, after=cut), "model.safetensors-00002-of-00002.safetensors")


def test_refuses_missing_shard(tmp_path):
    refused(tmp_path, bad_dir(tmp_path, after=lambda p: os.remove(os.path.join(p, "model.safetensors-00001-of-00002.safetensors"))),
            "model.safetensors-00001-of-00002.safetensors")


def test_refuses_config_mismatch(tmp_path):
    def edit(tc):
        tc["intermediate_size"] = 128
    refused(tmp_path, bad_dir(tmp_path, config_edit=edit), "mlp.gate_proj.weight", "shape")


def test_refuses_unexpected_tensor(tmp_path):
    def m(t):
        t[P + "layers.3.self_attn.q_proj.bias"] = torch.zeros(4, dtype=torch.bfloat16)
    refused(tmp_path, bad_dir(tmp_path, mutate=m), "layers.3.self_attn.q_proj.bias", "unexpected")


def test_refuses_unsupported_setting(tmp_path):
    def edit(tc):
        tc["attn_output_gate"] = False
    refused(tmp_path, bad_dir(tmp_path, config_edit=edit), "attn_output_gate")


def test_refuses_bad_input(tmp_path):
    path = ref.write_model_dir(str(tmp_path / "m"), dict(ref.TINY), seed=2)
    proc = forward(path, tmp_path, {"rows": [{"ids": [1, 320]}]}, check=False)
    assert proc.returncode != 0 and "vocabulary" in proc.stderr
    proc = forward(path, tmp_path, {"rows": [{"ids": [1, 2], "positions": [0]}]}, check=False)
    assert proc.returncode != 0 and "positions" in proc.stderr
    # Positions stop at 2^20 (the range of the RoPE tables' exact sin/cos reduction).
    edge = forward(path, tmp_path, {"rows": [{"ids": [1, 2], "positions": [2**20 - 1, 2**20]}]})["row.0"]
    assert torch.isfinite(edge).all()
    tc, w = ref.load_model_dir(path)
    gate(edge, ref.Reference(tc, w).forward([1, 2], [2**20 - 1, 2**20]), "tiny/positions-at-2^20")
    proc = forward(path, tmp_path, {"rows": [{"ids": [1], "positions": [2**20 + 1]}]}, check=False)
    assert proc.returncode != 0 and "outside [0, 1048576]" in proc.stderr
    assert not [f for f in os.listdir(tmp_path) if "kev-tmp" in f]


def teardown_module(module):
    for k, v in sorted(MAXIMA.items()):
        print(f"MAX {k}: {v:.3e}")
