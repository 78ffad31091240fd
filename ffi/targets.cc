#include "ffi/targets.h"

#include <cuda_runtime.h>

#include <atomic>

#include "csrc/common/arch.h"

namespace hpc::ffi_glue {

const std::vector<FfiTarget>& FfiTargets() {
  static const std::vector<FfiTarget> targets = {
      {"rope_norm", HpcXlaRopeNormCuda, HpcXlaRopeNormCpu},
      {"decode_plan", HpcXlaDecodePlanCuda, HpcXlaDecodePlanCpu},
      {"decode_attention", HpcXlaDecodeAttentionCuda, HpcXlaDecodeAttentionCpu},
      {"moe_route", HpcXlaMoeRouteCuda, HpcXlaMoeRouteCpu},
      {"fused_moe", HpcXlaFusedMoeCuda, HpcXlaFusedMoeCpu},
      {"fused_moe_routed", HpcXlaFusedMoeRoutedCuda, HpcXlaFusedMoeRoutedCpu},
  };
  return targets;
}

namespace {
std::atomic<long long> g_calls{0}, g_captured{0};
}  // namespace

void NoteHandlerStream(cudaStream_t stream) {
  static const bool enabled = EnvFlag("HPC_XLA_COUNT_CAPTURED", false);
  if (!enabled) return;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  g_calls.fetch_add(1);
  if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status == cudaStreamCaptureStatusActive) {
    g_captured.fetch_add(1);
  }
}

CaptureCounts HandlerCaptureCounts() { return {g_calls.load(), g_captured.load()}; }

}  // namespace hpc::ffi_glue
