"""pip install . -> builds hpc_xla/_hpc_xla<EXT_SUFFIX> for the running Python.

  HPC_XLA_PREBUILT=/path/to/_hpc_xla.so   copy a binary built elsewhere (e.g. cp312 built on a dev machine)
  bazel on PATH (HPC_XLA_BUILD!=nvcc)     bazel build //:hpc_xla (the build of record)
  otherwise                               nvcc + g++ over the same sources (tools/nvcc_build.py)
"""

import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class BazelOrNvccBuild(build_ext):
    def build_extension(self, ext):
        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        prebuilt = os.environ.get("HPC_XLA_PREBUILT")
        if prebuilt:
            shutil.copyfile(prebuilt, target)
            return
        if shutil.which("bazel") and os.environ.get("HPC_XLA_BUILD", "bazel") != "nvcc":
            env = dict(os.environ, HPC_PYTHON=sys.executable)
            disk_cache = os.path.join(os.path.expanduser("~"), ".cache", "hpc_xla_bazel_disk")
            subprocess.run(["bazel", "build", "--disk_cache=" + disk_cache, "//:hpc_xla"], cwd=ROOT, env=env,
                           check=True)
            shutil.copyfile(os.path.join(ROOT, "bazel-bin", "hpc_xla", "_hpc_xla" + suffix), target)
        else:
            subprocess.run([sys.executable, os.path.join(ROOT, "tools", "nvcc_build.py"), "--out", target],
                           cwd=ROOT, check=True)
        os.chmod(target, 0o755)


setup(
    ext_modules=[Extension("hpc_xla._hpc_xla", sources=[])],
    cmdclass={"build_ext": BazelOrNvccBuild},
)
