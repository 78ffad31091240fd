// The decode schedule: ONE __host__ __device__ source of truth used by the GPU planner kernel, the attention
// and combine kernels, and the CPU reference.
//
// Work: every (kv head h, sequence b) "unit" is cut into 64-token tiles, n_b = ceil(seq_len_b / 64). Each unit
// also costs a fixed `piece_cost` (tile-equivalents: loading q, the epilogue, a possible merge). Units are laid
// out head-major on a line of cost positions: unit (h, b) occupies [h*W + prefix[b], h*W + prefix[b+1]) with
// W = prefix[B], first its overhead then its tiles. CTA i of the persistent grid owns the positions
// [i*Q, (i+1)*Q) with Q = max(ceil(total / max_ctas), min_capacity): a tile belongs to the CTA where its
// position lies, so every CTA gets the same work to within one tile plus one piece cost, across sequence
// boundaries. A unit cut by a CTA boundary is "split": its pieces write fp32 partials that are merged (by
// log-sum-exp, in CTA order, so results are bitwise reproducible) by the combine kernel.
//
// Aligned layout (from 16 rows a piece, where the planner chooses): every unit is padded to a whole number of CTAs,
// span_b = ceil(n_b / Q) x Q positions with piece cost 0, so every CTA holds one piece of one unit and no piece ends
// mid-CTA (s43b's traces: such a finish costs ~19 us against ~3 at the CTA's end). The header says so
// (kFieldAligned); the walk, the merge tasks and the combine read it as any other layout of capacity Q (a CTA gets
// 1 to Q tiles, not the even share above). Unlike the other layouts it stays valid for lengths whose units need
// the same CTAs (every CTA still has a tile, so every partial the combine merges is written): CheckPlanLengths
// accepts exactly those.
//
// Partial slots are indexed by task, not by (batch, max_splits): a CTA has at most two split pieces (its
// first and its last), so CTA i uses slots 2i (its first piece) and 2i+1 (its last piece).
//
// Plan (int32 array, size PlanInts(batch, max_ctas), fixed for given max shapes, so CUDA-graph safe):
//   [0, kPlanHeaderInts)  header (PlanField)
//   prefix[batch + 1]     per-head cost prefix over sequences
//   start[2 * (max_ctas + 1)]  (unit, tile) where CTA i starts; entry num_ctas is the end (num_units, 0)
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define HPC_PLAN_HD __host__ __device__ __forceinline__
#else
#define HPC_PLAN_HD inline
#endif

