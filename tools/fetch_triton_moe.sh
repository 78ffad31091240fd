#!/usr/bin/env bash
# Builds the MoE benchmark's "triton" peer: vLLM 0.33.0's Triton `fused_moe_kernel` and its launch helper,
# taken out of the vllm wheel into the git-ignored folder .peer/vllm_triton_moe/ so that it runs with only
# torch + triton (no vllm package). Measurement only: nothing extracted here is ever committed.
#
# Run it on a machine where pip reaches PyPI (the dev machine), then carry `.peer` to the H200:
#   tools/fetch_triton_moe.sh                      # downloads the wheel to /tmp/vllm_whl (VLLM_WHL_DIR)
#   device run: carry [".peer"], `python3 -m hpc_xla.bench moe --out $OUT/moe.json`
# hpc_xla/bench/moe.py finds the folder at <repo>/.peer/vllm_triton_moe (or $HPC_TRITON_MOE_DIR).
#
# What the folder holds:
#   _vllm_extracted.py  verbatim from the wheel (found by name with Python's ast): fused_moe_kernel,
#                       write_zeros_to_output, invoke_fused_moe_triton_kernel, the config lookup
#                       (get_config_file_name, get_moe_configs, get_default_config, try_get_optimal_moe_config),
#                       _prepare_expert_assignment, enable_swap_ab, the Triton _per_token_group_quant_fp8;
#                       vllm imports replaced by small stubs at the top (platform = CUDA, no env overrides).
#   _align.py, _ops.py  ours: moe_align_block_size in Triton (vLLM's is a compiled CUDA op), silu_and_mul,
#                       static per-tensor fp8 quant (Triton), per-token-group quant launcher.
#   layer.py            ours: fused_experts() = the call sequence of vLLM's fused_experts_impl (quant, align,
#                       GEMM1, silu_and_mul, quant, GEMM2 with the routing weight, sum over top-k).
#   configs/            the wheel's tuned configs for device_name=NVIDIA_H200 and NVIDIA_H100_80GB_HBM3.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.33.0
WHL_DIR="${VLLM_WHL_DIR:-/tmp/vllm_whl}"
DEST=".peer/vllm_triton_moe"

whl=$(ls "$WHL_DIR"/vllm-$VERSION-*.whl 2>/dev/null | head -1 || true)
if [ -z "$whl" ]; then
  mkdir -p "$WHL_DIR"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$WHL_DIR" "vllm==$VERSION"
  whl=$(ls "$WHL_DIR"/vllm-$VERSION-*.whl | head -1)
fi
echo "wheel: $whl"
grep -qx '/.peer/' .gitignore || { echo "error: /.peer/ is not in .gitignore" >&2; exit 1; }
rm -rf "$DEST"
mkdir -p "$DEST/configs"

# ---- 1. verbatim pieces of the wheel, vllm imports replaced by stubs ----
python3 - "$whl" "$DEST" <<'PY'
import ast
import hashlib
import os
import re
import sys
import zipfile

whl, dest = sys.argv[1:3]
z = zipfile.ZipFile(whl)
moe = "vllm/model_executor/layers/fused_moe/"
PIECES = (
    (moe + "fused_moe.py", ("write_zeros_to_output", "fused_moe_kernel", "invoke_fused_moe_triton_kernel",
                            "get_config_file_name", "get_moe_configs", "get_default_config",
                            "try_get_optimal_moe_config", "_weights_host_resident", "_prepare_expert_assignment")),
    (moe + "utils.py", ("enable_swap_ab",)),
    ("vllm/model_executor/layers/quantization/utils/fp8_utils.py", ("_per_token_group_quant_fp8",)),
)

