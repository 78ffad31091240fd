"""Builds random rope_norm problems, runs them through jax or torch on cpu or cuda, and checks the results
against the float64 numpy reference (hpc_xla.reference). Shared by the numerics, parity and GPU tests."""

import dataclasses

import ml_dtypes
import numpy as np

from hpc_xla import reference
from hpc_xla._arrays import from_torch, to_torch  # noqa: F401  (re-exported for the tests)

NP_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn}
BF16_TOL, FP8_TOL = 1e-2, 5e-2


@dataclasses.dataclass(frozen=True)
class Case:
    tokens: int = 7
    num_q_heads: int = 8
    num_kv_heads: int = 2
    head_dim: int = 128
    page_size: int = 16
    num_blocks: int = 4
    rotary_dim: int = None  # None = head_dim
    rope_style: str = "neox"
    q_norm: bool = True
    k_norm: bool = True
    norm_before_rope: bool = True
    dtype: str = "bfloat16"
    cache_fp8: bool = False
    q_fp8: bool = False
    index_dtype: str = "int32"  # positions and slot_mapping
    weight_dtype: str = "float32"
    skip_every: int = 3  # every n-th token gets slot -1 (0: none)
    eps: float = 1e-6
    seed: int = 0

    @property
    def cache_dtype(self):
        return "float8_e4m3fn" if self.cache_fp8 else self.dtype

    def kwargs(self):
        """Keyword options of rope_norm for this case (tensors filled in by the runners)."""
        return dict(eps=self.eps, rope_style=self.rope_style, rotary_dim=self.rotary_dim,
                    norm_before_rope=self.norm_before_rope, q_quant="fp8" if self.q_fp8 else None)


def garbage(shape, dtype, rng):
    """Random bytes with NaN/inf patterns sprinkled in: what unused cache slots may hold."""
    itemsize = np.dtype(NP_DTYPES[dtype]).itemsize
    raw = rng.integers(0, 256, size=tuple(shape) + (itemsize,), dtype=np.uint8)
    raw[..., -1] |= 0x7F  # top byte 0x7F/0xFF: NaN or huge in bf16, fp16 and e4m3
    return raw.view(NP_DTYPES[dtype]).reshape(shape)


def make_inputs(case):
    rng = np.random.default_rng(case.seed)
    T, Hq, Hkv, D = case.tokens, case.num_q_heads, case.num_kv_heads, case.head_dim
    rot = case.rotary_dim or D
    dt = NP_DTYPES[case.dtype]
    max_pos = 4096
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, rot, 2) / rot))
    freqs = np.arange(max_pos)[:, None] * inv_freq[None]
    num_slots = case.num_blocks * case.page_size
    if T > num_slots and case.skip_every != 1:
        raise ValueError("case has more tokens than cache slots")
    slots = np.full(T, -1, case.index_dtype)  # (only every token skipped may outnumber the slots)
    slots[: min(T, num_slots)] = rng.permutation(num_slots)[:T]  # distinct: writes do not collide
    if case.skip_every:
        slots[:: case.skip_every] = -1
    wdt = NP_DTYPES.get(case.weight_dtype, np.float32)
    inputs = dict(
        q=rng.standard_normal((T, Hq, D)).astype(dt),
        k=(2.0 * rng.standard_normal((T, Hkv, D))).astype(dt),
        v=rng.standard_normal((T, Hkv, D)).astype(dt),
        positions=rng.integers(0, max_pos, size=T).astype(case.index_dtype),
        cos_sin_cache=np.concatenate([np.cos(freqs), np.sin(freqs)], axis=-1).astype(np.float32),
        slot_mapping=slots,
        k_cache=garbage((case.num_blocks, case.page_size, Hkv, D), case.cache_dtype, rng),
        v_cache=garbage((case.num_blocks, case.page_size, Hkv, D), case.cache_dtype, rng),
        q_norm_weight=(0.5 + rng.random(D)).astype(wdt) if case.q_norm else None,
        k_norm_weight=(0.5 + rng.random(D)).astype(wdt) if case.k_norm else None,
        k_scale=np.float32(0.04) if case.cache_fp8 else None,
        v_scale=np.float32(0.02) if case.cache_fp8 else None,
    )
    return inputs


def as_f64(x):
    return np.asarray(x).astype(np.float64)


