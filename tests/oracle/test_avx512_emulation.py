"""The AVX-512 precision-mode kernels (include/kev/cpu/precision_kernels.h) end to end through `kev
forward`, on any machine: KEV_AVX512_EMULATE=1 dispatches `--precision int8` and `bf16` to the
emulated AVX-512 kernels (the real kernels' code run on a plain C++ model of each instruction).

- int8: the emulated AVX-512 kernel's hidden states are byte-identical to the default kernel's
  (gemm_int8.h: every int8 kernel gives the same bits);
- bf16: the vdpbf16ps kernel (its own summation order) against the float64 torch reference,
  within test_precision.py's bf16 budget, and bitwise batch- and thread-independent;
- KEV_ISA=avx2 still forces the AVX2 paths (`kev cpu`);
- the AMX-BF16 kernel (its own order) through its emulation, within the same budget;
- where the CPU runs AVX512-BF16 / AVX512-VNNI / AMX natively, the native kernels give exactly
  their emulation's bytes (so the emulation that covers other CPUs models them faithfully).
"""
import json
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "pylib"))
import kevtest  # noqa: E402
import qwen35_reference as ref  # noqa: E402

# Empty caps: an outer KEV_ISA (scripts/test.sh forces other levels) must not turn the emulation off.
EMULATE = {"KEV_AVX512_EMULATE": "1", "KEV_ISA": "", "KEV_GEMM_ISA": ""}
DIMS = dict(ref.TINY, hidden=256, intermediate=512, heads=4, kv_heads=2, head_dim=64, lin_k_heads=4,
            lin_v_heads=4, lin_k_dim=32, lin_v_dim=32, vocab=320)
BF16_BUDGET = 5e-3  # test_precision.py HIDDEN_BUDGET["bf16"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("avx512emu") / "model")
    ref.write_model_dir(path, DIMS, seed=5)
    return path, ref.Reference(*ref.load_model_dir(path))


def forward(path, tmp_path, payload, *extra, env=None):
    return kevtest.forward(path, str(tmp_path), payload, *extra, env=env)


