"""Shared by the serving benchmarks (serve_bench.py, batch_bench.py, growing_bench.py,
long_state_replay.py): a synthetic bundle, a
closed-loop HTTP load generator for POST /v1/systemone on loopback, and a nearest-rank percentile.

synth_bundle(kev, directory, shape, seed) runs kev synth -> kev pin -> kev export under
`directory` and returns the bundle's path; the recipe is pinned for the family member of that
shape (tiny shapes use the Kev-4B layout, "0.8b" the Kev-0.8B one), with all-zero synthetic revisions
where the shipped recipe has none.

http_run(port, reqs, concurrency) sends every request once from `concurrency` keep-alive client
threads (each takes the next request as soon as its previous one is answered) and returns
(requests per second over the whole run, per-request latency in seconds, per-request response
bodies). Any non-200 answer stops the run with RuntimeError naming the status and the body.

comparable(body) is a response body without what differs between a cold and a cached answer
(latency, cached-token counts), as a canonical string: equal strings, equal answers.
"""
import http.client
import json
import subprocess
import threading
import time

def comparable(body):
    """The response without latency_ms and the cached-token counts, canonical JSON."""
    body = json.loads(json.dumps(body))
    body.pop("latency_ms", None)
    body["usage"].pop("cached_tokens", None)
    body["usage"].pop("input_tokens_details", None)
    return json.dumps(body, sort_keys=True)


MODEL_OF_SHAPE = {"0.8b": "kev-0.8b", "tiny-0.8b": "kev-0.8b", "tiny-27b": "kev-27b"}


def synth_bundle(kev, directory, shape="tiny", seed=11):
    def run(*args):
        subprocess.run([kev, *map(str, args)], check=True, capture_output=True)
    synth = f"{directory}/synth"
    run("synth", "--out", synth, "--shape", shape, "--seed", seed, "--quiet")
    run("pin", "--model", MODEL_OF_SHAPE.get(shape, "kev-4b"), "--base", f"{synth}/base", "--checkpoint",
        f"{synth}/checkpoint", "--out", f"{directory}/recipe.json", "--base-revision", "0" * 40,
        "--checkpoint-revision", "0" * 40)
    run("export", "--recipe", f"{directory}/recipe.json", "--base", f"{synth}/base", "--checkpoint",
        f"{synth}/checkpoint", "--out", f"{directory}/bundle", "--quiet")
    return f"{directory}/bundle"


def percentile(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def http_run(port, reqs, concurrency, timeout=600):
    latencies, bodies = [None] * len(reqs), [None] * len(reqs)
    next_i, lock, errors = [0], threading.Lock(), []

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            while not errors:
                with lock:
                    i = next_i[0]
                    next_i[0] += 1
                if i >= len(reqs):
                    break
                t = time.perf_counter()
                conn.request("POST", "/v1/systemone", json.dumps(reqs[i]), {"Content-Type": "application/json"})
                r = conn.getresponse()
                body = json.loads(r.read())
                latencies[i] = time.perf_counter() - t
                if r.status != 200:
                    errors.append(f"status {r.status}: {body}")
                    break
                bodies[i] = body
        except Exception as e:  # a broken connection ends the run with a message, not a hang
            errors.append(repr(e))
        finally:
            conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=3600)
    if errors:
        raise RuntimeError(errors[0])
    return len(reqs) / (time.perf_counter() - t), latencies, bodies
