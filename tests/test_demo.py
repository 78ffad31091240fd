"""The README's main job runs end to end on the CPU and its own checks pass (exit status 0)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_runs_and_its_checks_pass():
    res = subprocess.run([sys.executable, "-m", "hpc_xla.demo", "--device", "cpu", "--reps", "1", "--tokens", "64"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    for section in ("rope_norm", "decode step", "MoE layer"):
        assert section in res.stdout
    assert "FAILED" not in res.stdout and "DIFFERENT" not in res.stdout
