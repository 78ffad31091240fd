// One Bind* function per op family; module.cc calls them all.
#pragma once

#include <nanobind/nanobind.h>

namespace hpc::bridge {

void BindRopeNorm(nanobind::module_& m);
void BindAttention(nanobind::module_& m);
void BindMoe(nanobind::module_& m);

}  // namespace hpc::bridge
