# session 46: test_cuda_random_problems' two falsifying examples (tiled path, T=8, all pairs on one expert,
# fp8_tensor, H = I = 128) -- the GPU output and the CPU reference against the float64 oracle, per path (argv[1]:
# out .npz). Run once per knob setting (the knobs are read once per process).
import sys
sys.path.insert(0, "tests")
import numpy as np
from test_fused_moe import make_problem, run_torch
from test_gpu_fused_moe import run_cuda, _tile_m, reference_out
from hpc_xla import reference
res = {}
for (tokens, experts, top_k, hidden, inter, offset, extra, shared, x_fp8, one, seed) in [
        (8, 8, 6, 128, 128, 0, 4, False, False, True, 7), (8, 8, 3, 128, 128, 0, 4, False, False, True, 8)]:
    p = make_problem(tokens, experts, hidden, inter, top_k, "fp8_tensor", offset, extra, shared, x_fp8, seed, one)
    out, ref, cpu = run_cuda(p), reference_out(p), run_torch(p)
    res["gpu_%d" % seed], res["ref_%d" % seed], res["cpu_%d" % seed] = out.astype(np.float32), ref, cpu.astype(np.float32)
    print("seed", seed, "tile", _tile_m(p), "gpu vs oracle %.4g" % reference.relative_error(out, ref),
          "cpu vs oracle %.4g" % reference.relative_error(cpu, ref), "gpu vs cpu %.4g" % reference.relative_error(out, cpu))
np.savez(sys.argv[1], **res)
