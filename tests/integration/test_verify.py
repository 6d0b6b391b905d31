"""`kev verify` through the real binary: a fresh bundle passes; a flipped byte, a missing file
or an extra file is named and fails. Digests come from hashlib, not from kev."""
import hashlib
import json
import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.environ.get("KEV_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")), "tests", "pylib"))
import kevtest  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    kevtest.run_kev("synth", "--out", root / "synth")
    base, ckpt = root / "synth" / "base", root / "synth" / "checkpoint"
    kevtest.run_kev("pin", "--model", "kev-4b", "--base", base, "--checkpoint", ckpt, "--out", root / "recipe.json")
    kevtest.run_kev("export", "--recipe", root / "recipe.json", "--base", base, "--checkpoint", ckpt,
                    "--out", root / "bundle")
    return root / "bundle"


@pytest.fixture
def copy(bundle, tmp_path):
    dst = tmp_path / "b"
    shutil.copytree(bundle, dst)
    return dst


def test_manifest_lists_every_file_with_its_sha256(bundle):
    with open(bundle / "kev_export.json") as f:
        outputs = json.load(f)["outputs"]
    assert set(outputs) == set(os.listdir(bundle)) - {"kev_export.json"}
    for name, digest in outputs.items():
        assert hashlib.sha256((bundle / name).read_bytes()).hexdigest() == digest


def test_fresh_bundle_verifies(bundle):
    proc = kevtest.run_kev("verify", bundle)
    assert proc.returncode == 0 and "OK" in proc.stdout


@pytest.mark.parametrize("name", ["model.safetensors-00001-of-00002.safetensors", "head.safetensors",
                                  "tokenizer.json", "model.safetensors.index.json"])
def test_flipped_byte_detected(copy, name):
    path = copy / name
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    proc = kevtest.run_kev("verify", copy, check=False)
    assert proc.returncode == 3, proc.stderr
    assert name in proc.stderr and hashlib.sha256(bytes(data)).hexdigest() in proc.stderr


def test_missing_file_detected(copy):
    os.remove(copy / "config.json")
    proc = kevtest.run_kev("verify", copy, check=False)
    assert proc.returncode == 3 and "config.json is missing" in proc.stderr


def test_extra_file_detected(copy):
    (copy / "notes.txt").write_text("hello")
    proc = kevtest.run_kev("verify", copy, check=False)
    assert proc.returncode == 3 and "notes.txt" in proc.stderr


def test_not_a_bundle(tmp_path):
    proc = kevtest.run_kev("verify", tmp_path, check=False)
    assert proc.returncode == 3 and "kev_export.json" in proc.stderr


@pytest.mark.parametrize("value", [1, None, True, ["kev-4b-merged/1"], {"v": 1}, "missing"])
def test_manifest_format_of_wrong_type_refused(copy, value):
    """A non-string (or absent) "format" is a bad manifest, not an internal error."""
    path = copy / "kev_export.json"
    m = json.loads(path.read_text())
    if value == "missing":
        del m["format"]
    else:
        m["format"] = value
    path.write_text(json.dumps(m))
    proc = kevtest.run_kev("verify", copy, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "kev_export.json" in proc.stderr and '"format"' in proc.stderr, proc.stderr
    assert "internal" not in proc.stderr.lower(), proc.stderr


def test_manifest_other_format_unsupported(copy):
    path = copy / "kev_export.json"
    m = json.loads(path.read_text())
    m["format"] = "kev-4b-merged/99"
    path.write_text(json.dumps(m))
    proc = kevtest.run_kev("verify", copy, check=False)
    assert proc.returncode == 5 and "kev-4b-merged/99" in proc.stderr, proc.stderr