def ids(n, seed):
    return torch.randint(0, DIMS["vocab"], (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def cpu(env):
    return json.loads(kevtest.run_kev("cpu", env=env).stdout)


def test_dispatch():
    emu = cpu(EMULATE)["kernels"]
    assert emu["gemm_int8_kernel"] == "avx512vnni-emulated"
    assert emu["gemm_int8_a8_kernel"] == "avx512vnni-a8-emulated"
    assert emu["gemm_bf16_dot"] == "avx512bf16-emulated"
    for cap in ({"KEV_ISA": "avx2"}, {"KEV_GEMM_ISA": "avx2"}):
        report = cpu({**EMULATE, **cap})
        capped = report["kernels"]
        assert capped["gemm_int8_kernel"] in ("avx2", "portable") and capped["gemm_bf16_dot"] == "none"
        # w8a8 at the AVX2 level: AVX-VNNI's byte kernel where the CPU has it.
        ymm_bytes = report["supported"].get("avx_vnni") and capped["gemm_int8_kernel"] == "avx2"
        assert capped["gemm_int8_a8_kernel"] == ("avxvnni-a8" if ymm_bytes else capped["gemm_int8_kernel"])


@pytest.mark.parametrize("precision", ["int8", "w8a8"])
def test_int8_emulated_is_bitwise_the_default_kernel(model, tmp_path, precision):
    """int8's vpdpwssd kernel and w8a8's vpdpbusd byte kernel, emulated, give the dispatched
    kernel's bits (every int8 kernel gives the contract's, gemm_int8.h)."""
    path, _ = model
    prefix, rows = ids(17, 1), [ids(23, 2), ids(7, 3), ids(1, 4)]
    payload = {"prefix": prefix, "rows": [{"ids": r} for r in rows]}
    want = forward(path, tmp_path, payload, "--precision", precision)
    for threads in ("1", "3"):
        got = forward(path, tmp_path, payload, "--precision", precision, "--threads", threads, env=EMULATE)
        for i in range(len(rows)):
            assert torch.equal(got[f"row.{i}"], want[f"row.{i}"]), (threads, i)


def test_bf16_emulated_within_budget_and_reproducible(model, tmp_path):
    path, oracle = model
    prefix, rows = ids(20, 5), [ids(30, 6), ids(9, 7), ids(1, 8)]
    payload = {"prefix": prefix, "rows": [{"ids": r} for r in rows]}
    out = forward(path, tmp_path, payload, "--precision", "bf16", env=EMULATE)
    plain = forward(path, tmp_path, payload, "--precision", "bf16")
    for i, r in enumerate(rows):
        expected = oracle.forward(prefix + r, list(range(len(prefix) + len(r))))[len(prefix):]
        rel = ((out[f"row.{i}"].double() - expected).norm() / expected.norm()).item()
        rel_plain = ((plain[f"row.{i}"].double() - expected).norm() / expected.norm()).item()
        print(f"row {i}: relative RMS error vdpbf16ps (emulated) {rel:.3e}, avx2 bf16 mode {rel_plain:.3e}")
        assert rel <= BF16_BUDGET, (i, rel)
    alone = forward(path, tmp_path, {"prefix": prefix, "rows": [{"ids": rows[1]}]}, "--precision", "bf16",
                    "--threads", "1", env=EMULATE)
    assert torch.equal(alone["row.0"], out["row.1"])
    three = forward(path, tmp_path, {"prefix": prefix, "rows": [{"ids": r} for r in reversed(rows)]},
                    "--precision", "bf16", "--threads", "3", env=EMULATE)
    for i in range(len(rows)):
        assert torch.equal(three[f"row.{len(rows) - 1 - i}"], out[f"row.{i}"])


# Each native kernel and the emulation that models it, by the `kev cpu` extension that runs it.
NATIVE_AND_EMULATED = (
    ("bf16", "avx512_bf16", {"KEV_BF16_KERNEL": "avx512bf16"}, EMULATE),
    ("bf16", "amx_bf16", {"KEV_BF16_KERNEL": "amxbf16"}, {"KEV_BF16_KERNEL": "amxbf16-emulated"}),
    ("int8", "avx512_vnni", {"KEV_INT8_KERNEL": "avx512vnni"}, EMULATE),
    ("int8", "amx_int8", {"KEV_INT8_KERNEL": "amxint8"}, {"KEV_INT8_KERNEL": "amxint8-emulated"}),
    ("w8a8", "avx512_vnni", {"KEV_INT8_KERNEL": "avx512vnni-a8"},
     {"KEV_INT8_KERNEL": "avx512vnni-a8-emulated"}),
    ("w8a8", "avx_vnni", {"KEV_INT8_KERNEL": "avxvnni-a8"}, {"KEV_INT8_KERNEL": "avxvnni-a8-emulated"}),
)


def test_amx_bf16_emulated_within_budget(model, tmp_path):
    """The AMX-BF16 kernel's order (one FP32 sum per output over the whole k, 32-product tile steps)
    through its emulation, on any x86-64 machine: within the bf16 budget of the float64 reference
    and bitwise batch- and thread-independent."""
    if cpu({})["arch"] != "x86-64":
        pytest.skip("the AMX kernels are x86-64's")
    path, oracle = model
    env = {"KEV_BF16_KERNEL": "amxbf16-emulated", "KEV_ISA": "", "KEV_GEMM_ISA": ""}
    prefix, rows = ids(19, 13), [ids(35, 14), ids(4, 15)]
    out = forward(path, tmp_path, {"prefix": prefix, "rows": [{"ids": r} for r in rows]}, "--precision", "bf16",
                  env=env)
    for i, r in enumerate(rows):
        expected = oracle.forward(prefix + r, list(range(len(prefix) + len(r))))[len(prefix):]
        rel = ((out[f"row.{i}"].double() - expected).norm() / expected.norm()).item()
        print(f"row {i}: relative RMS error AMX-BF16 (emulated) {rel:.3e}")
        assert rel <= BF16_BUDGET, (i, rel)
    alone = forward(path, tmp_path, {"prefix": prefix, "rows": [{"ids": rows[1]}]}, "--precision", "bf16",
                    "--threads", "1", env=env)
    assert torch.equal(alone["row.0"], out["row.1"])


def test_native_kernels_are_bitwise_their_emulation(model, tmp_path):
    """Where the CPU runs AVX512-BF16, AVX512-VNNI, AVX-VNNI, AMX-BF16 or AMX-INT8 natively, each native
    kernel gives exactly its emulation's bytes (so the emulation that covers other CPUs models it
    faithfully). On other CPUs there is nothing native to hold the emulation against, so the test
    skips there (test_dispatch still runs)."""
    supported = cpu({"KEV_ISA": "", "KEV_GEMM_ISA": ""})["supported"]
    pairs = [p for p in NATIVE_AND_EMULATED if supported.get(p[1])]
    if not pairs:
        pytest.skip("this CPU has none of AVX512-BF16, AVX512-VNNI, AVX-VNNI, AMX-BF16, AMX-INT8")
    path, _ = model
    prefix, rows = ids(33, 9), [ids(41, 10), ids(5, 11), ids(1, 12)]
    payload = {"prefix": prefix, "rows": [{"ids": r} for r in rows]}
    plain_env = {"KEV_ISA": "", "KEV_GEMM_ISA": ""}
    for mode, extension, native_env, emulated_env in pairs:
        got = forward(path, tmp_path, payload, "--precision", mode, env={**plain_env, **native_env})
        emulated = forward(path, tmp_path, payload, "--precision", mode, env={**plain_env, **emulated_env})
        for i in range(len(rows)):
            assert torch.equal(got[f"row.{i}"], emulated[f"row.{i}"]), (extension, i)
