"""Backbone benchmark driver: native (bench_model) vs the torch reference (tests/oracle/
qwen35_reference.py, eager float32, same weights) in the same run.

Usage: /usr/bin/python3 bench/forward_bench.py BENCH_MODEL_BIN MODEL_DIR [state_tokens=512]
Prints native JSON, torch timings and ratios.
"""
import json
import os
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "oracle"))
import qwen35_reference as ref  # noqa: E402


def main():
    binary, model_dir = sys.argv[1], sys.argv[2]
    state = int(sys.argv[3]) if len(sys.argv) > 3 else 512
    native = json.loads(subprocess.run([binary, model_dir, str(state), "8", "64"], check=True,
                                       capture_output=True, text=True).stdout)
    print("native:", json.dumps(native))
    tc, w = ref.load_model_dir(model_dir, dtype=torch.float32)
    model = ref.Reference(tc, w)
    torch.set_num_threads(os.cpu_count())
    ids = torch.randint(0, 240000, (state,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        model.forward(ids[:4], list(range(4)))
        t0 = time.perf_counter()
        model.forward(ids, list(range(state)))
        torch_s = time.perf_counter() - t0
    torch_tok_s = state / torch_s
    print(json.dumps({"torch_threads": torch.get_num_threads(), "torch_prefill_s": round(torch_s, 3),
                      "torch_prefill_tok_s": round(torch_tok_s, 2),
                      "ratio_prefill": round(native["prefill_tok_s"] / torch_tok_s, 2),
                      "ratio_rows_vs_torch_prefill_rate": round(native["rows_tok_s"] / torch_tok_s, 2),
                      "gemm_fraction_of_fma_peak": round(native["gemm_gflops"] / native["fma_peak_gflops"], 3),
                      # per CPU-second of the threads that ran: robust to other load on the machine
                      "prefill_fraction_of_peak_cpu": round(
                          native["matrix_gflop_per_token"] * state / native["prefill_cpu_s"]
                          / (native["fma_peak_cpu_gflops"] / native["threads"]), 3),
                      "gemm_vs_openblas": round(native["gemm_gflops"] / native["openblas_sgemm_gflops"], 3)}))


if __name__ == "__main__":
    main()