namespace hpc::attention {

constexpr int kTileTokens = 64;
constexpr int kPlanHeaderInts = 16;
constexpr int32_t kPlanMagic = 0x4C505848;  // "HXPL"
constexpr int32_t kPlanVersion = 1;
// Fixed cost of one piece in tile-equivalents (q load, pipeline ramp, epilogue/merge) and the least work a
// CTA is given on top of it. The epilogue and the merge scale with the rows a piece carries (q_len x group):
// 4 tiles from 8 rows (session 26 A/B of 0/1/2/3/4/6/8 on the H200, bench/NOTES.md: 8/1/128 bf16 and fp8 rows
// 0.5-3 us faster than 2 -- zipf 40.7 -> 38.3, 64x4K 43.8 -> 42.8 --, q_len 2 4-10%, 64x512 +0.1-0.4, 64/8
// within noise; 6 and 8 lose on the small batches), 2 below (32/8/128, 4 rows: 2 beat 4 by ~1% on 64x4K and
// zipf in both rounds, H200 and H100). Min tiles 1 (was 4): the small uniform batch (8/1/128, 64x512) ran
// 29.2 -> 24.1 us with more, smaller CTAs and no other benchmark row moved (min-tiles A/B).
HPC_PLAN_HD int PieceCostTiles(int rows_per_piece) { return rows_per_piece >= 8 ? 4 : 2; }
// From 16 rows (q_len 2 at GQA 8) a piece that ends mid-CTA costs far more than 4 tiles (s43b / s43e traces: ~19 us
// of FinishPiece against ~3 at the CTA's end), and the best fixed cost depends on the batch (s43b, H100: 6 gains
// 1-2.5 us on the skewed batches, loses 3 on 64x4K, whose CTAs 4 cuts at sequence boundaries). So the planner also
// lays the batch out with this cost and keeps whichever layout has the smaller modeled makespan (CostLayout).
HPC_PLAN_HD int AlternativePieceCostTiles(int rows_per_piece) { return rows_per_piece >= 16 ? 6 : 0; }
// The model's true cost of a piece, in tenths of a tile: a CTA's time ~ its tiles + this x its pieces (session 42's
// trace: ~6.2 tiles a piece at 16 rows; of 4 and 6 it picks the one s43b measured faster on 7 of the benchmark's 8
// batches, and ties on the eighth, 1x64K+15x4K, where 6 measured 0.2-1.0 us faster but 4 is kept).
constexpr int kModelPieceTenths = 62;
// The aligned layout's chunk Q is the smallest of kAlignedCandidates values from ceil(tiles / max_ctas) up whose
// padded units fit max_ctas (the GPU planner tries one per warp).
constexpr int kAlignedCandidates = 32;
constexpr int kMinCapacityTiles = 1;
// Largest persistent grid (max_ctas) a plan may have: the combine kernel holds one weight per piece of a row in
// shared memory (kMaxPieces in decode_kernel.cuh, asserted equal in decode_attention.cu).
constexpr int kMaxCtas = 2048;

enum PlanField : int {
  kFieldMagic = 0,
  kFieldVersion,
  kFieldBatch,
  kFieldNumKvHeads,
  kFieldNumQHeads,
  kFieldHeadDim,
  kFieldQLen,
  kFieldPageSize,
  kFieldKvDtype,
  kFieldMaxCtas,
  kFieldNumCtas,   // CTAs that have work (<= max_ctas)
  kFieldCapacity,  // Q, cost positions per CTA
  kFieldPieceCost,
  kFieldHeadCost,  // W = prefix[batch]
  kFieldAligned,    // 1: the aligned layout (units padded to whole CTAs; piece cost 0)
  kFieldReserved1,
};

HPC_PLAN_HD int64_t PlanInts(int64_t batch, int64_t max_ctas) {
  return kPlanHeaderInts + (batch + 1) + 2 * (max_ctas + 1);
}
// The max_ctas a plan of `plan_ints` int32 for `batch` sequences was built with (PlanInts' inverse), or -1 when no
// decode_plan for this batch has that size. Different (batch, max_ctas) can share a size, so the header is the
// final word (CheckPlanHeader compares both).
HPC_PLAN_HD int64_t PlanMaxCtas(int64_t plan_ints, int64_t batch) {
  const int64_t rest = plan_ints - kPlanHeaderInts - (batch + 1);
  return rest < 4 || rest % 2 != 0 ? -1 : rest / 2 - 1;
}
HPC_PLAN_HD int32_t* PlanPrefix(int32_t* plan) { return plan + kPlanHeaderInts; }
HPC_PLAN_HD const int32_t* PlanPrefix(const int32_t* plan) { return plan + kPlanHeaderInts; }
HPC_PLAN_HD int32_t* PlanStart(int32_t* plan, int batch) { return plan + kPlanHeaderInts + batch + 1; }
HPC_PLAN_HD const int32_t* PlanStart(const int32_t* plan, int batch) { return plan + kPlanHeaderInts + batch + 1; }

// a / b for a >= 0, b > 0. On the GPU a 64-bit division is a called subroutine with ~100s of cycles of dependent
// latency, and the planner kernel divides on its critical path (every CTA start, every sequence of every aligned
// candidate: session 47 measured its plan at 8-10 us at q_len 2), while its operands fit 32 bits in any plan a
// Hopper grid holds: that case divides in 32 bits. The quotient is the same either way.
HPC_PLAN_HD int64_t DivNonNeg(int64_t a, int64_t b) {
#ifdef __CUDA_ARCH__
  if (((a | b) >> 32) == 0) return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
#endif
  return a / b;
}

HPC_PLAN_HD int TilesOf(int64_t seq_len) { return seq_len > 0 ? static_cast<int>((seq_len + kTileTokens - 1) / kTileTokens) : 0; }
HPC_PLAN_HD int UnitCost(int64_t seq_len, int piece_cost) {
  const int n = TilesOf(seq_len);
  return n > 0 ? n + piece_cost : 0;
}

// A unit's CTAs in the aligned layout of chunk q, and its positions there: whole CTAs.
HPC_PLAN_HD int64_t AlignedCtas(int tiles, int64_t q) { return tiles > 0 ? DivNonNeg(tiles + q - 1, q) : 0; }
HPC_PLAN_HD int64_t AlignedSpan(int tiles, int64_t q) { return AlignedCtas(tiles, q) * q; }

// The aligned layout's first candidate chunk (tiles per CTA: ceil(head_tiles x num_kv_heads / max_ctas), the tiles
// of all heads spread evenly, at least min_tiles),
// whether chunk q fits (its CTAs, ctas_per_head x num_kv_heads, within max_ctas and its positions in int32), and
// whether it is chosen over the cost layout of modeled makespan `best` (tenths of a tile, CostLayout).
HPC_PLAN_HD int64_t AlignedLowChunk(int64_t head_tiles, int num_kv_heads, int max_ctas, int min_tiles) {
  const int64_t even = DivNonNeg(head_tiles * num_kv_heads + max_ctas - 1, max_ctas);
  return even > min_tiles ? even : min_tiles;
}
HPC_PLAN_HD bool AlignedFits(int64_t ctas_per_head, int64_t q, int num_kv_heads, int max_ctas) {
  const int64_t ctas = ctas_per_head * num_kv_heads;
  return ctas >= 1 && ctas <= max_ctas && ctas * q <= 0x7fffffffll;
}
// Chosen when its q tiles alone model below `best`, and q outweighs one piece. Its one piece a CTA is not charged:
// it ends with its CTA, and a CTA's last piece is in `best` too, where the costly finishes are those mid-CTA (s43b:
// ~19 us against ~3 at the CTA's end; s44d / s45a, H100, q_len 2: charged, the model kept 1x64K+15x4K unaligned,
// which measured 1.2 us faster aligned). Below one piece's worth of tiles a CTA, padding cuts every unit into
// pieces that each write and merge a partial (64x512 at q = 2: 1.4 us slower aligned).
HPC_PLAN_HD bool AlignedChosen(int64_t q, int model_tenths, int64_t best) {
  return 10 * q >= model_tenths && 10 * q < best;
}

HPC_PLAN_HD int64_t CapacityOf(int64_t total_cost, int max_ctas, int min_capacity) {
  const int64_t even = DivNonNeg(total_cost + max_ctas - 1, max_ctas);
  return even > min_capacity ? even : min_capacity;
}
// The CTAs a layout of total_cost at `capacity` a CTA takes (the plan's num_ctas: host and GPU planners alike).
HPC_PLAN_HD int CtasAt(int64_t total_cost, int64_t capacity) {
  return static_cast<int>(DivNonNeg(total_cost + capacity - 1, capacity));
}

// The (unit, tile) of the first tile whose cost position is >= pos. Units are head-major: unit = h * batch + b.
// `prefix(b)`: the cost prefix (an array, or CostLayout's, from a tile and a unit prefix).
template <class Prefix>
HPC_PLAN_HD void LocateIn(const Prefix& prefix, int batch, int num_kv_heads, int piece_cost, int64_t pos, int* unit,
                          int* tile) {
  const int64_t head_cost = prefix(batch);
  if (head_cost == 0 || pos >= head_cost * num_kv_heads) {
    *unit = batch * num_kv_heads;
    *tile = 0;
    return;
  }
  // one kv head (a GQA model at full tensor parallelism: the bench's 8/1): h = 0 without a division
  const int h = num_kv_heads == 1 ? 0 : static_cast<int>(DivNonNeg(pos, head_cost));
  const int64_t r = pos - h * head_cost;
  // largest b with prefix[b] <= r (then prefix[b + 1] > r, so unit b has cost)
  int lo = 0, hi = batch;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (prefix(mid) <= r) lo = mid; else hi = mid;
  }
  const int64_t into = r - prefix(lo) - piece_cost;
  *unit = h * batch + lo;
  *tile = into > 0 ? static_cast<int>(into) : 0;
}

