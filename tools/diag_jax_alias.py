"""Diagnostic (GPU): does rope_norm's cache aliasing survive XLA loops? Compares a python loop over layers
with lax.scan and vmap over stacked caches, and reports whether non-donated inputs were mutated. Also lists
what XLA's dump shows for command buffers. Prints findings; exits 0."""
import glob
import os
import subprocess
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import hpc_xla.jax as hj  # noqa: E402
from rope_norm_harness import Case, make_inputs  # noqa: E402

case = Case(tokens=4, skip_every=0)
inp = make_inputs(case)
rng = np.random.default_rng(3)
L = 2
kc = np.stack([rng.standard_normal(inp["k_cache"].shape).astype(inp["k_cache"].dtype) for _ in range(L)])
vc = np.stack([rng.standard_normal(inp["v_cache"].shape).astype(inp["v_cache"].dtype) for _ in range(L)])
dev = jax.devices()[0]
a = {k: None if v is None else jax.device_put(v, dev) for k, v in inp.items()}
args = [a[n] for n in ["q", "k", "v", "positions", "cos_sin_cache", "slot_mapping"]]

ref_k = []
for i in range(L):
    _, k_i, _ = jax.jit(hj.rope_norm)(*args, jnp.asarray(kc[i]), jnp.asarray(vc[i]))
    ref_k.append(np.asarray(k_i))
ref_k = np.stack(ref_k)


def scan_layers(kc_all, vc_all):
    def body(_, caches):
        k_i, v_i = caches
        _, k_o, v_o = hj.rope_norm(*args, k_i, v_i)
        return None, (k_o, v_o)
    return jax.lax.scan(body, None, (kc_all, vc_all))[1]


kc_dev, vc_dev = jax.device_put(kc, dev), jax.device_put(vc, dev)
out_k, _ = jax.jit(scan_layers)(kc_dev, vc_dev)
print("scan == python loop:", np.array_equal(np.asarray(out_k).view(np.uint8), ref_k.view(np.uint8)),
      "| scan input mutated:", not np.array_equal(np.asarray(kc_dev).view(np.uint8), kc.view(np.uint8)))
kc_dev, vc_dev = jax.device_put(kc, dev), jax.device_put(vc, dev)
vm = jax.jit(jax.vmap(lambda k_i, v_i: hj.rope_norm(*args, k_i, v_i)[1]))(kc_dev, vc_dev)
print("vmap == python loop:", np.array_equal(np.asarray(vm).view(np.uint8), ref_k.view(np.uint8)),
      "| vmap input mutated:", not np.array_equal(np.asarray(kc_dev).view(np.uint8), kc.view(np.uint8)))
diff = np.asarray(vm).reshape(L, -1, 256).view(np.uint8) != ref_k.reshape(L, -1, 256).view(np.uint8)
print("vmap differing rows per layer:", [np.where(d.any(-1))[0][:10].tolist() for d in diff])
print(jax.jit(jax.vmap(lambda k_i, v_i: hj.rope_norm(*args, k_i, v_i)[1])).lower(kc_dev, vc_dev).compile().as_text()[-3000:])

if jax.default_backend() == "gpu" and "--child" not in sys.argv:
    d = tempfile.mkdtemp()
    env = dict(os.environ, XLA_FLAGS="--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL "
               "--xla_gpu_graph_min_graph_size=1 --xla_dump_to=%s --xla_dump_hlo_as_text" % d)
    code = ("import jax, jax.numpy as jnp, hpc_xla.jax as hj, numpy as np, sys; sys.path.insert(0,'tests');"
            "from rope_norm_harness import *; c=Case(); i=make_inputs(c);"
            "a={k: None if v is None else jnp.asarray(v) for k,v in i.items()};"
            "f=jax.jit(lambda *x: [hj.rope_norm(*x)[0] for _ in range(3)]);"
            "print(jax.block_until_ready(f(*[a[n] for n in ['q','k','v','positions','cos_sin_cache','slot_mapping','k_cache','v_cache']]))[0].shape)")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    print("child rc", r.returncode, r.stderr[-1500:])
    files = sorted(glob.glob(os.path.join(d, "*")))
    print("dump files:", len(files), [os.path.basename(f) for f in files][-12:])
    for f in files:
        txt = open(f, errors="ignore").read()
        if "command_buffer" in txt:
            print("command_buffer found in", os.path.basename(f))
            for line in txt.splitlines():
                if "command_buffer" in line:
                    print("   ", line[:300])
                    break
