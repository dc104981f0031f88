"""Data through the real mount: cp + cmp, scattered dd, truncate, sparse
files, concurrent writers, reads by another process."""
import filecmp
import os
import random
import subprocess
import threading

import pytest

from conftest import CHUNK


def random_file(path, size, seed):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        left = size
        while left:
            step = min(left, 1 << 20)
            f.write(rng.randbytes(step))
            left -= step


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 64 << 20])
def test_cp_and_cmp(workdir, local_tmp, size):
    src = local_tmp / "src"
    random_file(src, size, size)
    dst = workdir / "copy"
    subprocess.run(["cp", str(src), str(dst)], check=True)
    assert os.stat(dst).st_size == size
    subprocess.run(["cmp", str(src), str(dst)], check=True)
    # Read by another process, after the writer closed.
    out = subprocess.run(["sha256sum", str(dst)], check=True, capture_output=True, text=True)
    ref = subprocess.run(["sha256sum", str(src)], check=True, capture_output=True, text=True)
    assert out.stdout.split()[0] == ref.stdout.split()[0]


def test_dd_scattered_offsets_match_a_local_reference(workdir, local_tmp):
    ref = local_tmp / "ref"
    dst = workdir / "scattered"
    rng = random.Random(7)
    for path in (ref, dst):
        open(path, "wb").close()
    for _ in range(40):
        offset = rng.randrange(0, 20 * CHUNK)
        length = rng.choice([1, 511, 4096, 65537, CHUNK - 3, CHUNK + 5, 3 * CHUNK])
        block = local_tmp / "block"
        random_file(block, length, offset)
        for path in (ref, dst):
            subprocess.run(["dd", f"if={block}", f"of={path}", "bs=1M", "conv=notrunc",
                            f"seek={offset}", "oflag=seek_bytes", "status=none"], check=True)
    assert os.stat(dst).st_size == os.stat(ref).st_size
    subprocess.run(["cmp", str(ref), str(dst)], check=True)


def test_truncate_down_then_up_reads_zeros(workdir):
    path = workdir / "t"
    data = os.urandom(3 * CHUNK + 123)
    path.write_bytes(data)
    os.truncate(path, CHUNK + 10)
    assert os.stat(path).st_size == CHUNK + 10
    assert path.read_bytes() == data[:CHUNK + 10]
    os.truncate(path, 4 * CHUNK)
    back = path.read_bytes()
    assert len(back) == 4 * CHUNK
    assert back[:CHUNK + 10] == data[:CHUNK + 10]
    assert back[CHUNK + 10:] == bytes(4 * CHUNK - CHUNK - 10), "old bytes came back"
    os.truncate(path, 0)
    assert path.read_bytes() == b""


def test_one_tib_sparse_file(workdir):
    path = workdir / "sparse"
    subprocess.run(["truncate", "-s", "1T", str(path)], check=True, timeout=10)
    assert os.stat(path).st_size == 1 << 40
    tail = os.urandom(10000)
    with open(path, "r+b") as f:
        f.seek((1 << 40) - 10000)
        f.write(tail)
    with open(path, "rb") as f:
        f.seek((1 << 40) - 10000)
        assert f.read() == tail
        f.seek(1 << 39)
        assert f.read(1 << 20) == bytes(1 << 20), "a hole reads as zeros"
    assert os.stat(path).st_size == 1 << 40


def test_write_past_end_extends_and_keeps_hole(workdir):
    path = workdir / "gap"
    with open(path, "wb") as f:
        f.write(b"head")
        f.seek(5 * CHUNK + 7)
        f.write(b"tail")
    data = path.read_bytes()
    assert len(data) == 5 * CHUNK + 11
    assert data[:4] == b"head" and data[-4:] == b"tail"
    assert data[4:-4] == bytes(len(data) - 8)


def test_eight_concurrent_writers(workdir, local_tmp):
    errors = []

    def writer(i):
        try:
            src = local_tmp / f"w{i}"
            random_file(src, 5 * CHUNK + i * 1000, 100 + i)
            subprocess.run(["cp", str(src), str(workdir / f"w{i}")], check=True)
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(8):
        assert filecmp.cmp(local_tmp / f"w{i}", workdir / f"w{i}", shallow=False)


def test_size_visible_to_other_process_while_open(workdir):
    path = workdir / "growing"
    with open(path, "wb") as f:
        f.write(b"x" * 100000)
        f.flush()
        os.fsync(f.fileno())
        out = subprocess.run(["stat", "-c", "%s", str(path)], capture_output=True, text=True)
        assert out.stdout.strip() == "100000"


def test_layout_xattr(cluster, workdir):
    path = workdir / "f"
    path.write_bytes(b"abc")
    out = subprocess.run(["getfattr", "-n", "user.kvc.layout", "--only-values", str(path)],
                         capture_output=True, text=True, check=True)
    assert out.stdout.startswith(f"chunk_size={CHUNK} stripe=3 targets=")
    fields = dict(f.split("=", 1) for f in out.stdout.split())
    assert sorted(fields["targets"].split(",")) == ["0", "1", "2"]
    # one replica: chain i is target i
    assert sorted(fields["chains"].split(",")) == ["0", "1", "2"]
    inode = subprocess.run(["getfattr", "-n", "user.kvc.inode", "--only-values", str(path)],
                           capture_output=True, text=True, check=True).stdout
    assert int(inode) == os.stat(path).st_ino
    # Read by name, never listed: copying tools must not try to copy them.
    listed = subprocess.run(["getfattr", "-d", "-m", "-", str(path)],
                            capture_output=True, text=True, check=True).stdout
    assert "user.kvc" not in listed
    setx = subprocess.run(["setfattr", "-n", "user.kvc.layout", "-v", "x", str(path)],
                          capture_output=True, text=True)
    assert setx.returncode != 0