HPC_PLAN_HD void LocatePosition(const int32_t* prefix, int batch, int num_kv_heads, int piece_cost, int64_t pos,
                                int* unit, int* tile) {
  LocateIn([prefix](int b) -> int64_t { return prefix[b]; }, batch, num_kv_heads, piece_cost, pos, unit, tile);
}

// A layout of the batch for one piece cost, from the per-head prefixes of tiles (tiles[b]) and of units with work
// (units[b]): the cost prefix is tiles + piece_cost x units.
template <class Tiles, class Units>
struct CostLayout {
  const Tiles& tiles;
  const Units& units;
  int batch, num_kv_heads, piece_cost;
  // Set once here: every CTA start reads them (the GPU planner recomputed them, two divisions each, per start).
  int64_t total, capacity;
  int num_ctas;
  HPC_PLAN_HD CostLayout(const Tiles& tiles_, const Units& units_, int batch_, int num_kv_heads_, int piece_cost_,
                         int max_ctas, int min_tiles)
      : tiles(tiles_), units(units_), batch(batch_), num_kv_heads(num_kv_heads_), piece_cost(piece_cost_),
        total(Prefix(batch_) * num_kv_heads_), capacity(CapacityOf(total, max_ctas, min_tiles + piece_cost_)),
        num_ctas(CtasAt(total, capacity)) {}
  HPC_PLAN_HD int64_t Prefix(int b) const { return tiles(b) + static_cast<int64_t>(piece_cost) * units(b); }
  HPC_PLAN_HD int NumCtas() const { return num_ctas; }
  // Where CTA i starts (i <= NumCtas(); NumCtas() is the end), as the attention kernel will read it.
  HPC_PLAN_HD void Start(int i, int* unit, int* tile) const {
    LocateIn([this](int b) { return Prefix(b); }, batch, num_kv_heads, piece_cost, i <= num_ctas ? i * capacity : total,
             unit, tile);
  }
  // tiles before (unit, tile) over all heads, and units with work before `unit`
  // (with one kv head, unit <= batch: h is 0, or 1 at the end, without a division; every modeled time takes two)
  HPC_PLAN_HD int HeadOf(int unit) const { return num_kv_heads == 1 ? (unit >= batch ? 1 : 0) : unit / batch; }
  HPC_PLAN_HD int64_t TilesBefore(int unit, int tile) const {
    const int h = HeadOf(unit), b = unit - h * batch;
    return static_cast<int64_t>(h) * tiles(batch) + tiles(b) + tile;
  }
  HPC_PLAN_HD int64_t UnitsBefore(int unit) const {
    const int h = HeadOf(unit), b = unit - h * batch;
    return static_cast<int64_t>(h) * units(batch) + units(b);
  }
  // The modeled time in tenths of a tile of the CTA from start (u0, t0) to (u1, t1): its tiles + model_tenths / 10
  // x its pieces (its units with work, counting a last one it enters at tile > 0; a start is always inside a unit
  // with work).
  HPC_PLAN_HD int64_t ModeledTenths(int u0, int t0, int u1, int t1, int model_tenths) const {
    const int64_t pieces = UnitsBefore(u1) - UnitsBefore(u0) + (t1 > 0 ? 1 : 0);
    return 10 * (TilesBefore(u1, t1) - TilesBefore(u0, t0)) + model_tenths * pieces;
  }
  HPC_PLAN_HD int64_t ModeledTenths(int i, int model_tenths) const {
    int u0, t0, u1, t1;
    Start(i, &u0, &t0);
    Start(i + 1, &u1, &t1);
    return ModeledTenths(u0, t0, u1, t1, model_tenths);
  }
  // The largest ModeledTenths over CTAs first, first + step, ... (the GPU planner spreads them over its threads)
  HPC_PLAN_HD int64_t ModeledMakespan(int model_tenths, int first, int step) const {
    int64_t most = 0;
    const int n = NumCtas();
    for (int i = first; i < n; i += step) {
      const int64_t t = ModeledTenths(i, model_tenths);
      most = t > most ? t : most;
    }
    return most;
  }
};

