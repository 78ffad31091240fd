"""Per-kernel GPU times (torch.profiler) of fused_moe's routing forms at T=1, Qwen3 fp8 (session 55)."""
import os
import sys
import torch
import hpc_xla.torch as ht
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its neighbour fused_routing_ab.py
from fused_routing_ab import weights  # noqa: E402
gen = torch.Generator(device="cuda").manual_seed(0)
w = weights(128, 2048, 768, "fp8_tensor", gen)
kw = {n: v for n, v in w.items() if n not in ("w13", "w2")}
x = torch.randn(1, 2048, device="cuda", generator=gen).bfloat16()
lg = torch.randn(1, 128, device="cuda", generator=gen)
wt, ids = ht.moe_route(lg, 8)
forms = dict(ids=lambda: ht.fused_moe(x, w["w13"], w["w2"], wt, ids, quant="fp8_tensor", **kw),
             two=lambda: ht.fused_moe(x, w["w13"], w["w2"], *ht.moe_route(lg, 8), quant="fp8_tensor", **kw),
             fused=lambda: ht.fused_moe(x, w["w13"], w["w2"], router_logits=lg, top_k=8, quant="fp8_tensor", **kw))
for name, f in forms.items():
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            f()
        torch.cuda.synchronize()
    print("==", name)
    for e in prof.key_averages():
        if e.device_time_total > 0:
            print("  %-60s %6.2f us x%d" % (e.key[:60], e.device_time_total / e.count, e.count))