HEADER = '''# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Pieces of vLLM {version}'s fused MoE Triton path, copied verbatim from {wheel} by
hpc-xla's tools/fetch_triton_moe.sh (measurement peer only; never committed). The vllm imports they need are
replaced by the stubs below: CUDA platform, no env overrides (VLLM_TUNED_CONFIG_FOLDER honoured)."""
# ruff: noqa
import functools
import json
import logging
import os
import re
from typing import Any

import torch
import triton
import triton.language as tl

from ._align import moe_align_block_size


class _Logger:
    def __init__(self):
        self._log = logging.getLogger("vllm_triton_moe")
        self._seen = set()

    def _once(self, level, msg, *args, **kwargs):
        if msg not in self._seen:
            self._seen.add(msg)
            self._log.log(level, msg, *args)

    def info_once(self, msg, *args, **kwargs):
        self._once(logging.INFO, msg, *args)

    def warning_once(self, msg, *args, **kwargs):
        self._once(logging.WARNING, msg, *args)

    def warning(self, msg, *args, **kwargs):
        self._log.warning(msg, *args)

    def info(self, msg, *args, **kwargs):
        self._log.info(msg, *args)

    def debug(self, msg, *args, **kwargs):
        self._log.debug(msg, *args)


logger = _Logger()


class _Envs:
    VLLM_BATCH_INVARIANT = False
    VLLM_TUNED_CONFIG_FOLDER = os.environ.get("VLLM_TUNED_CONFIG_FOLDER")
    VLLM_TRITON_USE_TD = None


envs = _Envs()


class _CudaPlatform:
    @staticmethod
    def _cap():
        major, minor = torch.cuda.get_device_capability()
        return major * 10 + minor

    def is_device_capability(self, capability, device_id=0):
        if isinstance(capability, tuple):
            capability = capability[0] * 10 + capability[1]
        return self._cap() == capability

    def has_device_capability(self, capability, device_id=0):
        if isinstance(capability, tuple):
            capability = capability[0] * 10 + capability[1]
        return self._cap() >= capability

    def is_cuda(self):
        return True

    def is_cuda_alike(self):
        return True

    def is_rocm(self):
        return False

    def is_xpu(self):
        return False

    def is_fp8_fnuz(self):
        return False

    def fp8_dtype(self):
        return torch.float8_e4m3fn

    def get_device_name(self, device_id=0):
        return torch.cuda.get_device_name(device_id)


current_platform = _CudaPlatform()


def get_device_name_as_file_name(device_id: int = 0) -> str:
    return re.sub(r"[\\s/]+", "_", current_platform.get_device_name(device_id))


def next_power_of_2(n: int) -> int:
    return 1 if n < 1 else 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(a // -b)


def get_config():  # vllm.model_executor.layers.fused_moe.get_config: no override config
    return None


def resolve_moe_use_td() -> bool:  # VLLM_TRITON_USE_TD unset: tensor descriptors on XPU only
    return False


def warn_if_moe_use_td_ineffective(*args, **kwargs) -> None:
    return None


def set_triton_allocator(device) -> None:
    return None

'''

out = [HEADER.format(version="0.33.0", wheel=os.path.basename(whl))]
names_done = []
for path, names in PIECES:
    text = z.read(path).decode()
    lines = text.splitlines(keepends=True)
    found = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            found[node.name] = "".join(lines[start - 1:node.end_lineno])
    missing = [n for n in names if n not in found]
    if missing:
        sys.exit("error: %s has no %s (vLLM changed?)" % (path, ", ".join(missing)))
    for n in names:
        piece = found[n]
        # function-local vllm imports (e.g. `from vllm.model_executor.layers.fused_moe import get_config`): the
        # names are module-level stubs above
        piece = re.sub(r"^(\s*)(from vllm[\w.]* import [\w, ]+|import vllm[\w.]*)\s*$",
                       r"\1pass  # vllm import removed (stub above)", piece, flags=re.M)
        out.append("\n\n# ---- %s: %s ----\n%s" % (path, n, piece))
        names_done.append("%s:%s" % (path, n))
src = "".join(out)
if re.search(r"^\s*(from|import) vllm", src, flags=re.M):
    sys.exit("error: a vllm import survived the rewrite")
with open(os.path.join(dest, "_vllm_extracted.py"), "w") as f:
    f.write(src)

# The devices the benchmark runs on: the H200 of record, and the H100 the device tool lends when no H200 comes (vLLM
# on an H100 reads these, and falls back to its default heuristic where the wheel has none -- as the peer does).
DEVICES = ("NVIDIA_H200", "NVIDIA_H100_80GB_HBM3")
configs = 0
for name in z.namelist():
    base = os.path.basename(name)
    if not (name.startswith(moe + "configs/") and name.endswith(".json")):
        continue
    if not any(",device_name=%s," % d in base or base.endswith(",device_name=%s.json" % d) for d in DEVICES):
        continue  # H200_NVL, H100_PCIe etc.
    with open(os.path.join(dest, "configs", base), "wb") as f:
        f.write(z.read(name))
    configs += 1
