"""fio through kvcfs rings (tools/fio: an external ioengine), checked by
fio's own verify=crc32c, and against data fio wrote through FUSE.

fio writes its verify state (local-JOB-N-verify.state) into its working
directory: every fio here runs in a temporary one, never in the tree."""
import json
import os
import pathlib
import subprocess

import pytest

from conftest import BUILD, CLIENT_BUILD, ROOT

ENGINE = CLIENT_BUILD / "fio_kvc.so"


@pytest.fixture(scope="module")
def engine():
    out = subprocess.run([str(ROOT / "tools" / "fio" / "build.sh"), str(CLIENT_BUILD)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ENGINE.exists()
    return ENGINE


@pytest.fixture
def fio(local_tmp):
    """Run fio in a temporary working directory; returns its job's JSON."""
    def run(*args):
        out = subprocess.run(["fio", "--output-format=json", *args], capture_output=True,
                             text=True, timeout=300, cwd=local_tmp)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        job = json.loads(out.stdout[out.stdout.index("{"):])["jobs"][0]
        assert job["error"] == 0, job
        return job
    run.cwd = local_tmp
    return run


def test_sequential_write_then_verify(engine, workdir, fio):
    job = fio("--name=seq", f"--ioengine=external:{engine}", f"--filename={workdir}/seq",
              "--size=64M", "--bs=1M", "--rw=write", "--iodepth=16", "--verify=crc32c",
              "--do_verify=1")
    assert job["write"]["io_bytes"] == 64 << 20
    assert job["read"]["io_bytes"] == 64 << 20  # the verify pass read it all back
    # The verify state went to fio's temporary directory, not into the tree.
    assert list(fio.cwd.glob("*verify.state")), os.listdir(fio.cwd)
    for where in (ROOT, ROOT / "tests" / "integration", pathlib.Path.cwd()):
        assert not list(where.glob("*verify.state")), where


def test_random_mixed_sizes_verify(engine, workdir, fio):
    job = fio("--name=rand", f"--ioengine=external:{engine}", f"--filename={workdir}/rand",
              "--size=32M", "--bsrange=4k-256k", "--rw=randwrite", "--iodepth=32",
              "--verify=crc32c", "--do_verify=1", "--randrepeat=1", "--norandommap=0")
    assert job["write"]["io_bytes"] == 32 << 20


def test_rings_verify_what_fuse_wrote(engine, workdir, fio):
    fio("--name=viafuse", "--ioengine=psync", f"--filename={workdir}/mixed", "--size=16M",
        "--bs=128k", "--rw=write", "--verify=crc32c", "--do_verify=0")
    job = fio("--name=viafuse", f"--ioengine=external:{engine}", f"--filename={workdir}/mixed",
              "--size=16M", "--bs=128k", "--rw=write", "--verify=crc32c", "--verify_only",
              "--iodepth=8")
    assert job["read"]["io_bytes"] == 16 << 20
