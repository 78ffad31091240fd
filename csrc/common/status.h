// Status: how every csrc entry point reports a problem. Bindings turn it into ffi::Error (JAX) or a Python
// exception (torch): kInvalidArgument -> ValueError / INVALID_ARGUMENT, kUnsupported -> RuntimeError /
// UNIMPLEMENTED, kInternal -> RuntimeError / INTERNAL. Messages name the op, the argument, what was expected
// and what was found, because that is all the user sees.
#pragma once

#include <string>
#include <utility>

namespace hpc {

enum class StatusCode { kOk = 0, kInvalidArgument, kUnsupported, kInternal };

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return Status(StatusCode::kInvalidArgument, std::move(msg)); }
  static Status Unsupported(std::string msg) { return Status(StatusCode::kUnsupported, std::move(msg)); }
  static Status Internal(std::string msg) { return Status(StatusCode::kInternal, std::move(msg)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace hpc

#define HPC_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::hpc::Status hpc_status_ = (expr);      \
    if (!hpc_status_.ok()) return hpc_status_; \
  } while (0)
