"""What a routing call costs, taken apart (session 56's next step): moe_route alone in a CUDA graph of routing calls
(the *route* column of fused_routing_ab.py) over E and top_k, T = 1 and 16, f32 and bf16 logits, and DeepSeek-V3's
grouped routing (E = 256, 8 groups, 4 kept, sigmoid, bias), next to a graph of
one-element adds (plain launches: the floor of any tiny kernel in a chain). The slope over E is the routing's own
work; what is left at E = 32, top_k = 1 is the PDL link. Run it again under HPC_XLA_PDL=0 (read once per process)
for the link without PDL. Usage: python3 bench/calls/route_chain.py [out.json]"""

import json
import os
import sys

import torch

import hpc_xla.torch as ht
from hpc_xla.bench import timing

CASES = [(32, 1), (32, 8), (64, 8), (128, 8), (256, 8), (512, 8)]
# DeepSeek-V3's grouped routing (session 57): sigmoid, correction bias, 8 groups of 32, the 4 best kept
DEEPSEEK = dict(scoring="sigmoid", num_groups=8, topk_groups=4, routed_scaling=2.5)


def main():
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = [dict(case="add (floor, no PDL)", us=timing.separator_us(timing.MIN_CALLS))]
    print("%-28s %6.2f us" % (rows[0]["case"], rows[0]["us"]), flush=True)
    for dtype in (torch.float32, torch.bfloat16):
        for tokens in (1, 16):
            for experts, top_k, grouped in [c + (False,) for c in CASES] + [(256, 8, True)]:
                sets = []
                kw = dict(DEEPSEEK) if grouped else {}
                if grouped:
                    kw["correction_bias"] = torch.randn(experts, device="cuda", generator=gen) * 0.1
                for _ in range(4):
                    logits = torch.randn(tokens, experts, device="cuda", generator=gen).to(dtype)
                    out = (torch.empty(tokens, top_k, device="cuda"),
                           torch.empty(tokens, top_k, dtype=torch.int32, device="cuda"))
                    sets.append((logits, out))
                calls = [lambda s=s: ht.moe_route(s[0], top_k, out=s[1], **kw) for s in sets]
                us = timing.graph_time_us(calls, replays=20)
                name = "%s T=%d E=%d k=%d%s" % (str(dtype).split(".")[-1], tokens, experts, top_k,
                                                " grouped" if grouped else "")
                rows.append(dict(case=name, us=us))
                print("%-28s %6.2f us" % (name, us), flush=True)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), pdl=os.environ.get("HPC_XLA_PDL", "1"), rows=rows), f,
                      indent=1)


if __name__ == "__main__":
    main()