sha = hashlib.sha256(open(whl, "rb").read()).hexdigest()
with open(os.path.join(dest, "SOURCE.txt"), "w") as f:
    f.write("wheel %s sha256 %s\n" % (os.path.basename(whl), sha))
    f.write("verbatim (Apache-2.0, vLLM contributors):\n  " + "\n  ".join(names_done) + "\n")
    f.write("configs: %d files device_name in %s\n" % (configs, ", ".join(DEVICES)))
print("extracted %d pieces, %d H200 / H100 configs" % (len(names_done), configs))
PY

# ---- 2. our glue: align, elementwise ops, the layer driver ----
cat > "$DEST/_align.py" <<'PY'
"""moe_align_block_size in Triton (vLLM's is a compiled CUDA op): same outputs and sizes.

sorted_token_ids[max_num_tokens_padded] int32: the pair indices (token * top_k + j) grouped by expert, each
expert's group padded to a multiple of block_size with the value topk_ids.numel(); expert_ids[max blocks]
int32: the (local) expert of each block; num_tokens_post_pad[1]: the padded total. With expert_map (global ->
local, -1 = not here) only local pairs are counted (vLLM's ignore_invalid_experts=True). Order inside an
expert's group comes from atomics (as in vLLM's CUDA kernel); results do not depend on it.
Three launches (+ a memset): per-CTA histograms -> one-CTA scan -> scatter (+ padding, expert_ids)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _local_expert(ids_ptr, map_ptr, offs, numel, num_experts, HAS_MAP: tl.constexpr):
    m = offs < numel
    e = tl.load(ids_ptr + offs, mask=m, other=-1).to(tl.int32)
    ok = m & (e >= 0) & (e < num_experts)
    if HAS_MAP:
        e = tl.load(map_ptr + e, mask=ok, other=-1).to(tl.int32)
        ok = ok & (e >= 0) & (e < num_experts)
    return e, ok


@triton.jit
def _count_kernel(ids_ptr, map_ptr, counts_ptr, numel, num_experts, HAS_MAP: tl.constexpr, BLOCK: tl.constexpr,
                  NUM_BINS: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    e, ok = _local_expert(ids_ptr, map_ptr, offs, numel, num_experts, HAS_MAP)
    hist = tl.histogram(tl.where(ok, e, num_experts), NUM_BINS)  # bin num_experts collects the rest
    bins = tl.arange(0, NUM_BINS)
    tl.atomic_add(counts_ptr + bins, hist, mask=(bins < num_experts) & (hist > 0))


@triton.jit
def _scan_kernel(counts_ptr, offsets_ptr, cursor_ptr, ends_ptr, total_ptr, num_experts, block_size,
                 NUM_BINS: tl.constexpr):
    bins = tl.arange(0, NUM_BINS)
    m = bins < num_experts
    c = tl.load(counts_ptr + bins, mask=m, other=0)
    padded = (c + block_size - 1) // block_size * block_size
    end = tl.cumsum(padded, 0)
    tl.store(offsets_ptr + bins, end - padded, mask=m)
    tl.store(cursor_ptr + bins, end - padded, mask=m)
    tl.store(ends_ptr + bins, end // block_size, mask=m)  # each expert's end, in blocks
    tl.store(total_ptr, tl.sum(padded, 0))


@triton.jit
def _scatter_kernel(ids_ptr, map_ptr, counts_ptr, offsets_ptr, cursor_ptr, ends_ptr, total_ptr, sorted_ptr,
                    expert_ids_ptr, numel, num_experts, block_size, HAS_MAP: tl.constexpr, BLOCK: tl.constexpr,
                    NUM_BINS: tl.constexpr, PAD_BLOCK: tl.constexpr, EID_BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    e, ok = _local_expert(ids_ptr, map_ptr, offs, numel, num_experts, HAS_MAP)
    pos = tl.atomic_add(cursor_ptr + e, tl.full([BLOCK], 1, tl.int32), mask=ok)
    tl.store(sorted_ptr + pos, offs.to(tl.int32), mask=ok)
    # expert of blocks [pid * EID_BLOCK, +EID_BLOCK): the number of experts that end at or before the block
    blk = pid * EID_BLOCK + tl.arange(0, EID_BLOCK)
    bins = tl.arange(0, NUM_BINS)
    ends = tl.load(ends_ptr + bins, mask=bins < num_experts, other=1 << 30)
    owner = tl.sum((ends[None, :] <= blk[:, None]).to(tl.int32), axis=1)
    tl.store(expert_ids_ptr + blk, owner, mask=blk < tl.load(total_ptr) // block_size)
    if pid < num_experts:  # this program also writes the padding of expert `pid`'s group
        c = tl.load(counts_ptr + pid)
        start = tl.load(offsets_ptr + pid)
        padded = (c + block_size - 1) // block_size * block_size
        p = tl.arange(0, PAD_BLOCK)
        tl.store(sorted_ptr + start + c + p, tl.full([PAD_BLOCK], 0, tl.int32) + numel, mask=p < padded - c)


_COUNT_BLOCK = 1024
_SCATTER_BLOCK = 256
_EID_BLOCK = 32


def moe_align_block_size(topk_ids, block_size, num_experts, expert_map=None, pad_sorted_ids=False,
                         ignore_invalid_experts=False, return_scatter_idx=False):
    if return_scatter_idx:
        raise NotImplementedError("return_scatter_idx")
    if expert_map is not None and not ignore_invalid_experts:
        raise NotImplementedError("expert_map needs ignore_invalid_experts=True here")
    numel = topk_ids.numel()
    max_num_tokens_padded = numel + num_experts * (block_size - 1)
    if pad_sorted_ids:
        max_num_tokens_padded = triton.cdiv(max_num_tokens_padded, block_size) * block_size
    if numel < num_experts:
        max_num_tokens_padded = min(numel * block_size, max_num_tokens_padded)
    dev = topk_ids.device
    sorted_ids = torch.empty((max_num_tokens_padded,), dtype=torch.int32, device=dev)
    expert_ids = torch.empty((triton.cdiv(max_num_tokens_padded, block_size),), dtype=torch.int32, device=dev)
    num_tokens_post_pad = torch.empty((1,), dtype=torch.int32, device=dev)
    bins = triton.next_power_of_2(num_experts + 1)
    scratch = torch.zeros((4 * bins,), dtype=torch.int32, device=dev)
    counts, offsets, cursor, ends = (scratch[j * bins:(j + 1) * bins] for j in range(4))
    ids = topk_ids.reshape(-1)
    emap = expert_map if expert_map is not None else ids  # unused pointer when HAS_MAP is False
    has_map = expert_map is not None
    n_count = triton.cdiv(numel, _COUNT_BLOCK)
    _count_kernel[(n_count,)](ids, emap, counts, numel, num_experts, HAS_MAP=has_map, BLOCK=_COUNT_BLOCK,
                              NUM_BINS=bins, num_warps=4)
    _scan_kernel[(1,)](counts, offsets, cursor, ends, num_tokens_post_pad, num_experts, block_size, NUM_BINS=bins,
                       num_warps=4)
    n_scatter = max(triton.cdiv(numel, _SCATTER_BLOCK), num_experts, triton.cdiv(expert_ids.numel(), _EID_BLOCK))
    _scatter_kernel[(n_scatter,)](ids, emap, counts, offsets, cursor, ends, num_tokens_post_pad, sorted_ids,
                                  expert_ids, numel, num_experts, block_size, HAS_MAP=has_map, BLOCK=_SCATTER_BLOCK,
                                  NUM_BINS=bins, PAD_BLOCK=triton.next_power_of_2(block_size), EID_BLOCK=_EID_BLOCK,
                                  num_warps=4)
    return sorted_ids, expert_ids, num_tokens_post_pad
PY

cat > "$DEST/_ops.py" <<'PY'
"""The elementwise ops vLLM runs as compiled CUDA ops, here in Triton: silu_and_mul (silu(gate) rounded to the
activation dtype, times up), static per-tensor fp8 quant (x * (1/scale), saturated), and the launcher of vLLM's
own Triton per-token-group fp8 quant (row-major scales, no UE8M0: what the Triton MoE path uses on H200)."""

import torch
import triton
import triton.language as tl

from ._vllm_extracted import _per_token_group_quant_fp8

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, d, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < d
    g = tl.load(x_ptr + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * stride_x + d + cols, mask=m, other=0.0).to(tl.float32)
    act = (g / (1.0 + tl.exp(-g))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (act * u).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def _static_fp8_quant_kernel(x_ptr, out_ptr, scale_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    inv = 1.0 / tl.load(scale_ptr)
    x = tl.load(x_ptr + offs, mask=m, other=0.0).to(tl.float32)
    y = tl.minimum(tl.maximum(x * inv, -448.0), 448.0)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=m)


def silu_and_mul(out, x):
    rows, d = x.shape[0], x.shape[1] // 2
    assert x.stride(-1) == 1 and out.stride(-1) == 1 and out.shape == (rows, d)
    block = min(1024, triton.next_power_of_2(d))
    _silu_and_mul_kernel[(rows, triton.cdiv(d, block))](x, out, d, x.stride(0), out.stride(0), BLOCK=block,
                                                        num_warps=4)
    return out


def scaled_fp8_quant(x, scale):
    """Static per-tensor quant (scale given): vLLM's ops.scaled_fp8_quant(x, scale)."""
    assert x.is_contiguous() and scale is not None
    out = torch.empty(x.shape, dtype=FP8, device=x.device)
    n = x.numel()
    block = 4096
    _static_fp8_quant_kernel[(triton.cdiv(n, block),)](x, out, scale.reshape(1), n, BLOCK=block, num_warps=8)
    return out, scale