def check(case, inputs, q_out, q_scale, k_cache, v_cache):
    """Asserts outputs (numpy, their own dtypes) match the float64 reference; untouched slots unchanged."""
    ref_q, ref_k, ref_v = reference.rope_norm(
        inputs["q"], inputs["k"], inputs["v"], inputs["positions"], inputs["cos_sin_cache"],
        q_norm_weight=inputs["q_norm_weight"], k_norm_weight=inputs["k_norm_weight"], eps=case.eps,
        rope_style=case.rope_style, rotary_dim=case.rotary_dim, norm_before_rope=case.norm_before_rope)
    if case.q_fp8:
        assert q_out.dtype == NP_DTYPES["float8_e4m3fn"] and q_scale.shape == ref_q.shape[:2]
        want_scale = reference.fp8_quantize_rows(ref_q)
        assert reference.relative_error(q_scale, want_scale) < BF16_TOL, "q_scale"
        got_q, q_tol = as_f64(q_out) * as_f64(q_scale)[..., None], FP8_TOL
    else:
        assert q_out.dtype == NP_DTYPES[case.dtype]
        got_q, q_tol = q_out, BF16_TOL
    err = reference.relative_error(got_q, ref_q)
    assert err < q_tol, "q relative error %g" % err
    # and per (token, head): a stale or mis-positioned tail token hid under one global norm (a review: 0.2-3%)
    worst = reference.worst_row_error(got_q, ref_q)
    assert worst < 2 * q_tol, "worst q (token, head) relative error %g" % worst

    slots = inputs["slot_mapping"].astype(np.int64)
    written = slots >= 0
    num_slots = case.num_blocks * case.page_size
    for name, cache, ref, scale in (("k_cache", k_cache, ref_k, inputs["k_scale"]),
                                    ("v_cache", v_cache, ref_v, inputs["v_scale"])):
        flat = cache.reshape(num_slots, case.num_kv_heads, case.head_dim)
        got = as_f64(flat[slots[written]]) * (float(scale) if case.cache_fp8 else 1.0)
        tol = FP8_TOL if case.cache_fp8 else BF16_TOL
        if written.any():
            err = reference.relative_error(got, ref[written])
            assert err < tol, "%s relative error %g" % (name, err)
            worst = reference.worst_row_error(got, ref[written])
            assert worst < 2 * tol, "%s worst (slot, head) relative error %g" % (name, worst)
        untouched = np.ones(num_slots, bool)
        untouched[slots[written]] = False
        row = case.num_kv_heads * case.head_dim  # (not -1: a cache of no blocks has no row to infer it from)
        before = inputs[name].reshape(num_slots, row).view(np.uint8)
        after = flat.reshape(num_slots, row).view(np.uint8)
        assert np.array_equal(before[untouched], after[untouched]), name + ": an untouched slot changed"


# --------------------------------------------------------------------------------------------- runners
def run_torch(case, inputs, device="cpu", strided_cache=False, input_layout="contiguous"):
    """Runs hpc_xla.torch.rope_norm; returns numpy (q_out, q_scale, k_cache, v_cache). input_layout: "qkv" passes
    q, k, v as vLLM's views of one [T, (Hq + 2 Hkv) D] tensor; "head_strided" as views with a row stride of 2 D."""
    import torch

    import hpc_xla.torch as ht

    t = {k: to_torch(v, device) for k, v in inputs.items()}
    if input_layout == "qkv":
        qkv = torch.cat([t[n].flatten(1) for n in ("q", "k", "v")], dim=1)
        sizes = [t[n].shape[1] * case.head_dim for n in ("q", "k", "v")]
        t["q"], t["k"], t["v"] = (x.view(t[n].shape) for x, n in zip(qkv.split(sizes, dim=1), ("q", "k", "v")))
    elif input_layout == "head_strided":
        for n in ("q", "k", "v"):
            wide = torch.zeros(*t[n].shape[:2], 2 * case.head_dim, dtype=t[n].dtype, device=device)
            wide[..., :case.head_dim] = t[n]
            t[n] = wide[..., :case.head_dim]
    k_cache, v_cache = t["k_cache"], t["v_cache"]
    if strided_cache:  # vLLM's layout: one [NB, Hkv, P, 2D] tensor, K/V as strided views
        kv = torch.cat([k_cache.transpose(1, 2), v_cache.transpose(1, 2)], dim=-1).contiguous()
        k_cache, v_cache = kv.transpose(1, 2).split(case.head_dim, dim=-1)
    # q's outputs poisoned (NaN, or e4m3's NaN byte): every element must be written
    q_out = torch.full(t["q"].shape, float("nan"), device=device).to(
        torch.float8_e4m3fn if case.q_fp8 else t["q"].dtype)
    q_scale = torch.full(t["q"].shape[:2], float("nan"), device=device) if case.q_fp8 else None
    out = ht.rope_norm(t["q"], t["k"], t["v"], t["positions"], t["cos_sin_cache"], t["slot_mapping"], k_cache,
                       v_cache, q_norm_weight=t["q_norm_weight"], k_norm_weight=t["k_norm_weight"],
                       k_scale=t["k_scale"], v_scale=t["v_scale"], out=q_out, out_scale=q_scale, **case.kwargs())
    q_out, q_scale = out if case.q_fp8 else (out, None)
    return (from_torch(q_out), None if q_scale is None else from_torch(q_scale), from_torch(k_cache.contiguous()),
            from_torch(v_cache.contiguous()))


def run_jax(case, inputs, device="cpu", jit=True, donate=False):
    """Runs hpc_xla.jax.rope_norm; returns numpy (q_out, q_scale, k_cache, v_cache)."""
    import jax

    import hpc_xla.jax as hj

    dev = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    args = {k: None if v is None else jax.device_put(v, dev) for k, v in inputs.items()}
    names = ["q", "k", "v", "positions", "cos_sin_cache", "slot_mapping", "k_cache", "v_cache"]
    opts = {n: args[n] for n in ("q_norm_weight", "k_norm_weight", "k_scale", "v_scale")}

    def f(*pos):
        return hj.rope_norm(*pos, **opts, **case.kwargs())

    if jit:
        f = jax.jit(f, donate_argnums=(6, 7) if donate else ())
    out = f(*[args[n] for n in names])
    out = [np.asarray(o) for o in out]
    if case.q_fp8:
        return out[0], out[1], out[2], out[3]
    return out[0], None, out[1], out[2]
