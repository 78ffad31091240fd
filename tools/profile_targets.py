"""Run one benchmark workload a few times so `ncu` can profile its kernels (dev tool, GPU only).

  ncu --clock-control none -k regex:RopeNorm python3 tools/profile_targets.py rope_norm --tokens 16384
  ncu --clock-control none -k regex:Decode python3 tools/profile_targets.py decode --workload 1x128K+31x4K --q-len 2
  ncu --clock-control none -k regex:MoeStream python3 tools/profile_targets.py moe --shape qwen3-30b-a3b/fp8_tensor --tokens 1
"""
import argparse

import torch

import hpc_xla.torch as ht
from hpc_xla.bench import decode, moe, rope_norm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("suite", choices=["rope_norm", "decode", "moe"])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--heads", default="64,8,128")
    ap.add_argument("--variant", default="bf16")
    ap.add_argument("--workload", default="1x128K+31x4K")
    ap.add_argument("--q-len", type=int, default=1, help="decode: new tokens per sequence")
    ap.add_argument("--shape", default="qwen3-30b-a3b/fp8_tensor", help="moe: name/quant as in bench moe --shapes")
    ap.add_argument("--reps", type=int, default=2)
    args = ap.parse_args()
    hq, hkv, d = (int(x) for x in args.heads.split(","))
    gen = torch.Generator(device="cuda").manual_seed(0)
    if args.suite == "rope_norm":
        (p,) = rope_norm._problem(args.tokens, hq, hkv, d, args.variant, 1, gen)
        call = rope_norm._fused(p, args.variant)
    elif args.suite == "moe":
        (name, e_local, e_global, offset, h, i, top_k, quant), = moe._selected_shapes(args.shape)
        w = moe._row_weights(name, e_local, h, i, quant)  # the bench row's own draw, in the layout ours reads
        inp = moe._inputs(args.tokens, e_local, e_global, offset, h, top_k, moe._generator(name, quant, args.tokens))
        ws = moe._workspace(w, args.tokens, top_k, e_local, e_global, h, i, quant)
        call = moe._ours(w, inp, quant, offset, e_global, ws)
    else:
        lens = decode.workloads()[args.workload]
        kv_dtype = torch.float8_e4m3fn if args.variant == "fp8" else torch.bfloat16
        _, k_cache, v_cache, seq_lens, (s,), scales = decode._problem(lens, hq, hkv, d, kv_dtype, args.q_len, 1, gen)
        kw = dict(num_kv_heads=hkv, num_q_heads=hq, head_dim=d, page_size=decode.PAGE, q_len=args.q_len,
                  kv_dtype=kv_dtype, q_dtype=torch.bfloat16)
        plan = ht.decode_plan(seq_lens, **kw)

        def call():
            ht.decode_plan(seq_lens, out=plan, **kw)
            ht.decode_attention(s["q"], k_cache, v_cache, s["table"], seq_lens, plan, q_len=args.q_len, out=s["out"],
                                **scales)
    for _ in range(args.reps):
        call()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
