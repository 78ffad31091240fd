"""Framework-free pieces of the decode API shared by hpc_xla.jax and hpc_xla.torch: the plan's static config,
sizes of the plan and workspace, and a reader of plans (used by tests and for debugging)."""

import contextlib
import dataclasses
import math
import re

import numpy as np

from hpc_xla import _args, _options
from hpc_xla._ext import ext

SCHEDULES = {"dynamic": 0, "static": 1}
HEADER_FIELDS = ("magic", "version", "batch", "num_kv_heads", "num_q_heads", "head_dim", "q_len", "page_size",
                 "kv_dtype", "max_ctas", "num_ctas", "capacity", "piece_cost", "head_cost", "aligned")
HEADER_INTS = 16
TILE_TOKENS = 64
MAX_STATIC_SPLITS = 16
MAX_Q_LEN = 4  # new tokens per sequence the kernel takes (csrc/attention/decode.h kMaxQLen)
# Read from the binary once, at import: the faces then compute sizes and codes in plain Python, which torch.compile
# traces (a call into the extension while dynamo traces is a graph break). tests/test_decode_plan.py checks the
# formulas below against the binary's.
_DTYPE_CODES = {n: ext().dtype_code(n) for n in ("float32", "float16", "bfloat16", "float8_e4m3fn", "int32", "int64",
                                                 "uint8")}
MAX_CTAS_LIMIT = int(ext().decode_max_ctas_limit())


@dataclasses.dataclass(frozen=True)
class DecodeConfig:
    """What a decode plan is built for (static: part of the jit cache key)."""

    batch: int
    num_kv_heads: int
    num_q_heads: int
    head_dim: int
    q_len: int
    page_size: int
    kv_dtype: str
    max_ctas: int

    @property
    def plan_size(self):
        return plan_ints(self.batch, self.max_ctas)

    @property
    def workspace_size(self):
        return workspace_floats(self.batch, self.num_kv_heads, self.num_q_heads, self.head_dim, self.q_len,
                                self.max_ctas)

    def check_call(self, batch, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype=None, plan_ints=None,
                   op="decode_attention", plan_name="plan"):
        """Raises ValueError naming the first field the call disagrees on (kv_dtype: the cache's dtype, which picks
        the kernel the plan's grid was sized for; None skips it). plan_ints: the plan array's length, which must be
        what decode_plan wrote -- the GPU path reads max_ctas back from it and cannot see the header without a sync
        (the CPU path's header check says the same, in the same words). op / plan_name: how the caller's face names
        itself and the plan it was given (decode_plan refilling `out` says so)."""
        if plan_ints is not None and plan_ints != self.plan_size:
            ctas = plan_max_ctas(plan_ints, batch)
            implied = "max_ctas=%d" % ctas if ctas >= 0 else "no decode_plan"
            raise ValueError("%s: %s holds %d int32, which for batch %d means %s, but decode_plan built it for "
                             "max_ctas=%d (pass the whole plan tensor decode_plan filled, not a resized buffer)"
                             % (op, plan_name, plan_ints, batch, implied, self.max_ctas))
        kv = self.kv_dtype if kv_dtype is None else canonical_dtype_name(kv_dtype)
        for name, got in (("batch", batch), ("num_kv_heads", num_kv_heads), ("num_q_heads", num_q_heads),
                          ("head_dim", head_dim), ("q_len", q_len), ("page_size", page_size), ("kv_dtype", kv)):
            want = getattr(self, name)
            if want != got:
                raise ValueError("%s: %s was built for %s=%s but this call has %s=%s"
                                 % (op, plan_name, name, want, name, got))


def plan_ints(batch, max_ctas):
    """int32 of a plan (csrc/attention/decode_plan.h PlanInts)."""
    return HEADER_INTS + (batch + 1) + 2 * (max_ctas + 1)


def plan_max_ctas(ints, batch):
    """The max_ctas a plan of `ints` int32 for `batch` sequences was built with, or -1 when no decode_plan for this
    batch has that size (decode_plan.h PlanMaxCtas, plan_ints' inverse)."""
    rest = ints - HEADER_INTS - (batch + 1)
    return -1 if rest < 4 or rest % 2 else rest // 2 - 1


