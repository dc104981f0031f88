"""GPU-registered iovs: KV pages from kvcfs into GPU memory through a
pinned iov and back, byte for byte. Skipped, with the reason, on machines
without a CUDA runtime or GPU (the development and CI machines)."""
import pytest

from conftest import BUILD
from test_usrbio import run


def test_pinned_iov_to_gpu_and_back(workdir):
    out = run(BUILD / "tests" / "usrbio" / "gpu_pinned", workdir / "gpu.pool")
    if out.returncode == 77:
        pytest.skip(out.stdout.strip())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not ok" not in out.stdout