def per_token_group_quant_fp8(x, group_size, eps=1e-10):
    """vLLM's per_token_group_quant_fp8 (Triton fallback launch, row-major scales [M, K/group])."""
    assert x.is_contiguous() and x.shape[-1] % group_size == 0
    x_q = torch.empty(x.shape, dtype=FP8, device=x.device)
    x_s = torch.empty(x.shape[:-1] + (x.shape[-1] // group_size,), dtype=torch.float32, device=x.device)
    groups = x.numel() // group_size
    block = triton.next_power_of_2(group_size)
    _per_token_group_quant_fp8[(groups,)](x, x_q, x_s, group_size, x.shape[1], x.stride(0), eps,
                                          fp8_min=-FP8_MAX, fp8_max=FP8_MAX, use_ue8m0=False, BLOCK=block,
                                          num_warps=min(max(block // 256, 1), 8), num_stages=1)
    return x_q, x_s
PY

cat > "$DEST/layer.py" <<'PY'
"""The full MoE layer the way vLLM 0.33's fused_experts_impl runs it (silu, no bias, routing given):
quantize x -> align (or the naive one-block-per-pair path for tiny batches) -> GEMM1 (fused_moe_kernel) ->
silu_and_mul -> quantize -> GEMM2 (fused_moe_kernel, routing weight applied) -> sum over top-k."""

import torch
import triton.language as tl

from ._ops import per_token_group_quant_fp8, scaled_fp8_quant, silu_and_mul
from ._vllm_extracted import (_prepare_expert_assignment, get_moe_configs, invoke_fused_moe_triton_kernel,
                              try_get_optimal_moe_config)

QUANTS = (None, "fp8_tensor", "fp8_block128")


def _quantize(a, a_scale, quant):
    if quant == "fp8_tensor":
        return scaled_fp8_quant(a, a_scale)
    if quant == "fp8_block128":
        return per_token_group_quant_fp8(a, 128)
    return a, None


def config_for(w1, w2, top_k, tokens, quant=None):
    """The kernel config vLLM picks (the tuned JSON for this device when one exists, else its default)."""
    block_shape = [128, 128] if quant == "fp8_block128" else None
    return try_get_optimal_moe_config(tuple(w1.shape), tuple(w2.shape), top_k, "fp8_w8a8" if quant else None,
                                      tokens, block_shape=block_shape)


def config_is_tuned(w1, w2, quant=None):
    """True when vLLM would take the config from a tuned JSON (configs/), False for its default heuristic."""
    block = 128 if quant == "fp8_block128" else 0
    return get_moe_configs(w2.shape[0], w2.shape[2], "fp8_w8a8" if quant else None, block, block) is not None


def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids, *, quant=None, w1_scale=None, w2_scale=None,
                  a1_scale=None, a2_scale=None, global_num_experts=-1, expert_map=None, out=None):
    """hidden_states [M, K] bf16; w1 [E, 2I, K] (gate rows first), w2 [E, K, I] (bf16 or fp8); topk_weights
    [M, k] f32; topk_ids [M, k] int32 (global ids); quant None | "fp8_tensor" (w scales [E], static a1/a2
    scales) | "fp8_block128" (w scales [E, n/128, k/128], dynamic per-token-group activations);
    expert_map [global E] int32 (global -> local, -1 = not here) for expert parallelism."""
    if quant not in QUANTS:
        raise ValueError("quant must be one of %s, got %r" % (QUANTS, quant))
    if quant == "fp8_tensor" and (a1_scale is None or a2_scale is None):
        raise ValueError("fp8_tensor needs static a1_scale and a2_scale")
    assert hidden_states.is_contiguous() and w1.stride(-1) == 1 and w2.stride(-1) == 1
    M = hidden_states.size(0)
    E, N, _ = w1.size()
    K = w2.size(1)
    top_k = topk_ids.size(1)
    if global_num_experts == -1:
        global_num_experts = E
    use_fp8 = quant is not None
    block_shape = [128, 128] if quant == "fp8_block128" else None
    config = config_for(w1, w2, top_k, M, quant)
    dev, dtype = hidden_states.device, hidden_states.dtype
    compute_type = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}[dtype]

    cache13 = torch.empty(M * top_k * max(N, K), device=dev, dtype=dtype)
    cache1 = cache13[: M * top_k * N].view(M, top_k, N)
    cache3 = cache13[: M * top_k * K].view(M, top_k, K)
    cache2 = torch.empty((M * top_k, N // 2), device=dev, dtype=dtype)
    if out is None:
        out = torch.empty_like(hidden_states)

    qa1, a1q_scale = _quantize(hidden_states, a1_scale, quant)
    sorted_ids, expert_ids, num_post_pad = _prepare_expert_assignment(
        topk_ids, config, M, top_k, global_num_experts, expert_map, block_shape=block_shape,
        ignore_invalid_experts=True, weights_host_resident=False)
    kw = dict(compute_type=compute_type, use_fp8_w8a8=use_fp8, use_int8_w8a8=False, use_int8_w8a16=False,
              use_int4_w4a16=False, per_channel_quant=False, block_shape=block_shape)
    invoke_fused_moe_triton_kernel(qa1, w1, cache1, a1q_scale, w1_scale, topk_weights, sorted_ids, expert_ids,
                                   num_post_pad, False, top_k, config, **kw)
    silu_and_mul(cache2, cache1.view(-1, N))
    qa2, a2q_scale = _quantize(cache2, a2_scale, quant)
    if expert_map is not None:
        cache3.zero_()
    invoke_fused_moe_triton_kernel(qa2, w2, cache3, a2q_scale, w2_scale, topk_weights, sorted_ids, expert_ids,
                                   num_post_pad, True, 1, config, **kw)
    torch.sum(cache3, dim=1, out=out)  # vLLM's moe_sum (at::sum_out for top_k > 4)
    return out
PY

cat > "$DEST/__init__.py" <<'PY'
"""vLLM 0.33.0's Triton fused MoE as a standalone measurement peer (torch + triton only). Built by hpc-xla's
tools/fetch_triton_moe.sh into a git-ignored folder; see SOURCE.txt for what is verbatim."""

from .layer import QUANTS, config_for, config_is_tuned, fused_experts

VLLM_VERSION = "0.33.0"
__all__ = ["QUANTS", "VLLM_VERSION", "config_for", "config_is_tuned", "fused_experts"]
PY

# ---- 3. checks (what needs no GPU) ----
for f in "$DEST"/*.py; do python3 -m py_compile "$f"; done
rm -rf "$DEST/__pycache__"
if grep -nE '^\s*(from|import) vllm' "$DEST"/*.py; then echo "error: vllm import left" >&2; exit 1; fi
if command -v ruff >/dev/null; then ruff check -q --no-cache --isolated --select F821,F822,F823 "$DEST"; fi
if python3 -c "import triton" 2>/dev/null; then
  (cd .peer && python3 -c "import vllm_triton_moe as m; print('import ok:', m.__name__, m.VLLM_VERSION)")
  rm -rf "$DEST/__pycache__"
fi
ls -la "$DEST" && du -sh "$DEST"
