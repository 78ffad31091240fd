// Paged decode attention (DESIGN.md API item 2): decode_plan builds the load-balanced schedule on the device
// from seq_lens (decode_plan.h explains it); decode_attention runs a persistent grid over it (dynamic) or a
// fixed (kv head, sequence, split) grid (static), then merges split pieces in a fixed order.
#pragma once

#include <cstdint>

#include "csrc/common/status.h"
#include "csrc/common/tensor_view.h"

typedef struct CUstream_st* cudaStream_t;

namespace hpc {

enum class DecodeSchedule : int32_t { kDynamic = 0, kStatic = 1 };

constexpr int kMaxQLen = 4;
constexpr int kMaxGroup = 16;       // q heads per kv head
constexpr int kMaxStaticSplits = 16;

// What a plan is built for; decode_attention checks its operands against it.
struct DecodeConfig {
  int num_kv_heads = 0;
  int num_q_heads = 0;
  int head_dim = 0;
  int q_len = 1;
  int page_size = 0;
  DType kv_dtype = DType::kBF16;
  DType q_dtype = DType::kBF16;
};

// Largest persistent grid for `config` on CUDA device `device`: SMs x resident CTAs per SM from the occupancy
// API for the kernel the config selects. (The CPU platform uses kCpuMaxCtas.)
constexpr int kCpuMaxCtas = 64;
Status DecodeMaxCtas(const DecodeConfig& config, int device, int* max_ctas);

struct DecodePlanArgs {
  TensorView seq_lens;  // [B] int32 (device for CUDA)
  TensorView plan;      // [PlanInts(B, max_ctas)] int32, written
  DecodeConfig config;
  int max_ctas = 0;
};

Status ValidateDecodePlan(const DecodePlanArgs& args);
Status DecodePlanCuda(const DecodePlanArgs& args, cudaStream_t stream);
Status DecodePlanCpu(const DecodePlanArgs& args);

struct DecodeAttentionArgs {
  TensorView q;            // [B*q_len, Hq, D] bf16 | fp16 | float8_e4m3fn (then q_scale)
  TensorView q_scale;      // [B*q_len, Hq] f32, only with fp8 q
  TensorView k_cache;      // [NB, P, Hkv, D] bf16 | fp16 | float8_e4m3fn, last dim contiguous
  TensorView v_cache;      // same shape and dtype
  TensorView block_table;  // [B, max_blocks] int32
  TensorView seq_lens;     // [B] int32: total KV length incl. the q_len new tokens
  TensorView plan;         // dynamic schedule: from decode_plan with the same config
  TensorView workspace;    // float32, >= DecodeWorkspaceFloats(...) elements
  TensorView out;          // [B*q_len, Hq, D] bf16 (fp16 when q is fp16)
  TensorView k_scale, v_scale;  // float32 scalars, only with an fp8 cache
  float sm_scale = 0.0f;
  int q_len = 1;
  DecodeSchedule schedule = DecodeSchedule::kDynamic;
  int max_ctas = 0;        // static schedule: sizes the split count (dynamic: read from the plan)
};

// Fixed splits per sequence of the static schedule: fills about one wave of max_ctas.
int StaticSplits(int64_t batch, int num_kv_heads, int max_ctas);
// fp32 elements the workspace needs for these max shapes (covers both schedules).
int64_t DecodeWorkspaceFloats(int64_t batch, int num_kv_heads, int num_q_heads, int head_dim, int q_len,
                              int max_ctas);

Status ValidateDecodeAttention(const DecodeAttentionArgs& args, DecodeConfig* config);
// Checks a plan header (host copy) against the call: "plan was built for q_len=1 but this call has q_len=2";
// plan_ints is the plan tensor's length (its max_ctas must be the header's).
Status CheckPlanHeader(const int32_t* header, const DecodeConfig& config, int64_t batch, int64_t plan_ints);
// Checks a plan's per-sequence costs (host copy of header + prefix) against this call's seq_lens: a plan refilled
// for other lengths (a stale one) would merge partials this call never wrote -- garbage, not an error.
Status CheckPlanLengths(const int32_t* plan, const int32_t* seq_lens, int64_t batch);
// Fills the plan for host seq_lens (the CPU platform; also what the GPU planner computes).
// The least work (tiles) the planner gives a CTA: kMinCapacityTiles, or HPC_XLA_DECODE_MIN_TILES (1..64) for
// A/B runs. Read once; the GPU planner and BuildPlanHost use the same value.
int DecodeMinCapacityTiles();
// The planner's fixed cost per piece in tiles for `config` (attention::PieceCostTiles: by the rows a piece
// carries), or HPC_XLA_DECODE_PIECE_COST=0..16 for every config (A/B).
int DecodePieceCostTiles(const DecodeConfig& config);
// The second piece cost the planner lays a batch out with, keeping the layout of the smaller modeled makespan
// (attention::AlternativePieceCostTiles; 0: none, and none while HPC_XLA_DECODE_PIECE_COST forces one).
int DecodeAlternativePieceCostTiles(const DecodeConfig& config);
// The model's true cost of a piece in tenths of a tile (attention::kModelPieceTenths), or
// HPC_XLA_DECODE_MODEL_PIECE=0..200 (A/B; 0: no choice, the base cost always).
int DecodeModelPieceTenths();
// Whether the choosing planner (from 16 rows a piece, unless HPC_XLA_DECODE_PIECE_COST / _MODEL_PIECE=0 turn the
// choice off) also considers the aligned layout (decode_plan.h): 1 (default) as AlignedChosen says (its Q tiles
// model below the cost layouts' makespan and Q outweighs a piece); HPC_XLA_DECODE_ALIGNED=0 never, =2 whenever it
// fits, =3 whenever it fits at any rows a piece (A/B).
int DecodeAlignedMode();
// Where the GPU plan kernel lets the attention kernel in (PDL): 0 (default) after its first scan; 1 right after its
// PdlWait (HPC_XLA_DECODE_PLAN_TRIGGER=1, kept for A/B). Session 48 (H100, 2 rounds): 0 was 1.4-4.6 us faster per
// step at q_len 2, where the planner chooses between layouts, and even at q_len 1; layer time the same.
int DecodePlanEarlyTrigger();


void BuildPlanHost(const int32_t* seq_lens, int batch, const DecodeConfig& config, int max_ctas, int32_t* plan);
Status DecodeAttentionCuda(const DecodeAttentionArgs& args, cudaStream_t stream);
Status DecodeAttentionCpu(const DecodeAttentionArgs& args);

}  // namespace hpc
