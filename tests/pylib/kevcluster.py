"""Real-process cluster helpers for the scale-out tests and demo: `kev serve` replicas on
loopback ports, HAProxy in front of them (configuration from deploy/haproxy/kev-haproxy-cfg.py),
its stats socket, and a bounded load client.

Every process started here is stopped by its own pid (Cluster.close()); every wait is bounded."""
import csv
import http.client as httpclient
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
HAPROXY_REASON = "haproxy is not installed (scripts/setup.sh installs Debian's haproxy)"
STATE_KEY = "X-Kev-State-Key"


def read_listening(proc, timeout=60):
    """The parsed {"listening": ..., "model": ...} line a starting `kev serve` prints on stdout,
    or None if it printed nothing within `timeout` seconds (read on a thread: readline blocks)."""
    lines = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout=timeout)
    return json.loads(lines[0]) if lines and lines[0] else None


def port_of(listening):
    """The port of a listening line's "http://host:port"."""
    return int(listening["listening"].rsplit(":", 1)[1])


def free_port():
    """A TCP port free on 127.0.0.1 right now (for a server that must be reached before it prints it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, headers=None, timeout=60):
    """(status, headers {lowercase: value}, parsed JSON or None). Raises OSError on a lost connection."""
    conn = httpclient.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        data = json.dumps(body) if isinstance(body, (dict, list)) else body
        conn.request(method, path, body=data, headers=headers or {})
        r = conn.getresponse()
        raw = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        return r.status, hdrs, parsed
    finally:
        conn.close()


class Replica:
    """One `kev serve --quiet` on 127.0.0.1:port (port 0 = any); restartable on the same port."""

    def __init__(self, kev_bin, bundle, port=0, args=()):
        self.kev_bin, self.bundle, self.args = kev_bin, bundle, [str(a) for a in args]
        self.port = port
        self.proc = None
        self.start()

    def start(self, timeout=60):
        self.proc = subprocess.Popen(
            [self.kev_bin, "serve", "--bundle", self.bundle, "--port", str(self.port), "--quiet", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        listening = read_listening(self.proc, timeout)
        if listening is None:
            self.kill()
            raise RuntimeError(f"kev serve on port {self.port} printed no listening line")
        self.port = port_of(listening)

    @property
    def pid(self):
        return self.proc.pid

    def health(self):
        return request(self.port, "GET", "/health", timeout=10)[2]

    def terminate(self, timeout=60):
        """SIGTERM (drain), wait for the exit; returns the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(timeout=timeout)
        self.proc.stdout.close()
        return rc

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self.proc and not self.proc.stdout.closed:
            self.proc.stdout.close()


class HAProxy:
    def __init__(self, workdir, replicas, *gen_args, source_dir):
        self.port = free_port()
        self.sock = os.path.join(workdir, f"haproxy-{self.port}.sock")
        self.cfg = os.path.join(workdir, f"haproxy-{self.port}.cfg")
        gen = os.path.join(source_dir, "deploy", "haproxy", "kev-haproxy-cfg.py")
        cmd = [sys.executable, gen, "--bind", f"127.0.0.1:{self.port}", "--stats-socket", self.sock,
               *[a for r in replicas for a in ("--replica", f"127.0.0.1:{r.port}")], *map(str, gen_args)]
        with open(self.cfg, "w") as f:
            subprocess.run(cmd, stdout=f, check=True, timeout=30)
        check = subprocess.run([HAPROXY, "-c", "-q", "-f", self.cfg], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise RuntimeError(f"haproxy -c refused {self.cfg}: {check.stderr}")
        self.log = open(os.path.join(workdir, f"haproxy-{self.port}.log"), "w")
        self.proc = subprocess.Popen([HAPROXY, "-db", "-f", self.cfg], stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_status({f"r{i}": "UP" for i in range(1, len(replicas) + 1)}, timeout=30)

    def stat(self):
        """{server name: status} of the kev_replicas backend, from `show stat` on the stats socket."""
        return {name: row["status"] for name, row in self.stat_rows().items()}

    def stat_rows(self):
        """{server name: `show stat` row} of the kev_replicas backend (wretr = retries,
        wredis = redispatches, hrsp_5xx, ...)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(self.sock)
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
        return {r["svname"]: r for r in rows
                if r["pxname"] == "kev_replicas" and r["svname"] not in ("FRONTEND", "BACKEND")}

    def wait_status(self, want, timeout=30):
        """Waits until every named server has the wanted status (e.g. {"r1": "UP"})."""
        end = time.monotonic() + timeout
        seen = {}
        while time.monotonic() < end:
            try:
                seen = self.stat()
                if all(seen.get(k, "").startswith(v) for k, v in want.items()):
                    return seen
            except OSError:
                pass  # not listening on the socket yet
            time.sleep(0.05)
        raise TimeoutError(f"haproxy servers never reached {want}; last seen {seen}")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


class Load:
    """Sends every (id, request, headers) once through `port` from `workers` threads, in order.
    A 503 carrying Retry-After is retried by the client (up to `max_503` times, sleeping
    `backoff_s`); anything else (another status, a lost connection, a timeout) is a failure.
    results[id] = the final (status, headers, body) or the exception."""

    def __init__(self, port, items, workers=4, max_503=50, backoff_s=0.2, timeout=60, pace_s=0.0):
        self.port, self.items, self.workers = port, list(items), workers
        self.max_503, self.backoff_s, self.timeout, self.pace_s = max_503, backoff_s, timeout, pace_s
        self.results = {}
        self.retried_503 = 0
        self.lock = threading.Lock()
        self.next = 0
        self.stopping = False
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _take(self):
        with self.lock:
            if self.stopping or self.next >= len(self.items):
                return None
            self.next += 1
            return self.items[self.next - 1]

    def _work(self):
        while (item := self._take()) is not None:
            rid, req, headers = item
            result = None
            for _ in range(self.max_503 + 1):
                try:
                    result = request(self.port, "POST", "/v1/systemone", req,
                                  {"Content-Type": "application/json", **headers}, self.timeout)
                except Exception as e:  # noqa: BLE001 - recorded as a failure
                    result = e
                    break
                if result[0] == 503 and "retry-after" in result[1]:
                    with self.lock:
                        self.retried_503 += 1
                    time.sleep(self.backoff_s)
                    continue
                break
            with self.lock:
                assert rid not in self.results, f"request {rid} sent twice by the client"
                self.results[rid] = result
            if self.pace_s:
                time.sleep(self.pace_s)

    def stop(self):
        """Sends nothing new; requests already sent still get their answer."""
        with self.lock:
            self.stopping = True

    @property
    def done(self):
        with self.lock:
            return len(self.results)

    def join(self, timeout):
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(timeout=max(0.0, end - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            raise TimeoutError(f"load did not finish in {timeout} s ({self.done}/{len(self.items)} answered)")
        return self.results
