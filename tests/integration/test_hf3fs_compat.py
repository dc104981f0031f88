"""3FS's USRBIO API on kvcfs, exactly as its users call it: hf3fs_usrbio.h
(C) with 3FS's numbers and sizes, and 3FS's fio engine's block sizes.
Nothing may stay behind in /dev/shm."""
import os
import subprocess

from conftest import BUILD, ROOT

TOOLS = BUILD / "tests" / "usrbio"
SHM = "/dev/shm"


def program(*args, timeout=300):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0 and "not ok" not in out.stdout, out.stdout + out.stderr
    return out.stdout


def test_library_iovs_leave_no_shm_c(cluster):
    before = set(os.listdir(SHM))
    out = program(TOOLS / "hf3fs_semantics", "iovloop", cluster.mount, 1000)
    after = set(os.listdir(SHM))
    ours = {"kvc-iov-" + line.split()[1] for line in out.splitlines()
            if line.startswith("iov ")}
    assert len(ours) == 1000
    assert not (after - before) & ours


def test_one_io_of_128_mib(workdir):
    out = program(TOOLS / "hf3fs_semantics", "bigio", workdir / "big.bin")
    assert out.count("ok - ") >= 8


def test_reg_fd_returns_what_prep_io_takes(workdir):
    program(TOOLS / "hf3fs_semantics", "regfd", workdir / "reg.bin")


def test_fio_with_128_mib_blocks(workdir):
    """One fio I/O per 128 MiB block (3FS's fio engine runs with such
    sizes): written, then read back and checked by fio's verify."""
    from test_fio import ENGINE, fio
    subprocess.run([str(ROOT / "tools" / "fio" / "build.sh"), str(BUILD)], check=True,
                   capture_output=True, timeout=600)
    job = fio("--name=big", f"--ioengine=external:{ENGINE}", f"--filename={workdir}/fio-big",
              "--size=256M", "--bs=128M", "--rw=write", "--iodepth=2", "--verify=crc32c",
              "--do_verify=1", "--verify_state_save=0")
    assert job["write"]["io_bytes"] == 256 << 20
    assert job["read"]["io_bytes"] == 256 << 20
