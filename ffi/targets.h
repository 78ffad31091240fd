// Every XLA FFI handler of the library, for the bindings to hand to jax.ffi.register_ffi_target.
#pragma once

#include <vector>

#include "xla/ffi/api/c_api.h"

namespace hpc::ffi_glue {

struct FfiTarget {
  const char* name;      // registered as "hpc_xla_<name>"
  XLA_FFI_Handler* cuda;
  XLA_FFI_Handler* cpu;
};

const std::vector<FfiTarget>& FfiTargets();

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

}  // namespace hpc::ffi_glue
