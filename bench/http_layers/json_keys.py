"""Time for `kev serve` to answer a request whose state is one JSON object of N keys (issue 11:
80k keys took 17 s with nlohmann's ordered_map insertion; linear parsing should scale with N).

    /usr/bin/python3 bench/http_layers/json_keys.py BUNDLE   (KEV_BIN: the kev binary)"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "pylib"))
from kevtest import ServeProcess  # noqa: E402

s = ServeProcess(sys.argv[1], "--quiet", "--max-body", 64 << 20, "--max-json-keys", 10**7, "--request-timeout", 120)
try:
    for keys in (10000, 80000, 300000, 1000000):
        text = json.dumps({"state": {f"key{i:07d}": i for i in range(keys)},
                           "questions": {"q": {"type": "noul"}}}, separators=(",", ":"))
        t = time.monotonic()
        status, _, body = s.request("POST", "/v1/systemone", text, timeout=300)
        took = time.monotonic() - t
        print(json.dumps({"keys": keys, "body_mib": round(len(text) / 2**20, 2), "status": status,
                          "seconds": round(took, 3), "us_per_key": round(took / keys * 1e6, 2)}))
finally:
    s.close()