def static_splits(batch, num_kv_heads, max_ctas):
    """Fixed splits per sequence of the static schedule (decode_validate.cc StaticSplits)."""
    units = batch * num_kv_heads
    return min(max(max_ctas // units if units > 0 else 1, 1), MAX_STATIC_SPLITS)


def workspace_floats(batch, num_kv_heads, num_q_heads, head_dim, q_len, max_ctas):
    """fp32 elements of decode_attention's workspace for either schedule (decode_validate.cc DecodeWorkspaceFloats)."""
    rows = q_len * (num_q_heads // max(num_kv_heads, 1))
    slots = max(2 * max_ctas, batch * num_kv_heads * static_splits(batch, num_kv_heads, max_ctas))
    return slots * rows * (head_dim + 1)


def canonical_dtype_name(dtype):
    """'bfloat16' | 'float16' | 'float8_e4m3fn' | ... for numpy / jax / torch dtypes or names."""
    if isinstance(dtype, str):
        return dtype
    s = str(dtype)
    if s.startswith("torch."):
        return s[len("torch."):]
    return np.dtype(dtype).name


def out_dtype_name(op, q_dtype, out_dtype):
    """decode_attention's output dtype name: q's for a 16-bit q; for an fp8 q (rope_norm's q_quant) `out_dtype`, bfloat16
    or float16 (the model's dtype), default bfloat16. Raises ValueError naming `out_dtype` otherwise."""
    q_name = canonical_dtype_name(q_dtype)
    want = None if out_dtype is None else canonical_dtype_name(out_dtype)
    if q_name.startswith("float8"):
        if want not in (None, "bfloat16", "float16"):
            raise ValueError("%s: out_dtype must be bfloat16 or float16 for a %s q; got %s" % (op, q_name, want))
        return want or "bfloat16"
    if want not in (None, q_name):
        raise ValueError("%s: out_dtype must be q's dtype (%s) for a 16-bit q; got %s" % (op, q_name, want))
    return q_name


def dtype_code(op, name, dtype):
    """The binary's code for the dtype of argument `name`; a dtype it does not know is an error naming both."""
    try:
        return _DTYPE_CODES[canonical_dtype_name(dtype)]
    except (TypeError, ValueError, KeyError):
        raise ValueError("%s: %s has dtype %s, which hpc_xla does not take (bfloat16, float16, float8_e4m3fn, ...)"
                         % (op, name, dtype)) from None


def check_shape_args(op, num_kv_heads, num_q_heads, head_dim, page_size, q_len, max_ctas):
    """The plan's integer arguments -> ints (max_ctas may be None: the device's default)."""
    # (<= 2^31 - 1: the binary takes C ints; larger ones got nanobind's "incompatible function arguments")
    ints = [_args.integer(op, n, v, minimum=1, maximum=2**31 - 1)
            for n, v in (("num_kv_heads", num_kv_heads), ("num_q_heads", num_q_heads), ("head_dim", head_dim),
                         ("page_size", page_size), ("q_len", q_len))]
    return ints + [None if max_ctas is None else checked_max_ctas(op, max_ctas)]


def checked_max_ctas(op, max_ctas):
    """An explicit max_ctas -> int in [1, MAX_CTAS_LIMIT] (the workspace is sized from it before csrc sees it: a
    huge value was an allocation of terabytes, or a hang in eager jax, instead of an error)."""
    return _args.integer(op, "max_ctas", max_ctas, minimum=1, maximum=MAX_CTAS_LIMIT)


def max_ctas_for(device_index, num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, q_dtype):
    """Persistent-grid size: SMs x resident CTAs (occupancy API) on CUDA device `device_index`; the CPU
    platform's fixed count when device_index is None."""
    return int(ext().decode_max_ctas(num_kv_heads, num_q_heads, head_dim, q_len, page_size,
                                     dtype_code("decode_plan", "kv_dtype", kv_dtype),
                                     dtype_code("decode_plan", "q_dtype", q_dtype),
                                     -1 if device_index is None else int(device_index)))


KV_DTYPES = ("bfloat16", "float16", "float8_e4m3fn")


def check_cache_dtype_before_planning(k_cache):
    """decode_attention without a plan builds one for k_cache's dtype: a dtype no kernel runs is named here as the
    cache's (decode_plan's own error names a kv_dtype this call never passed). Off the hot path: with a plan, csrc
    checks the cache against it."""
    if canonical_dtype_name(k_cache.dtype) not in KV_DTYPES:
        raise ValueError("decode_attention: k_cache must have dtype %s; got %s"
                         % (", ".join(KV_DTYPES), canonical_dtype_name(k_cache.dtype)))


# decode_attention derives the plan's config from its operands: where each field comes from
_ATTENTION_FIELDS = (("num_q_heads", "q.shape[1]"), ("num_kv_heads", "k_cache.shape[2]"), ("head_dim", "q.shape[2]"),
                     ("page_size", "k_cache.shape[1]"), ("kv_dtype", "k_cache.dtype"), ("q_dtype", "q.dtype"))


@contextlib.contextmanager
def planning_for_attention():
    """decode_attention without a plan plans itself (decode_plan, or the occupancy query of the static schedule):
    their errors said "decode_plan: num_q_heads (3) must be ...", a function and arguments the caller never used.
    Re-raised as decode_attention's, naming the operands each field comes from."""
    try:
        yield
    except ValueError as e:
        if not str(e).startswith("decode_plan: "):
            raise
        msg = str(_args.as_op(e, "decode_plan", "decode_attention"))
        origin = ["%s = %s" % (field, where) for field, where in _ATTENTION_FIELDS if re.search(r"\b%s\b" % field, msg)]
        raise ValueError(msg + (" (%s)" % ", ".join(origin) if origin else "")) from None


def check_attention_call(q, k_cache, seq_lens, plan, plan_type, q_len, schedule):
    """decode_attention's arguments as both faces check them before planning (shapes the wrappers read) -> q_len."""
    if plan is not None and not isinstance(plan, plan_type):
        raise TypeError("decode_attention: plan must be a DecodePlan from decode_plan (or None); got %s"
                        % type(plan).__name__)
    if q_len is None:  # the plan's, else what the shapes say (q holds B * q_len rows)
        batch = seq_lens.shape[0] if len(seq_lens.shape) == 1 else 0
        # by comparisons, not q.shape[0] // batch: under torch.compile's dynamic shapes a division stays symbolic
        # (and then fails where the occupancy query needs a constant); a comparison is a guard and gives an int.
        # One past MAX_Q_LEN still names q_len in its error; other row counts (and B = 0) fall to 1 (the rows check
        # names q).
        q_len = plan.config.q_len if plan is not None else next(
            (n for n in range(1, MAX_Q_LEN + 2) if q.shape[0] == batch * n), 1)
    q_len = _args.integer("decode_attention", "q_len", q_len, minimum=1, maximum=MAX_Q_LEN)  # (2^40 hit nanobind)
    if not _options.is_choice(schedule, SCHEDULES):
        raise ValueError("decode_attention: schedule must be 'dynamic' or 'static'; got %r" % (schedule,))
    if len(seq_lens.shape) != 1:
        raise ValueError("decode_attention: seq_lens must be [B] int32; got shape %s" % (tuple(seq_lens.shape),))
    for name, a in (("q", q), ("k_cache", k_cache)):
        dtype_code("decode_attention", name, a.dtype)
    if len(q.shape) != 3 or len(k_cache.shape) != 4:
        raise ValueError("decode_attention: q must be [B * q_len, Hq, D] and k_cache [NB, P, Hkv, D]; got %s, %s"
                         % (tuple(q.shape), tuple(k_cache.shape)))
    return q_len


def planned_max_ctas(config, max_ctas):
    """decode_attention's CTA budget when a plan is given, for either schedule and both faces: the plan's. A
    different explicit max_ctas is refused (it used to be ignored by one face's static schedule and used by the
    other's, so the two gave different splits, hence different bits)."""
    if max_ctas is not None and checked_max_ctas("decode_attention", max_ctas) != config.max_ctas:
        raise ValueError("decode_attention: max_ctas=%d but the plan was built for max_ctas=%d; omit max_ctas (the "
                         "plan's is used) or build the plan with it" % (max_ctas, config.max_ctas))
    return config.max_ctas


def default_sm_scale(head_dim, sm_scale):
    return _args.real("decode_attention", "sm_scale", sm_scale) if sm_scale is not None else 1.0 / math.sqrt(head_dim)


def read_plan(plan):
    """Decodes a plan array (numpy) -> dict(header fields, prefix, starts [(unit, tile)])."""
    plan = np.asarray(plan).astype(np.int64)
    header = dict(zip(HEADER_FIELDS, plan[:len(HEADER_FIELDS)].tolist()))
    batch, max_ctas = header["batch"], header["max_ctas"]
    prefix = plan[HEADER_INTS:HEADER_INTS + batch + 1]
    starts = plan[HEADER_INTS + batch + 1:HEADER_INTS + batch + 1 + 2 * (max_ctas + 1)].reshape(-1, 2)
    return dict(header, prefix=prefix, starts=[tuple(s) for s in starts.tolist()])


def plan_pieces(plan, seq_lens):
    """[(cta, unit, tile_begin, tile_end)] as the kernels walk them (mirrors NextPiece in decode_plan.h)."""
    info = read_plan(plan)
    batch = info["batch"]
    tiles = [(int(n) + TILE_TOKENS - 1) // TILE_TOKENS for n in np.asarray(seq_lens)]
    out = []
    for cta in range(info["num_ctas"]):
        unit, tile = info["starts"][cta]
        end_unit, end_tile = info["starts"][cta + 1]
        while unit < end_unit or (unit == end_unit and tile < end_tile):
            n = tiles[unit % batch]
            end = n if unit < end_unit else min(end_tile, n)
            if end > tile:
                out.append((cta, unit, tile, end))
            unit, tile = unit + 1, 0
    return out


def merge_task_covering(plan, i):
    """(the first boundary of the unit that CTA boundary i cuts, i's rank among that unit's boundaries), or None when
    boundary i falls between units (mirrors MergeTaskCovering in decode_plan.h: the combine CTA of boundary i)."""
    info = read_plan(plan)
    if i < 1 or i >= info["num_ctas"]:
        return None
    unit, tile = info["starts"][i]
    if tile == 0:
        return None
    h, b = divmod(unit, info["batch"])
    first_pos = h * info["head_cost"] + int(info["prefix"][b]) + info["piece_cost"]
    first = first_pos // info["capacity"] + 1
    return first, i - first

