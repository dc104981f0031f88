"""What the GPU scripts (gpu_torch.py, gpu_keys.py) share: kvcfs on the
path, TAP-like "ok - / not ok -" checks counted, PyTorch-and-a-GPU-or-skip,
and the exit (77 skipped, 1 when a check failed, 0 when all passed), so
tools/gpu-check and test_gpu.py read every script the same way."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "python"))
import kvcfs  # noqa: E402

SKIPPED = 77


class Checks:
    """Counts failed checks; each check prints one line."""

    def __init__(self):
        self.failures = 0

    def __call__(self, ok, what):
        print(("ok - " if ok else "not ok - ") + what)
        self.failures += not ok

    def exit_code(self):
        print(f"{self.failures} failed")
        return 1 if self.failures else 0


def torch_with_gpu():
    """PyTorch when it and a GPU kvcfs can use are here; else None (after
    printing why: the caller exits SKIPPED)."""
    try:
        import torch
    except ImportError:
        print("SKIP: PyTorch is not installed")
        return None
    if not torch.cuda.is_available() or not kvcfs.gpu_available():
        print("SKIP: no GPU here")
        return None
    return torch


def run(main, usage):
    """sys.exit(main(ARG)) for a script that takes one argument."""
    if len(sys.argv) != 2:
        print(f"usage: {usage}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
