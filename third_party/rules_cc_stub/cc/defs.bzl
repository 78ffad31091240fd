"""Offline stand-in for @rules_cc: the native C++ rules under rules_cc's names (Bazel 4 only)."""

cc_binary = native.cc_binary
cc_import = native.cc_import
cc_library = native.cc_library
cc_test = native.cc_test
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
objc_library = native.objc_library
objc_import = native.objc_import
