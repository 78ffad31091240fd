"""Saves decode_attention's outputs for the combine's long-task cases (and two 8/1 bench-like mixes) to ARG.npz,
run from a staged folder (its package and tests first on the path): two versions' files compared bitwise tell
whether a combine change kept the sums. The first six cases repeat test_gpu_decode.py's test_long_merge_tasks on
purpose: this script runs against staged trees older than any shared list would be."""
import sys

import numpy as np
from decode_harness import DecodeCase, make_inputs, run_torch

cases = [DecodeCase(seq_lens=(20000,) + (65,) * 15, max_ctas=200),
         DecodeCase(seq_lens=(9000, 130, 0), head_dim=64, max_ctas=90),
         DecodeCase(seq_lens=(6000, 7), head_dim=256, max_ctas=70),
         DecodeCase(seq_lens=(12000, 300), kv_dtype="float8_e4m3fn", q_dtype="float8_e4m3fn", out_dtype="float16",
                    max_ctas=150),
         DecodeCase(seq_lens=(5000, 3, 800), q_len=2, num_q_heads=16, num_kv_heads=1, max_ctas=60),
         DecodeCase(seq_lens=(9000, 100), schedule="static", max_ctas=256),
         DecodeCase(seq_lens=(131072,) + (4096,) * 31, num_q_heads=8, num_kv_heads=1),
         DecodeCase(seq_lens=(65536,) + (4096,) * 15, num_q_heads=8, num_kv_heads=1, kv_dtype="float8_e4m3fn")]
outs = {}
for i, case in enumerate(cases):
    out = run_torch(case, make_inputs(case), "cuda")
    outs["case%d" % i] = np.asarray(out).view(np.uint16)
np.savez(sys.argv[1], **outs)
print("saved", len(outs), sys.argv[1])
