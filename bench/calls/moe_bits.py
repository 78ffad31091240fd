"""Saves fused_moe's outputs on benchmark rows (the bench's own weights, routing and layout) to ARG.npz, run from a
staged folder (its package first on the path): two versions' files compared bitwise tell whether a change that must
not move the sums (a tile order, a cluster shape) kept them, on the shapes the tests do not reach (128-256 experts
at real sizes). `python moe_bits.py OUT.npz` saves, `python moe_bits.py A.npz B.npz` compares."""
import sys

import numpy as np

ROWS = [("qwen3-30b-a3b/fp8_tensor", (256, 1024, 4096)), ("qwen3-30b-a3b/bf16", (4096,)),
        ("hy3-tp8/fp8_tensor", (4096,)), ("hy3-ep8/fp8_tensor", (4096,)), ("dsv3-ep8/fp8_block128", (4096,)),
        ("mixtral-8x7b/bf16", (1024,))]


def save(path):
    import torch

    from hpc_xla.bench import moe as bm

    outs = {}
    for key, token_counts in ROWS:
        (name, e_local, e_global, offset, h, i, top_k, quant), = bm._selected_shapes(key)
        w = bm._row_weights(name, e_local, h, i, quant)
        for t in token_counts:
            inp = bm._inputs(t, e_local, e_global, offset, h, top_k, bm._generator(name, quant, t))
            ws = bm._workspace(w, t, top_k, e_local, e_global, h, i, quant)
            bm._ours(w, inp, quant, offset, e_global, ws)()
            torch.cuda.synchronize()
            outs["%s T=%d" % (key, t)] = inp["out"].view(torch.int16).cpu().numpy()
        del w
        torch.cuda.empty_cache()
    np.savez(path, **outs)
    print("saved", len(outs), path)


def compare(a, b):
    a, b = np.load(a), np.load(b)
    bad = 0
    for k in a.files:
        same = np.array_equal(a[k], b[k])
        bad += not same
        print("%-40s %s" % (k, "bitwise equal" if same else "DIFFERENT (%d of %d)" % ((a[k] != b[k]).sum(), a[k].size)))
    print("moe_bits: %d of %d rows differ" % (bad, len(a.files)))
    return bad


if __name__ == "__main__":
    sys.exit(save(sys.argv[1]) if len(sys.argv) == 2 else int(compare(sys.argv[1], sys.argv[2]) > 0))