// Plans the planner chooses a piece cost for: both prefixes and both layouts' CTA starts must fit the GPU planner's
// shared memory (the persistent grid of a Hopper is <= 2 x 132 CTAs for the 16-row kernels).
constexpr int kPlanChoiceMaxBatch = 4096;
constexpr int kPlanChoiceMaxCtas = 1024;
// Whether a plan chooses between layouts, for both planners (the GPU's launches DecodePlanKernel<true> then, sized
// by ChoosingPlanThreads; BuildPlanHost builds both layouts' prefixes).
HPC_PLAN_HD bool PlanChooses(int batch, int max_ctas, int alt_cost, int model_tenths) {
  return alt_cost > 0 && model_tenths > 0 && batch < kPlanChoiceMaxBatch && max_ctas <= kPlanChoiceMaxCtas;
}

// The slot a split piece writes its partial to (see the header comment).
HPC_PLAN_HD int PartialSlot(int cta, bool first_piece_of_cta) { return 2 * cta + (first_piece_of_cta ? 0 : 1); }

// ------------------------------------------------------------------------------------------ walking a plan
struct Piece {
  int unit;        // h * batch + b
  int b, h;        // sequence and kv head of the unit
  int len;         // seq_lens[b] as read when the piece was formed
  int tile_begin;  // [tile_begin, tile_end) of the unit's tiles
  int tile_end;
  bool whole;      // the unit's only piece: writes the output directly
  int slot;        // partial slot when !whole
};

