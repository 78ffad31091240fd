"""python -m hpc_xla.bench <suite> [--out results.json]   (suites: rope_norm, decode, moe)"""

import argparse
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m hpc_xla.bench", description=__doc__)
    ap.add_argument("suite", choices=["rope_norm", "decode", "moe"])
    ap.add_argument("--out", default=None, help="write the full results as JSON here")
    ap.add_argument("--tokens", default=None, help="comma-separated token counts (default: the suite's)")
    ap.add_argument("--heads", default=None, help="decode, rope_norm: only these Hq/Hkv/D, e.g. 64/8/128,8/1/128")
    ap.add_argument("--kv", default=None, help="decode: only this KV dtype; rope_norm: only this variant (bf16 or fp8)")
    ap.add_argument("--q-len", default=None, help="decode: only these q_len values, e.g. 1")
    ap.add_argument("--shapes", default=None, help="moe: only these shapes, e.g. qwen3-30b-a3b/fp8_tensor,mixtral-8x7b "
                    "(name, or name/quant with bf16 for None)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("hpc_xla.bench needs a CUDA GPU (the numbers are GPU timings)", file=sys.stderr)
        return 2
    if args.suite == "rope_norm":
        from hpc_xla.bench import rope_norm

        rope_norm.run(args)
    elif args.suite == "decode":
        from hpc_xla.bench import decode

        decode.run(args)
    elif args.suite == "moe":
        from hpc_xla.bench import moe

        moe.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
