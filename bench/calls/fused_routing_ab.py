"""Fused routing's cost and gain (issue #4 item 1; session 55): per MoE layer, CUDA-graph replay median (the bench's
timing), three forms on the same rotating inputs --
  ids     fused_moe(topk_weights, topk_ids): the routing done elsewhere, not timed (the bench moe rows)
  two     moe_route(logits) then fused_moe(ids): routing as a separate op (what fused routing was before session 55)
  fused   fused_moe(router_logits=...): routing inside the layer (the stream path's kernels route in every CTA)
  route   moe_route(logits) alone: the routing kernel's own cost in a chain of routing calls (session 56)
Usage: python3 bench/calls/fused_routing_ab.py [out.json]; prints a table. FR_TOKENS=1,2,4 times those T only."""

import json
import os
import sys

import torch

import hpc_xla.torch as ht
from hpc_xla.bench import timing

FP8 = torch.float8_e4m3fn
# (name, E, H, I, top_k, quant)
SHAPES = [("qwen3-30b", 128, 2048, 768, 8, "fp8_tensor"), ("qwen3-30b", 128, 2048, 768, 8, None),
          ("block128 64e", 64, 2048, 512, 8, "fp8_block128")]
TOKENS = [int(t) for t in os.environ.get("FR_TOKENS", "1,2,4,16,64,256").split(",")]


def weights(e, h, i, quant, gen):
    w13 = torch.randn(e, 2 * i, h, device="cuda", generator=gen) / h ** 0.5
    w2 = torch.randn(e, h, i, device="cuda", generator=gen) / i ** 0.5
    if quant is None:
        return dict(w13=w13.bfloat16(), w2=w2.bfloat16())
    if quant == "fp8_tensor":
        s13, s2 = w13.abs().amax((1, 2)) / 448, w2.abs().amax((1, 2)) / 448
        return dict(w13=(w13 / s13[:, None, None]).to(FP8), w2=(w2 / s2[:, None, None]).to(FP8), w13_scale=s13,
                    w2_scale=s2, a13_scale=torch.tensor(0.02, device="cuda"), a2_scale=torch.tensor(0.02, device="cuda"))
    s13 = torch.ones(e, 2 * i // 128, h // 128, device="cuda") * (w13.abs().amax() / 448)
    s2 = torch.ones(e, h // 128, i // 128, device="cuda") * (w2.abs().amax() / 448)
    return dict(w13=(w13 / s13[0, 0, 0]).to(FP8), w2=(w2 / s2[0, 0, 0]).to(FP8), w13_scale=s13, w2_scale=s2)


def main():
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, e, h, i, k, quant in SHAPES:
        w = weights(e, h, i, quant, gen)
        kw = {n: v for n, v in w.items() if n not in ("w13", "w2")}
        for t in TOKENS:
            ws = torch.empty(ht.fused_moe_workspace_size(t, k, e, h, i, quant), dtype=torch.uint8, device="cuda")
            sets = []
            for _ in range(4):
                x = torch.randn(t, h, device="cuda", generator=gen).bfloat16()
                logits = torch.randn(t, e, device="cuda", generator=gen)
                wt, ids = ht.moe_route(logits, k)
                sets.append(dict(x=x, logits=logits, w=wt, ids=ids, out=torch.empty(t, h, dtype=torch.bfloat16,
                                                                                  device="cuda"),
                                 pair=(torch.empty_like(wt), torch.empty_like(ids))))

            def ids_form(s):
                return lambda: ht.fused_moe(s["x"], w["w13"], w["w2"], s["w"], s["ids"], quant=quant, out=s["out"],
                                            workspace=ws, **kw)

            def two_form(s):
                def call():
                    wt, ids = ht.moe_route(s["logits"], k, out=s["pair"])
                    ht.fused_moe(s["x"], w["w13"], w["w2"], wt, ids, quant=quant, out=s["out"], workspace=ws, **kw)
                return call

            def fused_form(s):
                return lambda: ht.fused_moe(s["x"], w["w13"], w["w2"], router_logits=s["logits"], top_k=k,
                                            quant=quant, out=s["out"], workspace=ws, **kw)

            def route_form(s):
                return lambda: ht.moe_route(s["logits"], k, out=s["pair"])

            us = {}
            for form, make in (("ids", ids_form), ("two", two_form), ("fused", fused_form), ("ids2", ids_form),
                               ("route", route_form)):
                us[form] = timing.graph_time_us([make(s) for s in sets], replays=20)
            # same bits: fused == two
            a = ht.fused_moe(sets[0]["x"], w["w13"], w["w2"], router_logits=sets[0]["logits"], top_k=k, quant=quant,
                             **kw)
            b = ht.fused_moe(sets[0]["x"], w["w13"], w["w2"], sets[0]["w"], sets[0]["ids"], quant=quant, **kw)
            same = bool(torch.equal(a.view(torch.int16), b.view(torch.int16)))
            rows.append(dict(shape=name, quant=quant or "bf16", tokens=t, same_bits=same, **us))
            r = rows[-1]
            print("%-16s %-12s T=%-5d ids %7.1f / %7.1f  two %7.1f  fused %7.1f  fused-two %+6.1f  fused-ids %+6.1f  "
                  "route %5.1f  same=%s" % (name, r["quant"], t, us["ids"], us["ids2"], us["two"], us["fused"],
                               us["fused"] - us["two"], us["fused"] - (us["ids"] + us["ids2"]) / 2, us["route"], same),
                  flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
