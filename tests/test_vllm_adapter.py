"""hpc_xla.vllm against vLLM 0.33's real interfaces, on the CPU (hpc_xla's ops run there through their reference
path): plugin registration and selection, the backend's validation, the metadata builder's decode/prefill split and
per-step device plan, the attention impl's KV write + forward on mixed batches in vLLM's LBNHC cache against an
fp64 reference (NaN in every unused cache slot), and the MoE experts against hpc_xla's fp64 MoE reference.

Needs vllm==0.33 (`tools/vllm_tests.sh` makes a venv with it and runs this file; CI does). Without vllm installed
the module is skipped as a whole."""

import os
import types

import numpy as np
import pytest

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
vllm = pytest.importorskip("vllm", reason="vllm 0.33 is not installed (tools/vllm_tests.sh runs this file with it)")
import torch  # noqa: E402

import hpc_xla.vllm as hv  # noqa: E402
from hpc_xla import reference  # noqa: E402
from hpc_xla.vllm import _torch_paths  # noqa: E402
from hpc_xla.vllm import attention as hva  # noqa: E402

TINY_MODEL = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
              "intermediate_size": 2048, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 128,
              "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 8192, "rms_norm_eps": 1e-6,
              "torch_dtype": "bfloat16", "rope_theta": 10000.0}
NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM = 8, 2, 128
SCALE = 1.3 * HEAD_DIM ** -0.5  # not the kernels' default: a dropped sm_scale must show


@pytest.fixture(scope="module", autouse=True)
def registered():
    hv.register()
    hv.register()  # idempotent: vLLM runs general plugins in every process, sometimes more than once


def vllm_config(tmp_path_factory, page_size, cache_dtype, max_num_seqs=16, dtype="bfloat16"):
    import json

    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig

    path = tmp_path_factory.mktemp("tiny_llama")
    (path / "config.json").write_text(json.dumps(TINY_MODEL))
    model = ModelConfig(model=str(path), skip_tokenizer_init=True, dtype=dtype)
    return VllmConfig(model_config=model, cache_config=CacheConfig(block_size=page_size, cache_dtype=cache_dtype),
                      scheduler_config=SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=8192,
                                                       max_model_len=8192, is_encoder_decoder=False))


def test_plugin_points_vllm_at_hpc_xla():
    import importlib.util
    import tomllib

    from vllm.config.attention import AttentionConfig
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import backend_to_kernel_cls, map_fp8_backend
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    from hpc_xla.vllm.moe import HpcXlaExperts

    assert AttentionBackendEnum.HPC_ATTN.get_class() is hva.HpcXlaAttentionBackend
    assert AttentionConfig(backend="HPC_ATTN").backend == AttentionBackendEnum.HPC_ATTN
    assert AttentionBackendEnum[hva.HpcXlaAttentionBackend.get_name()] == AttentionBackendEnum.HPC_ATTN
    assert backend_to_kernel_cls(map_fp8_backend("hpc")) == [HpcXlaExperts]
    # the entry point vLLM loads the plugin from (package metadata of an installed hpc-xla)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        plugins = tomllib.load(f)["project"]["entry-points"]["vllm.general_plugins"]
    module, func = plugins["hpc_xla"].split(":")
    assert importlib.util.find_spec(module) is not None and getattr(hv, func) is hv.register


def test_a_plugin_that_cannot_load_logs_instead_of_stopping_vllm(monkeypatch, caplog):
    import sys

    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    monkeypatch.setitem(sys.modules, "hpc_xla.vllm.moe", None)  # as if the import failed
    with caplog.at_level("ERROR", logger="hpc_xla.vllm"):
        hv.register()
    assert "hpc_xla's vLLM plugin is not registered: ModuleNotFoundError" in caplog.text
    # a deployment that asked for HPC_ATTN gets that failure, not vLLM's Tencent-backed class
    with pytest.raises(ImportError, match=r"HPC_ATTN: hpc_xla's vLLM plugin did not register in this process "
                                          r"\(ModuleNotFoundError: import of hpc_xla.vllm.moe halted"):
        AttentionBackendEnum.HPC_ATTN.get_class()
    monkeypatch.undo()
    hv.register()  # a later success points it back (the other tests need it)
    assert AttentionBackendEnum.HPC_ATTN.get_class() is hva.HpcXlaAttentionBackend
    assert hv.registration_error is None


