"""`cmake --install` of the build tree that made KEV_BIN: the layout of docs/install.md, a program
outside the tree built against it with find_package(kev) / kev::kev (its answer is `kev score`'s
bytes, its SHA-256 hashlib's), one man page per command, and a bash completion that completes
commands, options and option values."""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import KEV_BIN, SOURCE_DIR, run_kev, synth_bundle  # noqa: E402

BUILD_DIR = os.path.dirname(os.path.abspath(KEV_BIN))
REQUEST = {"state": {"order": 7, "note": "late twice"},
           "questions": {"next": {"type": "choice", "instructions": "What next?",
                                  "criteria": {"ship": "ship it", "wait": "wait"}}}}


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not os.path.exists(os.path.join(BUILD_DIR, "cmake_install.cmake")):
        pytest.skip(f"{BUILD_DIR} is not a CMake build tree")
    root = tmp_path_factory.mktemp("install") / "prefix"
    proc = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", str(root)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def commands():
    out = run_kev("--help").stdout
    return re.findall(r"^  ([a-z]+)  ", out.split("Subcommands:")[1], flags=re.M)


def test_layout(prefix):
    assert os.access(prefix / "bin" / "kev", os.X_OK)
    assert run_kev("--version").stdout == subprocess.run([prefix / "bin" / "kev", "--version"],
                                                         capture_output=True, text=True).stdout
    for header in ["kev/score/scorer.h", "kev/core/error.h", "kev/model/model.h"]:
        assert (prefix / "include" / header).is_file()
    assert (prefix / "lib" / "libkev_core.a").is_file()
    assert (prefix / "lib" / "cmake" / "kev" / "kevConfig.cmake").is_file()
    doc = prefix / "share" / "doc" / "kev-native"
    assert (doc / "README.md").is_file() and (doc / "docs" / "install.md").is_file()
    assert (prefix / "share" / "kev" / "recipes" / "kev-4b.json").is_file()
    assert (prefix / "share" / "kev" / "examples" / "typed-decisions.jsonl").is_file()
    assert not (prefix / "lib" / "systemd").exists()  # the unit is the package's (KEV_SYSTEMD_UNIT)


def test_find_package_consumer(prefix, tmp_path):
    build = tmp_path / "consumer"
    env = dict(os.environ, CMAKE_PREFIX_PATH=str(prefix))
    env.pop("CMAKE_CXX_COMPILER_LAUNCHER", None)
    subprocess.run(["cmake", "-S", os.path.join(SOURCE_DIR, "tests", "install", "consumer"), "-B", str(build),
                    "-DCMAKE_BUILD_TYPE=Release"], check=True, capture_output=True, env=env)
    proc = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exe = str(build / "kev_consumer")
    text = "kev-native installed"
    out = subprocess.run([exe, "--sha256", text], capture_output=True, text=True, check=True).stdout
    assert out.strip() == hashlib.sha256(text.encode()).hexdigest()
    (tmp_path / "b").mkdir()
    bundle = synth_bundle(tmp_path / "b", "--seed", 2)[1]
    body = json.dumps(REQUEST)
    got = subprocess.run([exe, bundle], input=body, capture_output=True, text=True, check=True).stdout
    want = run_kev("score", "--bundle", bundle, input=body).stdout
    strip = lambda s: re.sub(r'"latency_ms":[-0-9.eE+]+', "", s)  # noqa: E731 (measured, not computed)
    assert strip(got) == strip(want)


def test_man_pages(prefix):
    man = prefix / "share" / "man" / "man1"
    names = commands()
    assert {"score", "serve", "export", "synth"} <= set(names)
    assert sorted(p.name for p in man.iterdir()) == sorted(["kev.1"] + [f"kev-{c}.1" for c in names])
    page = (man / "kev-score.1").read_text()
    assert page.startswith('.TH "KEV-SCORE" 1')
    assert "\\fB\\-\\-bundle\\fR" in page  # every option of --help is on its page
    for opt in re.findall(r"--[a-z][a-z0-9-]+", run_kev("score", "--help").stdout):
        assert opt.replace("-", "\\-") in page, opt
    if shutil.which("man"):
        text = subprocess.run(["man", "-l", str(man / "kev-serve.1")], capture_output=True, text=True,
                              env=dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING="0")).stdout
        text = re.sub(".\x08", "", text).replace("\u2010", "-")  # no overstrike, plain hyphens
        assert "--api-key-file" in text


def complete(prefix, line):
    """What bash offers after `line` (the word being completed is its last word)."""
    words = line.split(" ")
    script = (f"source {prefix}/share/bash-completion/completions/kev\n"
              f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
              "_kev; printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    return subprocess.run(["bash", "--norc", "-c", script], capture_output=True, text=True,
                          check=True).stdout.split()


def test_bash_completion(prefix):
    assert set(complete(prefix, "kev ")) >= set(commands())
    assert complete(prefix, "kev sc") == ["score"]
    assert "--bundle" in complete(prefix, "kev score --")
    assert "--api-key-file" in complete(prefix, "kev serve --a")
    assert complete(prefix, "kev score --precision ") == ["fp32", "bf16", "int8", "w8a8"]
