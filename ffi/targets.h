// Every XLA FFI handler of the library, for the bindings to hand to jax.ffi.register_ffi_target.
#pragma once

#include <vector>

#include "xla/ffi/api/c_api.h"

typedef struct CUstream_st* cudaStream_t;

namespace hpc::ffi_glue {

struct FfiTarget {
  const char* name;      // registered as "hpc_xla_<name>"
  XLA_FFI_Handler* cuda;
  XLA_FFI_Handler* cpu;
};

const std::vector<FfiTarget>& FfiTargets();

// Diagnostics for the "does XLA put our custom calls into command buffers" question: with
// HPC_XLA_COUNT_CAPTURED=1 every CUDA handler asks whether its stream is being captured (XLA records FFI
// calls of a command buffer by stream capture) and counts the calls that were. Off by default: the hot path
// then makes no stream query at all (DESIGN.md: kCmdBufferCompatible handlers never query the stream).
struct CaptureCounts {
  long long calls = 0, captured = 0;
};
void NoteHandlerStream(cudaStream_t stream);
CaptureCounts HandlerCaptureCounts();

extern "C" XLA_FFI_Error* HpcXlaRopeNormCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaRopeNormCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaDecodePlanCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaDecodePlanCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaDecodeAttentionCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaDecodeAttentionCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaMoeRouteCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaMoeRouteCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaFusedMoeCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaFusedMoeCpu(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaFusedMoeRoutedCuda(XLA_FFI_CallFrame* call_frame);
extern "C" XLA_FFI_Error* HpcXlaFusedMoeRoutedCpu(XLA_FFI_CallFrame* call_frame);

}  // namespace hpc::ffi_glue
