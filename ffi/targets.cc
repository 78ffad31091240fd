#include "ffi/targets.h"

namespace hpc::ffi_glue {

const std::vector<FfiTarget>& FfiTargets() {
  static const std::vector<FfiTarget> targets = {
      {"rope_norm", HpcXlaRopeNormCuda, HpcXlaRopeNormCpu},
  };
  return targets;
}

}  // namespace hpc::ffi_glue
