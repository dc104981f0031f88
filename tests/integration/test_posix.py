"""POSIX/Linux conformance of the mount: posix_check.py on it as root, as
nobody (dropped by the checker itself, and started under setpriv), and the
same runs on a local directory, so that a broken checker is seen."""
import os
import re
import subprocess
import sys

import pytest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "posix_check.py")
SUMMARY = re.compile(r"^posix_check: (\d+) cases, (\d+) passed, (\d+) failed$", re.M)
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
MODES = {"root": ([], 0o755), "as-user": (["--as-user", "nobody"], 0o1777),
         "setpriv": ([], 0o1777)}


def run_checker(directory, mode):
    args, dir_mode = MODES[mode]
    os.chmod(directory, dir_mode)
    prefix = NOBODY if mode == "setpriv" else []
    if mode == "setpriv" and subprocess.run(NOBODY + [sys.executable, "-c", ""]).returncode:
        pytest.skip(f"nobody cannot run {sys.executable}")
    out = subprocess.run(prefix + [sys.executable, CHECKER, str(directory), "-v", *args],
                         capture_output=True, text=True, timeout=600)
    found = SUMMARY.findall(out.stdout)
    assert found, f"no summary line:\n{out.stdout}\n{out.stderr}"
    cases, passed, failed = map(int, found[-1])
    failures = "\n".join(line for line in out.stdout.splitlines() if line.startswith("FAIL"))
    assert failed == 0 and out.returncode == 0, f"{failed} of {cases} failed:\n{failures}"
    assert cases == passed and cases >= 45, f"only {cases} cases ran:\n{out.stdout}"
    return out.stdout


@pytest.mark.parametrize("mode", sorted(MODES))
def test_checker_passes_on_a_local_directory(local_tmp, mode):
    """Any case failing here is a bug in the checker, not in kvcfs."""
    out = run_checker(local_tmp, mode)
    assert "skipped kvcfs_layout_attributes" in out
    assert os.listdir(local_tmp) == [], "the checker left case directories"


@pytest.mark.parametrize("mode", sorted(MODES))
def test_posix_on_the_mount(workdir, mode):
    out = run_checker(workdir, mode)
    assert "ok   kvcfs_layout_attributes" in out, "the mount was not recognised as kvcfs"
    if mode != "setpriv":
        assert "ok   sticky_directory" in out and "ok   other_users_files" in out
    assert os.listdir(workdir) == [], "the checker left case directories"
