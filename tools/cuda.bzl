"""cuda_objects: compile .cu files with nvcc into PIC objects that a cc_library can link.

Bazel 4 has no CUDA rules and rules_cuda needs the network, so this small rule drives nvcc directly: every
source becomes `<name>/<stem>.pic.o`, compiled for sm_90a SASS (no PTX), with the include paths, system
includes and defines of `deps`.
"""

load("@local_cuda//:defs.bzl", "NVCC")

def _cuda_objects_impl(ctx):
    compilation = [d[CcInfo].compilation_context for d in ctx.attr.deps if CcInfo in d]
    headers = depset(ctx.files.hdrs, transitive = [c.headers for c in compilation])
    flags = ["-I."]
    for c in compilation:
        for d in c.includes.to_list() + c.quote_includes.to_list():
            flags.append("-I" + d)
        for d in c.system_includes.to_list():
            flags.append("-isystem=" + d)
        for d in c.defines.to_list():
            flags.append("-D" + d)
    gencode = ["-gencode=arch=compute_%s,code=sm_%s" % (a, a) for a in ctx.attr.gpu_archs]
    outs = []
    for src in ctx.files.srcs:
        stem = src.path[:-len(src.extension) - 1].replace("/", "_")
        out = ctx.actions.declare_file("_cuda_objs/%s/%s.pic.o" % (ctx.label.name, stem))
        outs.append(out)
        ctx.actions.run(
            executable = NVCC,
            arguments = [
                "-c",
                src.path,
                "-o",
                out.path,
                "-std=c++17",
                "-O3",
                "-Xcompiler",
                "-fPIC",
                "-Xcompiler",
                "-fvisibility=hidden",
                "--expt-relaxed-constexpr",
                "-lineinfo",
            ] + gencode + flags + ctx.attr.copts,
            inputs = depset([src], transitive = [headers]),
            outputs = [out],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
    return [DefaultInfo(files = depset(outs))]

cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
        "gpu_archs": attr.string_list(default = ["90a"]),
    },
)
