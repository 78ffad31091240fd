"""The adapter's torch paths for what hpc_xla has no kernel for, used where vLLM's compiled ops are absent (the CPU):
the paged KV-cache write and causal prefill attention against the paged cache. Plain, readable, fp32 math."""

import torch

FP8_MAX = 448.0


def _to_cache(x, dtype, scale):
    if dtype == torch.float8_e4m3fn:  # vLLM's fp8 write: saturate(x / scale)
        return (x.float() / scale.float()).clamp(-FP8_MAX, FP8_MAX).to(dtype)
    return x.to(dtype)


def _from_cache(x, scale):
    return x.float() * scale.float() if x.dtype == torch.float8_e4m3fn else x.float()


def write_kv(key, value, k_cache, v_cache, slot_mapping, k_scale=None, v_scale=None):
    """key / value [T, Hkv, D] into the paged caches [NB, P, Hkv, D] (views of vLLM's cache) at slot_mapping [T];
    slot -1 (padding) is skipped; key / value may hold more (padded) rows than slot_mapping, as vLLM passes them."""
    key, value = key[:slot_mapping.shape[0]], value[:slot_mapping.shape[0]]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    blocks, offsets = slots // k_cache.shape[1], slots % k_cache.shape[1]
    k_cache[blocks, offsets] = _to_cache(key[keep], k_cache.dtype, k_scale)
    v_cache[blocks, offsets] = _to_cache(value[keep], v_cache.dtype, v_scale)


def prefill(q, k_cache, v_cache, block_table, seq_lens, query_starts, scale, k_scale, v_scale, out):
    """Causal attention of each request's new tokens q[starts[i]:starts[i+1]] against its first seq_lens[i] cache
    positions (the new tokens are the last ones). q [T, Hq, D]; out [T, Hq, D] written."""
    page, num_kv_heads, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    group = q.shape[1] // num_kv_heads
    for i in range(len(query_starts) - 1):
        first, end = query_starts[i], query_starts[i + 1]
        n, length = end - first, int(seq_lens[i])
        if n == 0:
            continue
        blocks = block_table[i, :(length + page - 1) // page].long()
        k = _from_cache(k_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:length], k_scale)
        v = _from_cache(v_cache[blocks].reshape(-1, num_kv_heads, head_dim)[:length], v_scale)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q[first:end].float(), k) * scale
        query_pos = torch.arange(length - n, length).unsqueeze(1)
        scores.masked_fill_(torch.arange(length).unsqueeze(0) > query_pos, float("-inf"))
        out[first:end] = torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v).to(out.dtype)
