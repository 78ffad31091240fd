#include "ffi/targets.h"

namespace hpc::ffi_glue {

const std::vector<FfiTarget>& FfiTargets() {
  static const std::vector<FfiTarget> targets = {
      {"rope_norm", HpcXlaRopeNormCuda, HpcXlaRopeNormCpu},
      {"decode_plan", HpcXlaDecodePlanCuda, HpcXlaDecodePlanCpu},
      {"decode_attention", HpcXlaDecodeAttentionCuda, HpcXlaDecodeAttentionCpu},
      {"moe_route", HpcXlaMoeRouteCuda, HpcXlaMoeRouteCpu},
      {"fused_moe", HpcXlaFusedMoeCuda, HpcXlaFusedMoeCpu},
  };
  return targets;
}

}  // namespace hpc::ffi_glue
