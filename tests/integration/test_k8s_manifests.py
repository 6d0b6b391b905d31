"""deploy/k8s validated without a cluster: every document against the Kubernetes API schemas
(npm kubernetes-models + ajv, pinned in tests/k8s/package-lock.json) and, for unknown fields,
against the same package's API types with the TypeScript compiler (tests/k8s/validate.mjs), the
validator shown to refuse broken copies, and the manifests checked against the server they run: probe paths,
ports, the container's `kev serve` arguments (run for real on a synthetic bundle), and a grace
period that covers the drain delay plus HAProxy's server timeout."""
import glob
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from kevtest import KEV_BIN, SOURCE_DIR, synth_bundle  # noqa: E402

VALIDATOR_DIR = os.path.join(SOURCE_DIR, "tests", "k8s")
MANIFESTS = sorted(glob.glob(os.path.join(SOURCE_DIR, "deploy", "k8s", "*.yaml")))

def node_major():
    """The major version of `node` on PATH, or 0 when there is none."""
    if shutil.which("node") is None:
        return 0
    out = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout
    return int(out.strip().lstrip("v").split(".")[0] or 0)


pytestmark = [
    pytest.mark.skipif(
        not os.path.isdir(os.path.join(VALIDATOR_DIR, "node_modules", "kubernetes-models")),
        reason="the manifest validator is not installed (scripts/setup.sh runs npm ci in tests/k8s)"),
    pytest.mark.skipif(node_major() < 20,
                       reason="kubernetes-models 5.1 is proven here on Node 20+ only (it declares >= 22)"),
]


def validate(*files):
    proc = subprocess.run(["node", os.path.join(VALIDATOR_DIR, "validate.mjs"), *files],
                          capture_output=True, text=True, timeout=120, cwd=VALIDATOR_DIR)
    return proc.returncode, json.loads(proc.stdout or "[]"), proc.stderr


@pytest.fixture(scope="module")
def docs():
    assert len(MANIFESTS) >= 2, MANIFESTS
    rc, parsed, err = validate(*MANIFESTS)
    assert rc == 0, err
    return {d["kind"]: d for d in parsed}


def test_every_manifest_is_valid(docs):
    assert {"Deployment", "Service", "HorizontalPodAutoscaler"} <= set(docs)


def container(docs):
    (c,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    return c


@pytest.mark.parametrize("kind, mutate, needle", [
    ("Deployment", lambda d: d["spec"].__setitem__("replicas", "three"), "replicas"),
    ("Deployment", lambda d: d["spec"]["template"]["spec"].pop("containers"), "containers"),
    ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
     .__setitem__("port", {"name": "http"}), "port"),
    ("Service", lambda d: d["spec"]["ports"][0].__setitem__("port", "eighty"), "port"),
    ("HorizontalPodAutoscaler", lambda d: d["spec"].pop("scaleTargetRef"), "scaleTargetRef"),
    # Unknown fields (the schemas allow them; the strict-field check does not), at any depth:
    ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0].__setitem__(
        "readinesProbe", d["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe")), "readinesProbe"),
    ("Deployment", lambda d: d["spec"]["template"]["spec"].__setitem__("terminationGracePeriod", 30),
     "terminationGracePeriod"),
    ("Service", lambda d: d["spec"]["ports"][0].__setitem__("targetport", 8000), "targetport"),
    ("HorizontalPodAutoscaler", lambda d: d["spec"]["metrics"][0]["pods"]["target"].__setitem__("averageValues", "2"),
     "averageValues"),
])
def test_the_validator_refuses_broken_copies(docs, tmp_path, kind, mutate, needle):
    doc = json.loads(json.dumps(docs[kind]))
    mutate(doc)
    path = tmp_path / "broken.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML
    rc, _, err = validate(str(path))
    assert rc == 1 and needle in err, err


def test_manifests_match_the_server(docs):
    c = container(docs)
    args = c["args"]
    assert args[0] == "serve"
    port = int(args[args.index("--port") + 1])
    assert [p["containerPort"] for p in c["ports"] if p["name"] == "http"] == [port]
    assert c["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] in ("http", port)
    labels = docs["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert docs["Service"]["spec"]["selector"].items() <= labels.items()
    assert docs["Deployment"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    # The grace period covers the drain delay plus the longest request HAProxy waits for.
    spec = importlib.util.spec_from_file_location("gen", os.path.join(SOURCE_DIR, "deploy", "haproxy", "kev-haproxy-cfg.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    timeout_server = int(gen.parse_args(["--replica", "x:1"]).timeout_server.rstrip("s"))
    drain = float(args[args.index("--drain-delay") + 1])
    state_drain = float(args[args.index("--state-drain-timeout") + 1]) if "--state-dir" in args else 0
    grace = docs["Deployment"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace >= drain + timeout_server + state_drain
    # The state directory is a volume every replica mounts writable.
    if "--state-dir" in args:
        mount = args[args.index("--state-dir") + 1]
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert mount in mounts and not mounts[mount].get("readOnly", False)
    hpa = docs["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == docs["Deployment"]["metadata"]["name"]
    # Prometheus scrapes the server's own /metrics on its port; the HPA reads a metric it exports.
    notes = docs["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/path"] == "/metrics"
    assert int(notes["prometheus.io/port"]) == port
    assert [m["pods"]["metric"]["name"] for m in hpa["metrics"]] == ["kev_queue_depth"]


def test_the_container_arguments_start_a_real_server(docs, tmp_path):
    """The Deployment's `kev serve` arguments, with a synthetic bundle and a loopback port."""
    bundle = synth_bundle(tmp_path, "--seed", 2)[1]
    args = list(container(docs)["args"])
    args[args.index("--bundle") + 1] = bundle
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = "0"
    args[args.index("--drain-delay") + 1] = "0"  # the flag exists; no need to wait 15 s here
    if "--state-dir" in args:
        args[args.index("--state-dir") + 1] = str(tmp_path / "states")
    proc = subprocess.Popen([KEV_BIN, *args, "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.poll() is not None else "no listening line"
        url = json.loads(line)["listening"]
        with urllib.request.urlopen(url + "/health/ready", timeout=30) as r:
            assert r.status == 200 and json.load(r)["status"] == "ready"
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            assert r.status == 200 and b"\nkev_queue_depth 0\n" in r.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        if "--state-dir" in args:
            assert os.path.isdir(tmp_path / "states")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()