def test_installed_package_is_a_vllm_plugin(tmp_path):
    """pip-install this tree (its binary via HPC_XLA_PREBUILT) and let vLLM's own plugin loader find it through the
    package's entry point, in a fresh process that does not see the source tree."""
    import glob
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    binary = glob.glob(os.path.join(root, "hpc_xla", "_hpc_xla.cpython-%d%d*.so" % sys.version_info[:2]))[0]
    env = dict(os.environ, HPC_XLA_PREBUILT=binary, PYTHONPATH="")
    site = str(tmp_path / "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    site, root], check=True, env=env, capture_output=True, timeout=600)
    code = ("from vllm.plugins import load_general_plugins; load_general_plugins(); "
            "from vllm.v1.attention.backends.registry import AttentionBackendEnum as E; "
            "from vllm.model_executor.layers import hpc; "
            "print(E.HPC_ATTN.get_path(), hpc.HpcRopeNorm.__module__)")
    res = subprocess.run([sys.executable, "-c", code], env=dict(env, PYTHONPATH=site), cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split()[-2:] == [hv.ATTENTION_BACKEND, "hpc_xla.vllm.rope_norm"], res.stdout


def test_backend_validation_names_what_it_refuses():
    from vllm.platforms.interface import DeviceCapability

    b = hva.HpcXlaAttentionBackend
    ok = dict(dtype=torch.bfloat16, kv_cache_dtype="fp8_e4m3", block_size=64, use_mla=False, has_sink=False,
              use_sparse=False, use_mm_prefix=False, use_per_head_quant_scales=False,
              device_capability=DeviceCapability(9, 0), attn_type="decoder")
    assert b.validate_configuration(head_size=128, **ok) == []
    for head_size in (64, 256):
        assert b.validate_configuration(head_size=head_size, **ok) == []
    bad = b.validate_configuration(head_size=96, **{**ok, "block_size": 24, "kv_cache_dtype": "fp8_e5m2",
                                                   "device_capability": DeviceCapability(10, 0)})
    assert any("head_size" in r for r in bad) and any("block_size" in r for r in bad)
    assert any("kv_cache_dtype" in r for r in bad) and any("compute capability" in r for r in bad)
    assert b.validate_configuration(head_size=128, **{**ok, "has_sliding_window": True})


@pytest.mark.parametrize("kwargs, match", [
    (dict(head_size=96), "head_size must be one of"),
    (dict(num_kv_heads=3), "num_heads / num_kv_heads"),
    (dict(kv_cache_dtype="fp8_e5m2"), "kv_cache_dtype must be one of"),
    (dict(sliding_window=128), "sliding_window"),
    (dict(logits_soft_cap=30.0), "logits_soft_cap"),
    (dict(alibi_slopes=[1.0] * 8), "alibi_slopes"),
])
def test_impl_refuses_what_it_cannot_run(kwargs, match):
    args = {**dict(num_heads=8, head_size=128, scale=0.1, num_kv_heads=2), **kwargs}
    with pytest.raises((ValueError, NotImplementedError), match=match):
        hva.HpcXlaAttentionImpl(**args)


def test_forward_refuses_value_heads_of_another_size():
    """vLLM passes head_size_v to the layer, not to the backend: the output it sizes with it is what forward sees."""
    import types

    impl = hva.HpcXlaAttentionImpl(num_heads=8, head_size=128, scale=0.1, num_kv_heads=2)
    out = torch.empty(3, 8 * 64, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="q/k head size 128; this layer has head_size_v=64"):
        impl.forward(types.SimpleNamespace(head_size_v=64), torch.empty(3, 8 * 128), None, None, None, None, out)


class Batch:
    """One step: requests of (context tokens already cached, new tokens), decodes first as vLLM orders them."""

    def __init__(self, requests, page_size, fp8, rng, num_blocks=None, padded=0):
        self.requests, self.page_size = requests, page_size
        pages = [-(-(c + n) // page_size) for c, n in requests]
        num_blocks = num_blocks or sum(pages) + 3
        self.seq_lens = [c + n for c, n in requests] + [0] * padded
        width = max(pages) + 1
        perm = rng.permutation(num_blocks)  # pages scattered over the pool, as vLLM's allocator leaves them
        self.block_table = np.zeros((len(self.seq_lens), width), np.int32)
        at = 0
        for i, p in enumerate(pages):
            self.block_table[i, :p] = perm[at:at + p]
            at += p
        q_lens = [n for _, n in requests] + [0] * padded
        self.query_start = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
        self.real_tokens = int(self.query_start[-1])
        # a padded step (FULL CUDA graph) carries one garbage token per padding request: slot -1, query length 0
        tokens = self.num_tokens = self.real_tokens + padded
        self.slots = np.full(tokens, -1, np.int64)
        # the whole sequences' K / V and the new tokens' q, bf16 values as the model produces them (fp64 arrays)
        def bf16_values(shape):
            return torch.tensor(rng.standard_normal(shape), dtype=torch.bfloat16).double().numpy()

        self.k = [bf16_values((c + n, NUM_KV_HEADS, HEAD_DIM)) for c, n in requests]
        self.v = [bf16_values((c + n, NUM_KV_HEADS, HEAD_DIM)) for c, n in requests]
        self.q = rng.standard_normal((tokens, NUM_Q_HEADS, HEAD_DIM))
        cache_dtype = torch.uint8 if fp8 else torch.bfloat16
        # vLLM's LBNHC cache: physical [NB, P, Hkv, 2D], logical [NB, Hkv, P, 2D]; unused slots hold NaN bytes
        phys = torch.full((num_blocks, page_size, NUM_KV_HEADS, 2 * HEAD_DIM), 0x7F if fp8 else float("nan"),
                          dtype=cache_dtype)
        self.kv_cache = phys.permute(0, 2, 1, 3)
        self.k_scale = torch.tensor(0.02 if fp8 else 1.0)
        self.v_scale = torch.tensor(0.03 if fp8 else 1.0)
        view = phys.view(torch.float8_e4m3fn) if fp8 else phys
        for i, (c, n) in enumerate(requests):
            for pos in range(c + n):
                block, off = self.block_table[i, pos // page_size], pos % page_size
                if pos < c:  # context: already in the cache
                    for half, x, s in ((0, self.k[i], self.k_scale), (1, self.v[i], self.v_scale)):
                        val = torch.tensor(x[pos] / float(s), dtype=torch.float32)
                        view[block, off, :, half * HEAD_DIM:(half + 1) * HEAD_DIM] = val.to(view.dtype)
                else:
                    self.slots[self.query_start[i] + pos - c] = block * page_size + off
        self.fp8 = fp8

    def metadata(self):
        from vllm.v1.attention.backend import CommonAttentionMetadata

        q_lens = np.diff(self.query_start)
        return CommonAttentionMetadata(
            query_start_loc=torch.from_numpy(self.query_start), query_start_loc_cpu=torch.from_numpy(self.query_start),
            seq_lens=torch.tensor(self.seq_lens, dtype=torch.int32), num_reqs=len(self.seq_lens),
            num_actual_tokens=self.num_tokens, max_query_len=int(q_lens.max()),
            max_seq_len=max(self.seq_lens), block_table_tensor=torch.from_numpy(self.block_table),
            slot_mapping=torch.from_numpy(self.slots))

    def new_kv(self):
        garbage = [np.full((self.num_tokens - self.real_tokens, NUM_KV_HEADS, HEAD_DIM), 1e4)]
        k = np.concatenate([x[c:] for x, (c, _) in zip(self.k, self.requests)] + garbage)
        v = np.concatenate([x[c:] for x, (c, _) in zip(self.v, self.requests)] + garbage)
        return torch.tensor(k, dtype=torch.bfloat16), torch.tensor(v, dtype=torch.bfloat16)

    def expected(self, scale):
        """fp64 causal attention over each request's whole sequence, with the cache's rounding applied to K / V
        (bf16, or fp8 of x / scale) and bf16 q."""
        def stored(x, s):
            t = torch.tensor(x / float(s), dtype=torch.float32)
            t = t.to(torch.float8_e4m3fn) if self.fp8 else t.to(torch.bfloat16)
            return t.double().numpy() * float(s)

        group = NUM_Q_HEADS // NUM_KV_HEADS
        q = torch.tensor(self.q, dtype=torch.bfloat16).double().numpy()
        out = np.zeros_like(q[:self.real_tokens])
        for i, (c, n) in enumerate(self.requests):
            k = np.repeat(stored(self.k[i], self.k_scale), group, axis=1)
            v = np.repeat(stored(self.v[i], self.v_scale), group, axis=1)
            rows = slice(self.query_start[i], self.query_start[i] + n)
            s = np.einsum("qhd,khd->hqk", q[rows], k) * scale
            s = np.where(np.arange(c + n)[None, None, :] > (c + np.arange(n))[None, :, None], -np.inf, s)
            p = np.exp(s - s.max(-1, keepdims=True))
            out[rows] = np.einsum("hqk,khd->qhd", p / p.sum(-1, keepdims=True), v)
        return out


def run_step(builder, impl, batch):
    """do_kv_cache_update then forward, as vLLM's attention layer calls them; returns the real tokens' output."""
    meta = builder.build(0, batch.metadata())
    layer = types.SimpleNamespace(_k_scale=batch.k_scale, _v_scale=batch.v_scale)
    k, v = batch.new_kv()
    q = torch.tensor(batch.q, dtype=torch.bfloat16)
    impl.do_kv_cache_update(layer, k, v, batch.kv_cache, meta.slot_mapping)
    output = torch.full((q.shape[0], NUM_Q_HEADS * HEAD_DIM), float("nan"), dtype=torch.bfloat16)
    impl.forward(layer, q, k, v, batch.kv_cache, meta, output)
    return meta, output.view(q.shape)[:batch.real_tokens]


def make_backend(tmp_path_factory, page_size, fp8, layer_name="layer.0", before_builder=None, max_num_seqs=16,
                 engine_fp8=None, dtype="bfloat16"):
    """(builder, impl) as vLLM makes them for one layer; before_builder(config) runs first (model construction).
    engine_fp8: the engine-wide --kv-cache-dtype when it differs from this layer's (--kv-cache-dtype-skip-layers)."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    engine_fp8 = fp8 if engine_fp8 is None else engine_fp8
    config = vllm_config(tmp_path_factory, page_size, "fp8_e4m3" if engine_fp8 else "auto", max_num_seqs, dtype)
    spec = FullAttentionSpec(block_size=page_size, num_kv_heads=NUM_KV_HEADS, head_size=HEAD_DIM,
                             dtype=torch.uint8 if fp8 else getattr(torch, dtype))
    with set_current_vllm_config(config):
        if before_builder is not None:
            before_builder(config)
        builder = hva.HpcXlaAttentionMetadataBuilder(spec, [layer_name], config, torch.device("cpu"))
        impl = hva.HpcXlaAttentionImpl(NUM_Q_HEADS, HEAD_DIM, SCALE, NUM_KV_HEADS,
                                       kv_cache_dtype="fp8_e4m3" if fp8 else "auto")
    return builder, impl


def emulate_unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale,
                              causal, window_size, block_table, softcap, q_descale, k_descale, v_descale,
                              kv_quant_mode=None, **unused):
    """vLLM's Triton unified_attention as its source defines the arguments (triton_unified_attention.py), in torch:
    per-tensor fp8 descales are applied only in KVQuantMode.FP8_PER_TENSOR (otherwise fp8 K/V are plain-cast)."""
    from vllm.v1.kv_cache_interface import KVQuantMode

    assert causal is True and tuple(window_size) == (-1, -1) and softcap == 0 and q_descale is None and not unused
    assert q.shape[0] >= int(cu_seqlens_q[-1]) and len(seqused_k) == len(cu_seqlens_q) - 1 == len(block_table)
    scaled = kv_quant_mode == KVQuantMode.FP8_PER_TENSOR and k_descale is not None
    one = torch.tensor(1.0)
    _torch_paths.prefill(q, k, v, block_table, seqused_k, cu_seqlens_q.tolist(), softmax_scale,
                         k_descale.reshape(-1)[0] if scaled else one, v_descale.reshape(-1)[0] if scaled else one, out)


@pytest.mark.parametrize("page_size, fp8, prefill_path", [(16, False, "torch"), (64, False, "torch"),
                                                          (32, True, "torch"), (16, False, "triton_arguments"),
                                                          (32, True, "triton_arguments")])
def test_mixed_batch_matches_reference(tmp_path_factory, monkeypatch, page_size, fp8, prefill_path):
    """Decodes (q_len 1) through decode_attention, a short extend and two prefills through the prefill path; the
    new tokens' K / V written by do_kv_cache_update first. prefill_path "triton_arguments": the CUDA path's call of
    vLLM's Triton kernel, with the kernel emulated from its argument semantics (no GPU here)."""
    builder, impl = make_backend(tmp_path_factory, page_size, fp8)
    if prefill_path == "triton_arguments":
        from vllm.v1.attention.ops import triton_unified_attention

        monkeypatch.setattr(triton_unified_attention, "unified_attention", emulate_unified_attention)
        monkeypatch.setattr(impl, "_prefill", impl._prefill_triton)
    rng = np.random.default_rng(page_size + fp8)
    batch = Batch([(300, 1), (1, 1), (129, 1), (40, 3), (0, 70), (200, 17)], page_size, fp8, rng)
    meta, out = run_step(builder, impl, batch)
    assert (meta.num_decodes, meta.num_decode_tokens, meta.decode_q_len, meta.num_prefills) == (3, 3, 1, 3)
    assert meta.decode_plan is not None
    want, got = batch.expected(SCALE), out.float().numpy()
    # the decode kernel's rows and the prefill path's (measured ~2e-3 on both, fp8 caches included)
    for rows, tol in ((slice(0, 3), 5e-3), (slice(3, None), 5e-3)):
        err = reference.relative_error(got[rows], want[rows])
        assert err < tol, (rows, err)


def test_a_layer_whose_cache_skips_fp8_runs_in_its_own_dtype(tmp_path_factory):
    """--kv-cache-dtype fp8 --kv-cache-dtype-skip-layers N: layer N keeps a bf16 cache (its own spec, group and
    builder), so its plan, q and kernels must follow the spec, not the engine-wide cache_dtype."""
    builder, impl = make_backend(tmp_path_factory, 16, False, engine_fp8=True)
    assert builder.kv_dtype == torch.bfloat16 and builder.q_dtype == torch.bfloat16
    rng = np.random.default_rng(77)
    batch = Batch([(300, 1), (129, 1), (0, 40)], 16, False, rng)
    meta, out = run_step(builder, impl, batch)
    assert meta.num_decodes == 2
    err = reference.relative_error(out.float().numpy(), batch.expected(SCALE))
    assert err < 5e-3, err
    fp8_builder, _ = make_backend(tmp_path_factory, 16, True)
    assert fp8_builder.kv_dtype == torch.float8_e4m3fn  # uint8 spec: vLLM's storage of an fp8 cache


@pytest.fixture(scope="module")
def bf16_backend(tmp_path_factory):
    return make_backend(tmp_path_factory, 16, False)


def test_random_batches_match_reference(bf16_backend):
    """Hypothesis-drawn steps as vLLM orders them (decodes, then extends / prefills, then padding requests): every
    real token's output against the fp64 reference, whatever the split."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    builder, impl = bf16_backend
    decodes = st.lists(st.tuples(st.integers(1, 200), st.just(1)), max_size=4)
    prefills = st.lists(st.tuples(st.integers(0, 120), st.integers(2, 40)), max_size=3)

    @settings(max_examples=25, deadline=None)
    @given(decodes=decodes, prefills=prefills, padded=st.integers(0, 2), seed=st.integers(0, 2 ** 16))
    def check(decodes, prefills, padded, seed):
        if not decodes + prefills:
            return
        batch = Batch(decodes + prefills, 16, False, np.random.default_rng(seed), padded=padded)
        meta, out = run_step(builder, impl, batch)
        assert meta.num_decodes == (len(decodes) + (padded if not prefills else 0))
        err = reference.relative_error(out.float().numpy(), batch.expected(SCALE))
        assert err < 1e-2, err

    check()


def test_decode_only_steps_reuse_one_plan_per_batch_size(tmp_path_factory):
    """A uniform decode step (what FULL CUDA graphs replay), padded with zero-length requests as vLLM pads them: the
    plan of a batch size is refilled in place (same buffers every step) and every plan shares one workspace."""
    builder, impl = make_backend(tmp_path_factory, 64, False)
    rng = np.random.default_rng(7)
    plans = []
    for step in range(3):
        batch = Batch([(int(c), 1) for c in rng.integers(1, 700, 5)], 64, False, rng, padded=3)
        meta, out = run_step(builder, impl, batch)
        assert (meta.num_decodes, meta.num_prefills, meta.decode_q_len) == (8, 0, 1)
        err = reference.relative_error(out.float().numpy(), batch.expected(SCALE))
        assert err < 1e-2, err
        plans.append(meta.decode_plan)
    assert all(p is plans[0] for p in plans)
    smaller = builder.build(0, Batch([(10, 1)], 64, False, rng).metadata()).decode_plan
    assert smaller is not plans[0] and smaller.workspace.data_ptr() == plans[0].workspace.data_ptr()


def test_shared_workspace_serves_the_largest_batch(tmp_path_factory):
    """max_num_seqs x kv heads > the grid: the workspace the largest batch needs exceeds a small batch's, and the
    one buffer the builder allocates must hold it (else a large step fails at run time)."""
    builder, impl = make_backend(tmp_path_factory, 16, False, max_num_seqs=512)
    rng = np.random.default_rng(9)
    small = builder.build(0, Batch([(40, 1)], 16, False, rng).metadata()).decode_plan
    big = builder.build(0, Batch([(int(c), 1) for c in rng.integers(1, 30, 512)], 16, False, rng).metadata())
    assert big.decode_plan.config.workspace_size > small.config.workspace_size
    assert big.decode_plan.workspace.data_ptr() == small.workspace.data_ptr()
    assert builder._workspace.shape[0] >= big.decode_plan.config.workspace_size


def test_speculative_decode_rows_go_to_the_decode_kernel(tmp_path_factory):
    """With speculative decoding vLLM moves requests of up to 1 + drafts tokens to the front; uniform ones run as
    decode_attention with q_len = 1 + drafts (causal among the new tokens)."""
    builder, impl = make_backend(tmp_path_factory, 16, False)
    builder.reorder_batch_threshold = 3  # what _init_reorder_batch_threshold sets for 2 speculative tokens
    rng = np.random.default_rng(3)
    batch = Batch([(100, 3), (37, 3), (5, 3), (60, 9)], 16, False, rng)
    meta, out = run_step(builder, impl, batch)
    assert (meta.num_decodes, meta.decode_q_len, meta.num_prefills) == (3, 3, 1)
    err = reference.relative_error(out.float().numpy(), batch.expected(SCALE))
    assert err < 1e-2, err


@pytest.mark.parametrize("drafts, parallel_drafting, want", [(None, False, 1), (1, False, 2), (3, False, 4),
                                                              (4, False, 1), (1, True, 3), (2, True, 1)])
def test_decode_width_and_graph_support_agree(tmp_path_factory, drafts, parallel_drafting, want):
    """Speculative decoding: requests of up to 1 + drafts tokens are decodes when the kernel takes that many rows
    (else every verification goes to the prefill path), and FULL graphs of uniform batches are declared exactly
    then (a graph captured around the prefill path would bake in per-step buffers). vLLM's V1 runner with parallel
    drafting appends up to `drafts` more rows (1 + 2 drafts); this CPU config runs V1."""
    from vllm.v1.attention.backend import AttentionCGSupport

    def with_drafts(config):
        if drafts is not None:
            config.speculative_config = types.SimpleNamespace(num_speculative_tokens=drafts,
                                                              parallel_drafting=parallel_drafting)

    builder, _ = make_backend(tmp_path_factory, 16, False, before_builder=with_drafts)
    assert builder.reorder_batch_threshold == want
    support = builder.get_cudagraph_support(builder.vllm_config, builder.kv_cache_spec)
    assert support == (AttentionCGSupport.UNIFORM_BATCH if want > 1 else
                       AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE)


def test_backend_refuses_what_vllm_must_not_combine():
    from vllm.platforms.interface import DeviceCapability

    b = hva.HpcXlaAttentionBackend
    args = dict(head_size=128, block_size=16, use_mla=False, has_sink=False, use_sparse=False, use_mm_prefix=False,
                device_capability=DeviceCapability(9, 0))
    assert "model's dtype" in b.supports_combination(dtype=torch.float16, kv_cache_dtype="bfloat16", **args)
    for dtype, cache in ((torch.float16, "auto"), (torch.bfloat16, "bfloat16"), (torch.float16, "fp8_e4m3")):
        assert b.supports_combination(dtype=dtype, kv_cache_dtype=cache, **args) is None
    # adaptive verification trims drafts on the device only; the batch split and the plan follow the host lengths
    assert b.supports_device_cpu_query_lens_mismatch() is False


def test_profiling_run_and_padded_tokens(tmp_path_factory):
    builder, impl = make_backend(tmp_path_factory, 16, False)
    output = torch.full((4, NUM_Q_HEADS * HEAD_DIM), 3.0, dtype=torch.bfloat16)
    layer = types.SimpleNamespace(_k_scale=torch.tensor(1.0), _v_scale=torch.tensor(1.0))
    q = torch.zeros(4, NUM_Q_HEADS, HEAD_DIM, dtype=torch.bfloat16)
    impl.forward(layer, q, q[:, :2], q[:, :2], torch.zeros(1, 2, 16, 256, dtype=torch.bfloat16), None, output)
    assert torch.all(output == 0)  # attn_metadata None: vLLM's profiling run
    rng = np.random.default_rng(5)
    batch = Batch([(33, 1), (8, 1)], 16, False, rng)
    with pytest.raises(NotImplementedError, match="output quantization"):
        impl.forward(layer, q, q, q, batch.kv_cache, builder.build(0, batch.metadata()), output,
                     output_scale=torch.tensor(1.0))


# ---- the fused prologue (HpcRopeNorm) ----

def test_models_get_the_hpc_xla_prologue():
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.layers import hpc as hpc_layers
    from vllm.model_executor.models import hy_v3

    from hpc_xla.vllm.rope_norm import HpcXlaRopeNorm

    assert hpc_layers.HpcRopeNorm is HpcXlaRopeNorm and hy_v3.HpcRopeNorm is HpcXlaRopeNorm
    assert not HpcXlaRopeNorm.support(8, 2, 128, "auto")  # no config: not the HPC_ATTN backend

    class Config:
        attention_config = types.SimpleNamespace(backend=None)
        model_config = types.SimpleNamespace(dtype=torch.bfloat16)

    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    config = Config()
    with set_current_vllm_config(config, check_compile=False):
        assert not HpcXlaRopeNorm.support(8, 2, 128, "auto")
        config.attention_config.backend = AttentionBackendEnum.HPC_ATTN
        assert HpcXlaRopeNorm.support(8, 2, 128, "auto") and HpcXlaRopeNorm.support(16, 1, 64, "fp8_e4m3")
        assert not HpcXlaRopeNorm.support(8, 2, 96, "auto") and not HpcXlaRopeNorm.support(8, 3, 128, "auto")
        assert not HpcXlaRopeNorm.support(8, 2, 128, "fp8_e5m2")
        config.model_config.dtype = torch.float16  # fp8 q, and the decode kernel writes the model's fp16 output
        assert HpcXlaRopeNorm.support(8, 2, 128, "fp8_e4m3") and HpcXlaRopeNorm.support(8, 2, 128, "auto")


@pytest.mark.parametrize("fp8, rotary_dim, skipped, dtype", [
    (False, 128, False, "bfloat16"), (False, 64, False, "bfloat16"), (True, 128, False, "bfloat16"),
    (False, 128, True, "bfloat16"), (True, 128, False, "float16")])
def test_fused_prologue_then_attention(tmp_path_factory, fp8, rotary_dim, skipped, dtype):
    """QK-norm (before RoPE, as HunYuan V3) + RoPE + K/V write by HpcXlaRopeNorm, then the backend's (skipped) KV
    write and forward on a mixed batch; fp8 cache: q reaches the decode kernel as fp8 with per-token-head scales
    (in the builder's fixed buffer, read inside CUDA graphs); rotary_dim 64: partial rotary from the cache's width;
    skipped: an fp8 engine whose layer keeps a bf16 cache (--kv-cache-dtype-skip-layers) -- the model still passes
    the engine's "fp8_e4m3"; float16: an fp16 model, whose fp8 q still gives fp16 attention output."""
    from vllm.model_executor.layers.hpc.rope_norm import QkNormPolicy
    from vllm.model_executor.layers.layernorm import RMSNorm

    from hpc_xla.vllm.rope_norm import HpcXlaRopeNorm

    rng = np.random.default_rng(21 + fp8)
    name = "model.layers.%d.%d.%d.%s.self_attn.attn" % (fp8, rotary_dim, skipped, dtype)
    model_dtype = getattr(torch, dtype)
    inv = 1.0 / 10000 ** (np.arange(0, rotary_dim, 2) / rotary_dim)
    angles = np.arange(4096)[:, None] * inv[None]
    cos_sin = torch.tensor(np.concatenate([np.cos(angles), np.sin(angles)], 1), dtype=torch.float32)
    made = {}

    def build_model_layer(config):
        # the model's Attention layer exists before its prologue (hy_v3 builds self.attn first)
        made["layer"] = types.SimpleNamespace(layer_name=name, kv_cache_dtype="fp8_e4m3" if fp8 else "auto")
        config.compilation_config.static_forward_context[name] = made["layer"]
        norms = [RMSNorm(HEAD_DIM, 1e-6, dtype=torch.float32) for _ in range(2)]
        for n in norms:
            n.weight.data = torch.tensor(rng.uniform(0.5, 1.5, HEAD_DIM), dtype=torch.float32)
        made["norms"] = norms
        made["rope"] = HpcXlaRopeNorm(NUM_Q_HEADS, NUM_KV_HEADS, HEAD_DIM, cos_sin, True, norms[0], norms[1],
                                      "fp8_e4m3" if fp8 or skipped else "auto", name, QkNormPolicy.NORM_THEN_ROPE)

    builder, impl = make_backend(tmp_path_factory, 16, fp8, layer_name=name, before_builder=build_model_layer,
                                 engine_fp8=fp8 or skipped, dtype=dtype)
    assert made["rope"].use_fp8 == fp8
    assert builder.fused_prologue and getattr(made["layer"], hva.FUSED_PROLOGUE)
    batch = Batch([(300, 1), (129, 1), (40, 2), (0, 70), (200, 17)], 16, fp8, rng, padded=2)
    builder._positions.fill_(999)  # what an earlier, larger step left there
    cam = batch.metadata()
    cam.positions = torch.zeros(batch.num_tokens, dtype=torch.int64)  # vLLM's: stale in draft steps, not used
    meta = builder.build(0, cam)
    want_positions = np.concatenate([np.arange(c, c + n) for c, n in batch.requests] + [np.zeros(2)])
    np.testing.assert_array_equal(meta.positions.numpy(), want_positions)
    if fp8:
        assert meta.q_scale.data_ptr() == builder.build(0, batch.metadata()).q_scale.data_ptr()

    layer = made["layer"]
    layer._k_scale, layer._v_scale = batch.k_scale, batch.v_scale
    q_raw = torch.tensor(batch.q, dtype=model_dtype)
    k_raw, v_raw = (t.to(model_dtype) for t in batch.new_kv())
    qkv = torch.cat([t.reshape(batch.num_tokens, -1) for t in (q_raw, k_raw, v_raw)], 1)
    q = torch.empty(batch.num_tokens, NUM_Q_HEADS, HEAD_DIM, dtype=torch.float8_e4m3fn if fp8 else model_dtype)
    made["rope"]._forward_impl(qkv, batch.kv_cache, meta, layer, q)
    impl.do_kv_cache_update(layer, k_raw, v_raw, batch.kv_cache, meta.slot_mapping)  # must leave the cache alone
    output = torch.full((batch.num_tokens, NUM_Q_HEADS * HEAD_DIM), float("nan"), dtype=model_dtype)
    impl.forward(layer, q.view(batch.num_tokens, -1), k_raw, v_raw, batch.kv_cache, meta, output)

    real = batch.real_tokens
    q_ref, k_ref, _ = reference.rope_norm(q_raw[:real].float().numpy(), k_raw[:real].float().numpy(),
                                          v_raw[:real].float().numpy(), want_positions[:real], cos_sin.numpy(),
                                          q_norm_weight=made["norms"][0].weight.detach().numpy(),
                                          k_norm_weight=made["norms"][1].weight.detach().numpy(), eps=1e-6,
                                          rotary_dim=rotary_dim)
    batch.q[:real] = q_ref
    for i, (c, n) in enumerate(batch.requests):
        batch.k[i][c:] = k_ref[batch.query_start[i]:batch.query_start[i] + n]
    want, got = batch.expected(SCALE), output[:real].view(real, NUM_Q_HEADS, HEAD_DIM).float().numpy()
    assert (meta.num_decodes, meta.num_prefills) == (2, 5)  # 3 prefills + 2 padding requests (0 tokens)
    for rows in (slice(0, 2), slice(2, None)):  # the decode kernel's rows, the prefill path's
        err = reference.relative_error(got[rows], want[rows])
        assert err < (5e-2 if fp8 else 1e-2), (rows, err)


# ---- MoE experts ----

def moe_config_for(num_experts, hidden, inter, top_k, ep_size, ep_rank, in_dtype=torch.bfloat16):
    """vLLM's FusedMoEConfig of a layer (tensor parallel 1: I per partition = inter)."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (FusedMoEConfig, FusedMoEParallelConfig,
                                                             RoutingMethodType)

    parallel = FusedMoEParallelConfig(tp_size=1, pcp_size=1, dp_size=1, ep_size=ep_size, tp_rank=0, pcp_rank=0,
                                      dp_rank=0, ep_rank=ep_rank, sp_size=1, use_ep=ep_size > 1,
                                      enable_eplb=False, all2all_backend="naive")
    config = FusedMoEConfig(num_experts=num_experts, experts_per_token=top_k, hidden_dim=hidden,
                            intermediate_size=inter, num_local_experts=num_experts // ep_size,
                            num_logical_experts=num_experts, activation=MoEActivation.SILU, device="cpu",
                            routing_method=RoutingMethodType.Renormalize, moe_parallel_config=parallel,
                            in_dtype=in_dtype)
    return config


def experts_for(num_experts, hidden, inter, top_k, ep_size, ep_rank, quant_config):
    """HpcXlaExperts as vLLM's fp8 oracle builds them (FusedMoEConfig of the layer + its quant config)."""
    from hpc_xla.vllm.moe import HpcXlaExperts

    return HpcXlaExperts(moe_config_for(num_experts, hidden, inter, top_k, ep_size, ep_rank), quant_config)


def test_moe_selection_refuses_what_fused_moe_cannot_run(monkeypatch):
    """Selection (is_supported_config, which vLLM's fp8 oracle and our bf16 selection ask) refuses a layer whose I
    per partition the CUDA path cannot take (Qwen3-30B-A3B at TP=8: 768 / 8 = 96) or whose activations are not
    bfloat16, by name, before the weights load; it failed at the profile run's workspace size, or in the
    constructor (a review of session 41)."""
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.quantization.utils.quant_utils import (kFp8Dynamic128Sym, kFp8Static128BlockSym,
                                                                           kFp8StaticTensorSym)

    from hpc_xla.vllm.moe import HpcXlaExperts

    monkeypatch.setattr(HpcXlaExperts, "_supports_current_device", staticmethod(lambda: True))  # (a CPU here)

    def supported(inter, keys=(None, None), in_dtype=torch.bfloat16):
        config = moe_config_for(8, 2048, inter, 2, 1, 0, in_dtype)
        return HpcXlaExperts.is_supported_config(HpcXlaExperts, config, *keys, mk.FusedMoEActivationFormat.Standard)

    block = (kFp8Static128BlockSym, kFp8Dynamic128Sym)
    assert supported(768) == (True, None)
    assert supported(192, (kFp8StaticTensorSym, kFp8StaticTensorSym)) == (True, None)
    ok, why = supported(96)
    assert not ok and "intermediate size 96 per partition (a multiple of 64" in why, why
    ok, why = supported(192, block)
    assert not ok and "intermediate size 192 per partition (a multiple of 128" in why, why
    ok, why = supported(768, in_dtype=torch.float16)
    assert not ok and "torch.float16 activations (bfloat16 only)" in why, why


def moe_quant_config(quant, w13_s, w2_s):
    """vLLM's quant config of a layer with these weight scales: per-tensor with static activation scales 0.02 /
    0.004, 128x128 blocks with dynamic activations, or bf16."""
    from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG, fp8_w8a8_moe_quant_config

    if quant is None:
        return FUSED_MOE_UNQUANTIZED_CONFIG
    static = quant == "fp8_tensor"
    return fp8_w8a8_moe_quant_config(w1_scale=torch.tensor(w13_s), w2_scale=torch.tensor(w2_s),
                                     a1_scale=torch.tensor(0.02) if static else None,
                                     a2_scale=torch.tensor(0.004) if static else None,
                                     block_shape=None if static else [128, 128])


def moe_weights(rng, experts, hidden, inter, quant):
    """(w13, w2 as the layer holds them, their scales, the reference's stored values) for fused_moe's scheme."""
    w13_q, w13_s = reference.quantize_moe_weights(rng.standard_normal((experts, 2 * inter, hidden)) * 0.05, quant)
    w2_q, w2_s = reference.quantize_moe_weights(rng.standard_normal((experts, hidden, inter)) * 0.05, quant)

    def held(w):
        if quant is None:
            return torch.tensor(w.astype(np.float32), dtype=torch.bfloat16)
        return torch.from_numpy(w.view(np.uint8)).view(torch.float8_e4m3fn)

    return held(w13_q), held(w2_q), w13_s, w2_s, w13_q, w2_q


@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_block128", None])
@pytest.mark.parametrize("ep, top_k, weights_on_input", [(None, 2, False), ("contiguous", 2, False),
                                                         ("expert_map", 2, False), (None, 1, True)])
def test_experts_match_reference(quant, ep, top_k, weights_on_input):
    """EP: rank 1 of 2 owns experts [4, 8) (contiguous, no expert map) or every other expert (vLLM's expert map);
    the other rank's experts add 0. weights_on_input: the layer scaled x by the top-1 weight already."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    rng = np.random.default_rng(11)
    E, H, I, T = 8, 256, 256, 7
    mine = {None: list(range(E)), "contiguous": list(range(4, 8)), "expert_map": [1, 3, 5, 7]}[ep]
    w1, w2, w13_s, w2_s, w13_q, w2_q = moe_weights(rng, len(mine), H, I, quant)
    x = torch.tensor(rng.standard_normal((T, H)), dtype=torch.bfloat16)
    ids = torch.tensor(np.stack([rng.choice(E, top_k, replace=False) for _ in range(T)]), dtype=torch.int32)
    ids[::3, 0] = -1  # vLLM's id for a padded or dropped slot: adds 0
    weights = torch.tensor(rng.random((T, top_k)) + 0.5, dtype=torch.float32)
    static = quant == "fp8_tensor"
    experts = experts_for(E, H, I, top_k, 1 if ep is None else 2, 0 if ep is None else 1,
                          moe_quant_config(quant, w13_s, w2_s))
    expert_map = None
    if ep == "expert_map":
        expert_map = torch.full((E,), -1, dtype=torch.int32)
        expert_map[mine] = torch.arange(len(mine), dtype=torch.int32)
    out = torch.full((T, H), float("nan"), dtype=torch.bfloat16)
    experts.apply(out, x, w1, w2, weights, ids, MoEActivation.SILU, E, expert_map, None, None, None, None, None,
                  weights_on_input)
    local_ids = np.full(ids.shape, -1)
    for j, g in enumerate(mine):
        local_ids[ids.numpy() == g] = j
    want = reference.fused_moe(x.double().numpy(), w13_q, w2_q, np.ones(ids.shape) if weights_on_input
                               else weights.numpy(), local_ids, quant=quant, w13_scale=w13_s, w2_scale=w2_s,
                               a13_scale=0.02 if static else None, a2_scale=0.004 if static else None)
    err = reference.relative_error(out.float().numpy(), want)
    assert err < (1e-2 if quant is None else 5e-3), err


def test_bf16_layers_select_hpc_xla_through_vllms_unquantized_path(monkeypatch):
    """`--moe-backend hpc` on a bf16 model: vLLM's unquantized MoE method picks our experts (its own oracle refuses
    "hpc"), builds its modular kernel around them, and the layer's output matches the fp64 reference. Other backends
    keep vLLM's selection."""
    import dataclasses

    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import (UnquantizedMoeBackend,
                                                                         make_unquantized_moe_kernel)

    from hpc_xla.vllm.moe import HpcXlaExperts

    rng = np.random.default_rng(5)
    E, H, I, K, T = 8, 256, 128, 2, 9
    config = dataclasses.replace(experts_for(E, H, I, K, 1, 0, FUSED_MOE_UNQUANTIZED_CONFIG).moe_config,
                                 moe_backend="hpc")
    with pytest.raises(ValueError, match="hpc_xla's MoE experts cannot run this bf16 layer: kernel does not support "
                                         "current device"):
        method.select_unquantized_moe_backend(moe_config=config)  # this machine has no Hopper GPU
    monkeypatch.setattr(HpcXlaExperts, "_supports_current_device", staticmethod(lambda: True))
    backend, experts_cls = method.select_unquantized_moe_backend(moe_config=config)
    assert (backend, experts_cls) == (UnquantizedMoeBackend.TRITON, HpcXlaExperts)
    with pytest.raises(ValueError, match="not supported for unquantized MoE"):  # vLLM's own answer, unchanged
        method.select_unquantized_moe_backend(moe_config=dataclasses.replace(config, moe_backend="cutlass"))

    kernel = make_unquantized_moe_kernel(FUSED_MOE_UNQUANTIZED_CONFIG, config, backend, experts_cls)
    w1, w2, _, _, w13_q, w2_q = moe_weights(rng, E, H, I, None)
    x, ids, weights = _routed(rng, E, H, K, T)
    out = kernel.apply(hidden_states=x, w1=w1, w2=w2, topk_weights=weights, topk_ids=ids,
                       activation=MoEActivation.SILU, global_num_experts=E, expert_map=None,
                       apply_router_weight_on_input=False)
    want = reference.fused_moe(x.double().numpy(), w13_q, w2_q, weights.numpy(), ids.numpy(), quant=None)
    assert reference.relative_error(out.float().numpy(), want) < 1e-2


@pytest.mark.parametrize("quant", ["fp8_tensor", "fp8_block128", None])
def test_experts_take_fused_moes_scratch_from_vllms_workspace(monkeypatch, quant):
    """fused_moe's scratch is vLLM's workspace2 (on a GPU a slice of the workspace manager's one buffer, which stops
    growing after the profile run): its first dim is M as vLLM asks, it holds what any call of up to M tokens needs
    (a call's own need is not monotone in M) with the w13 layout our conversion gives the layer -- interleaved where
    `interleavable`, which leaves out the large-batch path's gate_up rows -- and apply hands that very storage to
    fused_moe as bytes; a w13 in vLLM's layout where the interleaved one was expected gets fused_moe's own scratch."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    import hpc_xla.torch as ht
    from hpc_xla._ext import ext
    from hpc_xla._options import moe_quant_code
    from hpc_xla.moe_layout import interleavable
    from hpc_xla.vllm.moe import _interleaved_for_hpc

    rng = np.random.default_rng(17)
    E, H, I, K, T = 8, 256, 128, 2, 9
    w1, w2, w13_s, w2_s, _, _ = moe_weights(rng, E, H, I, quant)
    experts = experts_for(E, H, I, K, 1, 0, moe_quant_config(quant, w13_s, w2_s))
    expected = interleavable(quant, I)
    assert expected == (quant != "fp8_block128")
    for m in (1, 9, 100, 700, 5000):
        ws13, ws2, out = experts.workspace_shapes(m, 2 * I, H, K, E, E, None, MoEActivation.SILU)
        assert ws13 == (0,) and out == (m, H) and ws2[0] == m
        held = ws2[0] * ws2[1] * torch.bfloat16.itemsize
        assert held >= ht.fused_moe_workspace_size(m, K, E, H, I, quant, num_experts_global=E,
                                                   w13_interleaved=expected)
        worst = max(int(ext().fused_moe_call_workspace_size(t, K, E, H, I, moe_quant_code(quant), E, expected))
                    for t in range(1, m + 1))
        assert held >= worst > 0
    if expected:  # at 5000 tokens the grouped path computes the activation in its epilogue: no gate_up rows
        assert held < ht.fused_moe_workspace_size(5000, K, E, H, I, quant, num_experts_global=E)
    assert experts.workspace_shapes(0, 2 * I, H, K, E, E, None, MoEActivation.SILU) == ((0,), (0,), (0, H))

    seen = []
    real = ht.fused_moe
    monkeypatch.setattr(ht, "fused_moe", lambda *a, **kw: seen.append(kw["workspace"]) or real(*a, **kw))
    x, ids, weights = _routed(rng, E, H, K, T)
    _, ws2_shape, _ = experts.workspace_shapes(T, 2 * I, H, K, E, E, None, MoEActivation.SILU)
    workspace2 = torch.empty(ws2_shape, dtype=torch.bfloat16)
    held_w13 = _interleaved_for_hpc(w1, quant)  # what our conversion leaves in the layer (tagged where interleaved)
    outs = []
    for w13, ws in ((held_w13, workspace2), (w1, workspace2), (w1, None)):
        outs.append(torch.full((T, H), float("nan"), dtype=torch.bfloat16))
        experts.apply(outs[-1], x, w13, w2, weights, ids, MoEActivation.SILU, E, None, None, None, None, ws, None,
                      False)
    assert seen[0].dtype == torch.uint8 and seen[0].dim() == 1
    assert seen[0].data_ptr() == workspace2.data_ptr() and seen[0].numel() == workspace2.numel() * 2
    if expected:  # sized for the interleaved layout: too small for vLLM's, so fused_moe allocates its own
        assert seen[1] is None
    else:
        assert seen[1].data_ptr() == workspace2.data_ptr()
    assert seen[2] is None  # vLLM handed none
    for other in outs[1:]:
        assert torch.equal(outs[0].view(torch.int16), other.view(torch.int16))


@pytest.mark.parametrize("field, value", [("has_bias", True), ("swiglu_limit", 7.0), ("swiglu_alpha", 1.702)])
def test_experts_refuse_what_fused_moe_does_not_compute(monkeypatch, field, value):
    """Expert biases and SwiGLU variants would be ignored silently: refused at construction and at bf16 selection."""
    import dataclasses

    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method
    from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG

    from hpc_xla.vllm.moe import HpcXlaExperts

    plain = experts_for(8, 256, 128, 2, 1, 0, FUSED_MOE_UNQUANTIZED_CONFIG).moe_config
    config = dataclasses.replace(plain, moe_backend="hpc", **{field: value})
    with pytest.raises(NotImplementedError, match="hpc_xla MoE experts do not implement %s" % field):
        HpcXlaExperts(config, FUSED_MOE_UNQUANTIZED_CONFIG)
    monkeypatch.setattr(HpcXlaExperts, "_supports_current_device", staticmethod(lambda: True))
    with pytest.raises(ValueError, match="cannot run this bf16 layer: kernel does not support %s" % field):
        method.select_unquantized_moe_backend(moe_config=config)


def test_experts_refuse_batched_activations_and_a_models_own_reduction(monkeypatch):
    """DeepEP-LL style all2all (batched activations): refused by name at bf16 selection, as vLLM's fp8 oracle does,
    not a TypeError in the constructor later. A model's post_gemm2_hook (its own top-k reduction) cannot run inside
    fused_moe: refused at apply rather than ignored."""
    import dataclasses

    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG, FusedMoEParallelConfig

    from hpc_xla.vllm.moe import HpcXlaExperts

    experts = experts_for(8, 256, 128, 2, 1, 0, FUSED_MOE_UNQUANTIZED_CONFIG)
    config = dataclasses.replace(experts.moe_config, moe_backend="hpc")
    monkeypatch.setattr(HpcXlaExperts, "_supports_current_device", staticmethod(lambda: True))
    monkeypatch.setattr(FusedMoEParallelConfig, "use_batched_activation_format", property(lambda self: True))
    with pytest.raises(ValueError, match=r"cannot run this bf16 layer: kernel does not support \(.batched_experts.,\) "
                                         r"activation format"):
        method.select_unquantized_moe_backend(moe_config=config)
    experts.post_gemm2_hook = lambda unfinalized, output: None
    x = torch.zeros(2, 256, dtype=torch.bfloat16)
    with pytest.raises(NotImplementedError, match="post_gemm2_hook"):
        experts.apply(torch.empty_like(x), x, torch.zeros(8, 256, 256, dtype=torch.bfloat16),
                      torch.zeros(8, 256, 128, dtype=torch.bfloat16), torch.ones(2, 2), torch.zeros(2, 2, dtype=torch.int32),
                      MoEActivation.SILU, 8, None, None, None, None, None, None, False)


def _routed(rng, experts, hidden, top_k, tokens):
    """x, ids (distinct experts per token) and weights of a small routed batch."""
    x = torch.tensor(rng.standard_normal((tokens, hidden)), dtype=torch.bfloat16)
    ids = torch.tensor(np.stack([rng.choice(experts, top_k, replace=False) for _ in range(tokens)]), dtype=torch.int32)
    return x, ids, torch.tensor(rng.random((tokens, top_k)), dtype=torch.float32)


def _apply(experts, x, w13, w2, weights, ids):
    """The experts' output (poisoned first) for one routed batch, no EP."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    out = torch.full(x.shape, float("nan"), dtype=torch.bfloat16)
    experts.apply(out, x, w13, w2, weights, ids, MoEActivation.SILU, experts.moe_config.num_experts, None, None, None,
                  None, None, None, False)
    return out


def _moe_layer(w13, w2, **attrs):
    """A module holding the expert weights as vLLM's layer does (Parameters replace_parameter writes into)."""
    layer = torch.nn.Module()
    layer.w13_weight = torch.nn.Parameter(w13.clone(), requires_grad=False)
    layer.w2_weight = torch.nn.Parameter(w2.clone(), requires_grad=False)
    for k, v in attrs.items():
        setattr(layer, k, v)
    return layer


@pytest.mark.parametrize("inter", [128, 192, 96])
def test_bf16_weight_conversion_interleaves_w13_for_hpc(inter):
    """The plugin wraps vLLM's convert_to_unquantized_kernel_format where the unquantized method calls it: an "hpc"
    layer's w13 comes back interleaved and tagged (I % 64 == 0; I = 96 keeps vLLM's layout, untagged), vLLM's
    replace_parameter copies it into the layer's parameter in place (the storage CUDA graphs captured) with the
    tag, the experts read it with w13_interleaved -- the same output as on vLLM's layout -- and a reload (vLLM's
    layout loaded into the tagged parameter, converted again) interleaves it again. Other backends: unchanged."""
    import dataclasses

    from vllm.model_executor.layers.fused_moe import unquantized_fused_moe_method as method
    from vllm.model_executor.layers.fused_moe.config import FUSED_MOE_UNQUANTIZED_CONFIG
    from vllm.model_executor.layers.fused_moe.oracle.unquantized import UnquantizedMoeBackend
    from vllm.model_executor.utils import replace_parameter

    from hpc_xla.moe_layout import interleave_w13

    rng = np.random.default_rng(3)
    E, H, K, T = 4, 256, 2, 6
    experts = experts_for(E, H, inter, K, 1, 0, FUSED_MOE_UNQUANTIZED_CONFIG)
    hpc = dataclasses.replace(experts.moe_config, moe_backend="hpc")
    w1, w2, _, _, w13_q, w2_q = moe_weights(rng, E, H, inter, None)
    x, ids, weights = _routed(rng, E, H, K, T)

    def run(w13):
        return _apply(experts, x, w13, w2, weights, ids)

    plain = run(w1)
    want = reference.fused_moe(x.double().numpy(), w13_q, w2_q, weights.numpy(), ids.numpy(), quant=None)
    assert reference.relative_error(plain.float().numpy(), want) < 1e-2
    layer = _moe_layer(w1, w2)
    storage = layer.w13_weight.data_ptr()
    for _ in range(2):  # the first load, then a reload of vLLM's layout into the (tagged) parameter
        layer.w13_weight.data.copy_(w1)
        w13_new, w2_new = method.convert_to_unquantized_kernel_format(
            UnquantizedMoeBackend.TRITON, moe_config=hpc, w13_weight=layer.w13_weight, w2_weight=layer.w2_weight,
            layer=layer)
        replace_parameter(layer, "w13_weight", w13_new)
        replace_parameter(layer, "w2_weight", w2_new)
        assert layer.w13_weight.data_ptr() == storage
        interleaved = inter % 64 == 0
        assert getattr(layer.w13_weight, "hpc_xla_interleaved", False) == interleaved
        assert torch.equal(layer.w13_weight.data, interleave_w13(w1) if interleaved else w1)
        assert torch.equal(run(layer.w13_weight).view(torch.int16), plain.view(torch.int16))
    # another backend's conversion is vLLM's own
    w13_triton, _ = method.convert_to_unquantized_kernel_format(
        UnquantizedMoeBackend.TRITON, moe_config=experts.moe_config, w13_weight=w1, w2_weight=w2, layer=None)
    assert torch.equal(w13_triton, w1) and not getattr(w13_triton, "hpc_xla_interleaved", False)


_NO_ATTR = object()


@pytest.mark.parametrize("block_size", [None, _NO_ATTR, [128, 128]], ids=["tensor", "tensor-no-attr", "block"])
def test_fp8_weight_conversion_interleaves_per_tensor_w13_for_hpc(block_size):
    """The same through convert_to_fp8_moe_kernel_format (vLLM's Fp8MoEMethod calls it on load and reload): the HPC
    backend's per-tensor layers get the interleaved, tagged w13 and the experts' output is bitwise the one on vLLM's
    layout; 128x128 block layers (weight_block_size) keep vLLM's layout; other backends are untouched. Per-tensor
    layers come both ways: vLLM's Fp8MoEMethod sets weight_block_size = None, ModelOpt's never set it."""
    block = isinstance(block_size, list)
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend
    from vllm.model_executor.layers.quantization import fp8 as fp8_method
    from vllm.model_executor.utils import replace_parameter

    from hpc_xla.moe_layout import interleave_w13

    quant = "fp8_block128" if block else "fp8_tensor"
    rng = np.random.default_rng(4)
    E, H, I, K, T = 4, 256, 256, 2, 5
    w1, w2, w13_s, w2_s, _, _ = moe_weights(rng, E, H, I, quant)
    experts = experts_for(E, H, I, K, 1, 0, moe_quant_config(quant, w13_s, w2_s))
    layer = _moe_layer(w1, w2, **({} if block_size is _NO_ATTR else {"weight_block_size": block_size}))
    x, ids, weights = _routed(rng, E, H, K, T)

    def run(w13):
        return _apply(experts, x, w13, w2, weights, ids)

    plain = run(w1)
    scales = torch.tensor(w13_s), torch.tensor(w2_s)
    w13_new, _, _, _ = fp8_method.convert_to_fp8_moe_kernel_format(
        fp8_backend=Fp8MoeBackend.HPC, layer=layer, w13=layer.w13_weight, w2=layer.w2_weight, w13_scale=scales[0],
        w2_scale=scales[1], w13_input_scale=None, w2_input_scale=None)
    replace_parameter(layer, "w13_weight", w13_new)
    assert getattr(layer.w13_weight, "hpc_xla_interleaved", False) == (not block)
    expected = w1 if block else interleave_w13(w1.view(torch.uint8)).view(torch.float8_e4m3fn)
    assert torch.equal(layer.w13_weight.data.view(torch.uint8), expected.view(torch.uint8))
    assert torch.equal(run(layer.w13_weight).view(torch.int16), plain.view(torch.int16))
    other, _, _, _ = fp8_method.convert_to_fp8_moe_kernel_format(
        fp8_backend=Fp8MoeBackend.TRITON, layer=layer, w13=w1, w2=w2, w13_scale=scales[0], w2_scale=scales[1],
        w13_input_scale=None, w2_input_scale=None)
    assert other is w1 and not getattr(other, "hpc_xla_interleaved", False)


@pytest.mark.parametrize("quant", [None, "fp8_tensor", "fp8_block128"])
def test_experts_built_for_pre_processed_weights_read_the_converted_layout(quant):
    """vLLM's IPC weight cache hands over w13 as the daemon's conversion left it (interleaved for hpc layers where
    interleavable) but without our tag, and builds the experts under weights_already_processed -- as
    make_fp8_moe_kernel does here. Those experts read the untagged interleaved w13 bitwise like vLLM's layout;
    experts built outside that mode still take an untagged w13 as vLLM's layout; block128 is never interleaved."""
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend, make_fp8_moe_kernel
    from vllm.model_executor.utils import weights_already_processed

    from hpc_xla.moe_layout import interleavable, interleave_w13
    from hpc_xla.vllm.moe import HpcXlaExperts

    rng = np.random.default_rng(5)
    E, H, I, K, T = 4, 256, 128, 2, 5
    w1, w2, w13_s, w2_s, _, _ = moe_weights(rng, E, H, I, quant)
    qc = moe_quant_config(quant, w13_s, w2_s)
    loaded = experts_for(E, H, I, K, 1, 0, qc)
    assert not loaded.weights_pre_processed
    x, ids, weights = _routed(rng, E, H, K, T)
    plain = _apply(loaded, x, w1, w2, weights, ids)
    with weights_already_processed():
        if quant == "fp8_tensor":  # vLLM's own kernel builder, as Fp8MoEMethod._init_moe_kernel calls it
            cached = make_fp8_moe_kernel(qc, loaded.moe_config, HpcXlaExperts, Fp8MoeBackend.HPC).fused_experts
        else:
            cached = experts_for(E, H, I, K, 1, 0, qc)
    assert cached.weights_pre_processed and isinstance(cached, HpcXlaExperts)
    as_held = w1 if quant is None else w1.view(torch.uint8)
    daemon_w13 = interleave_w13(as_held) if interleavable(quant, I) else as_held  # what the daemon's conversion left
    daemon_w13 = daemon_w13 if quant is None else daemon_w13.view(torch.float8_e4m3fn)
    assert not getattr(daemon_w13, "hpc_xla_interleaved", False)
    out = _apply(cached, x, daemon_w13, w2, weights, ids)
    assert torch.equal(out.view(torch.int16), plain.view(torch.int16))
    if interleavable(quant, I):  # the same untagged tensor to experts built at load time: vLLM's layout, so wrong
        assert not torch.equal(_apply(loaded, x, daemon_w13, w2, weights, ids).view(torch.int16),
                               plain.view(torch.int16))


def test_experts_declare_what_vllm_selects_them_for():
    from vllm.model_executor.layers.quantization.utils.quant_utils import (kFp8Dynamic128Sym, kFp8DynamicTensorSym,
                                                                           kFp8Static128BlockSym, kFp8StaticTensorSym)

    from hpc_xla.vllm.moe import HpcXlaExperts

    assert HpcXlaExperts._supports_quant_scheme(kFp8StaticTensorSym, kFp8StaticTensorSym)
    assert HpcXlaExperts._supports_quant_scheme(kFp8Static128BlockSym, kFp8Dynamic128Sym)
    assert not HpcXlaExperts._supports_quant_scheme(kFp8StaticTensorSym, kFp8DynamicTensorSym)
    assert not HpcXlaExperts._supports_current_device()  # this CPU platform: never auto-selected here
    assert HpcXlaExperts._supports_shape(2048) and not HpcXlaExperts._supports_shape(2000)