// The pieces of one CTA, in order. `seq_lens` are read at attention time; a plan built from other lengths
// only ever shrinks ranges (tiles past a sequence's end are skipped), never reads outside it -- memory safety
// only: the merge tasks are the plan's, so with other lengths a split unit's result is unspecified (the API
// requires the plan's own lengths; an aligned plan also serves lengths needing the same CTAs per unit, see above).
struct PieceCursor {
  int cta;
  int batch;
  int unit, tile;          // next position
  int end_unit, end_tile;  // exclusive end
  bool first;
};

// `batch` is the plan's (the callers know it: on the GPU, reading it from the header first would put one more
// dependent memory round trip in front of every CTA's first copy).
HPC_PLAN_HD PieceCursor CtaPieces(const int32_t* plan, int batch, int cta) {
  const int32_t* start = PlanStart(plan, batch);
  PieceCursor c;
  c.cta = cta;
  c.batch = batch;
  c.unit = start[2 * cta];
  c.tile = start[2 * cta + 1];
  c.end_unit = start[2 * cta + 2];
  c.end_tile = start[2 * cta + 3];
  c.first = true;
  return c;
}

HPC_PLAN_HD bool NextPiece(PieceCursor& c, const int32_t* seq_lens, Piece* piece) {
  const int batch = c.batch;
  while (c.unit < c.end_unit || (c.unit == c.end_unit && c.tile < c.end_tile)) {
    const int b = c.unit % batch;
    const int len = seq_lens[b];
    const int n = TilesOf(len);
    const int end = c.unit < c.end_unit ? n : (c.end_tile < n ? c.end_tile : n);
    const int begin = c.tile;
    const int unit = c.unit;
    ++c.unit;
    c.tile = 0;
    if (end <= begin) continue;
    piece->unit = unit;
    piece->b = b;
    piece->h = unit / batch;
    piece->len = len;
    piece->tile_begin = begin;
    piece->tile_end = end;
    piece->whole = begin == 0 && end == n;
    piece->slot = PartialSlot(c.cta, c.first);
    c.first = false;
    return true;
  }
  return false;
}

// Merge task of boundary i (1 <= i < num_ctas): the unit split at the START of CTA i, if this is the first
// boundary that cuts it. Its pieces live in CTAs [first_cta, last_cta]; the first piece's slot is
// `first_slot`, the others use slot 2*j (they are their CTA's first piece).
struct MergeTask {
  int unit;
  int first_cta, last_cta;
  int first_slot;
};

HPC_PLAN_HD bool MergeTaskAt(const int32_t* plan, int i, MergeTask* task) {
  const int batch = plan[kFieldBatch];
  const int num_ctas = plan[kFieldNumCtas];
  if (i < 1 || i >= num_ctas) return false;
  const int32_t* start = PlanStart(plan, batch);
  const int unit = start[2 * i], tile = start[2 * i + 1];
  if (tile == 0) return false;                                         // boundary between units
  if (start[2 * (i - 1)] == unit && start[2 * (i - 1) + 1] > 0) return false;  // an earlier boundary owns it
  task->unit = unit;
  task->first_cta = i - 1;
  task->first_slot = PartialSlot(i - 1, start[2 * (i - 1)] == unit);
  // The unit's last tile sits at cost position h*W + prefix[b+1] - 1; its CTA is that position / capacity.
  // (O(1): a scan over start[] was a chain of dependent loads, ~38 us for a 128-piece sequence on the GPU.)
  const int h = unit / batch, b = unit % batch;
  const int64_t end_pos = static_cast<int64_t>(h) * plan[kFieldHeadCost] + PlanPrefix(plan)[b + 1];
  const int64_t last = (end_pos - 1) / plan[kFieldCapacity];
  task->last_cta = static_cast<int>(last < num_ctas - 1 ? last : num_ctas - 1);
  return true;
}

// The merge task whose unit boundary i (1 <= i < num_ctas) cuts, whichever boundary of the unit it is, and i's
// rank among the unit's boundaries (0 for the task's own boundary, MergeTaskAt(i)). The combine's CTAs at the
// other boundaries of a long unit have no task of their own and share its rows.
HPC_PLAN_HD bool MergeTaskCovering(const int32_t* plan, int i, MergeTask* task, int* rank) {
  const int batch = plan[kFieldBatch];
  const int num_ctas = plan[kFieldNumCtas];
  if (i < 1 || i >= num_ctas) return false;
  const int32_t* start = PlanStart(plan, batch);
  const int unit = start[2 * i];
  if (start[2 * i + 1] == 0) return false;  // boundary between units
  // The unit's first tile sits at cost position h*W + prefix[b] + piece_cost; its CTA is that position / capacity,
  // and the unit's first boundary is the next one.
  const int h = unit / batch, b = unit % batch;
  const int64_t first_pos = static_cast<int64_t>(h) * plan[kFieldHeadCost] + PlanPrefix(plan)[b] + plan[kFieldPieceCost];
  const int first_boundary = static_cast<int>(first_pos / plan[kFieldCapacity]) + 1;
  *rank = i - first_boundary;
  return *rank >= 0 && MergeTaskAt(plan, first_boundary, task);
}

}  // namespace hpc::attention
