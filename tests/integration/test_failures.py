"""Daemons killed and restarted: closed files stay intact; a storage server
that is down turns reads into EIO within a bounded time, never a hang, and
reads work again once it is back."""
import errno
import hashlib
import json
import mmap
import os
import pathlib
import signal
import subprocess
import threading
import time

import pytest

from conftest import CHUNK, chunk_files_of, freeze, fsync_through_a_freeze, wait_until

# Generous bound for "does not hang": the cluster's io timeout is 2 s and a
# request may wait on connect and I/O; hitting this means a hang.
HANG = 60


def write_files(directory, count=6, size=3 * CHUNK + 17):
    digests = {}
    for i in range(count):
        data = os.urandom(size + i)
        (directory / f"f{i}").write_bytes(data)
        digests[f"f{i}"] = hashlib.sha256(data).hexdigest()
    return digests


def check_files(directory, digests):
    for name, digest in digests.items():
        out = subprocess.run(["sha256sum", str(directory / name)], capture_output=True,
                             text=True, timeout=HANG)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[0] == digest, name


@pytest.mark.parametrize("daemon", ["fuse", "meta", "s2"])
def test_kill9_restart_keeps_closed_files(cluster, workdir, daemon):
    digests = write_files(workdir)
    cluster.restart(daemon, "KILL")
    check_files(workdir, digests)
    # And the cluster keeps working for new files.
    more = write_files(workdir, count=2)
    check_files(workdir, more)


def read_file(path):
    """cat the file in a child; returns (returncode, stderr, seconds)."""
    start = time.monotonic()
    out = subprocess.run(["cat", str(path)], capture_output=True, timeout=HANG)
    return out.returncode, out.stderr.decode(), time.monotonic() - start


def test_storage_down_reads_fail_with_eio_then_recover(cluster, workdir):
    from conftest import _drop_caches
    path = workdir / "striped"
    data = os.urandom(6 * CHUNK)
    path.write_bytes(data)
    # The writer's page cache would serve the reads (it is kept across
    # opens of an unchanged file): read from the servers.
    _drop_caches()
    subprocess.run(["kill", "-TERM", str(cluster.pid("s3"))], check=True)
    try:
        assert wait_until(lambda: subprocess.run(
            ["kill", "-0", str(cluster.pid("s3"))], capture_output=True).returncode != 0)
        rc, err, _ = read_file(path)
        assert rc != 0 and "Input/output error" in err
        with pytest.raises(OSError) as e:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.pread(fd, CHUNK, 0) + os.pread(fd, CHUNK, CHUNK) + os.pread(fd, CHUNK, 2 * CHUNK)
            finally:
                os.close(fd)
        assert e.value.errno == errno.EIO
        # A write that lands on the missing server fails too, cleanly.
        with pytest.raises(OSError) as e:
            with open(workdir / "new", "wb") as f:
                f.write(os.urandom(4 * CHUNK))
        assert e.value.errno == errno.EIO
    finally:
        cluster.restart("s3", "KILL")
    assert path.read_bytes() == data


@pytest.fixture(scope="module")
def served(cluster):
    """The cluster through a kvc-fuse with `local_reads = off`: reads go
    to the servers (a frozen one holds them up), where the default one
    reads what the page cache holds of a same-host target itself."""
    from conftest import PORT_BASE, server_placement
    with server_placement(cluster, PORT_BASE + 34) as c:
        yield c


def test_frozen_storage_server_times_out_with_eio(served, workdir):
    from conftest import _drop_caches
    cluster = served
    path = served.mount / workdir.name / "frozen"
    data = os.urandom(3 * CHUNK)
    path.write_bytes(data)
    _drop_caches()  # not from the writer's page cache
    pid = cluster.pid("s1")
    freeze(pid)
    try:
        rc, err, seconds = read_file(path)
        assert rc != 0 and "Input/output error" in err
    finally:
        os.kill(pid, signal.SIGCONT)
    assert path.read_bytes() == data


def test_fsync_waits_for_a_sync_slower_than_the_io_timeout(cluster, workdir):
    """A SYNC answers once the target's writes are on its disk, which after
    a large write takes seconds of writeback: fsync waits for it (up to
    minutes), and does not fail with EIO at io_timeout_ms (2 s here), as it
    did while the bytes were on their way. A server frozen for 3 s stands
    in for the slow writeback."""
    fsync_through_a_freeze(workdir / "slow-sync", cluster.pid("s1"), 3)  # past io_timeout_ms



def test_meta_down_gives_eio_not_a_hang(cluster, workdir):
    (workdir / "f").write_bytes(b"x")
    subprocess.run(["kill", "-KILL", str(cluster.pid("meta"))], check=True)
    try:
        out = subprocess.run(["touch", str(workdir / "new")], capture_output=True, text=True,
                             timeout=HANG)
        assert out.returncode != 0
        assert "Input/output error" in out.stderr
    finally:
        cluster.restart("meta", "KILL")
    assert (workdir / "f").read_bytes() == b"x"
    (workdir / "after").write_bytes(b"ok")
    assert (workdir / "after").read_bytes() == b"ok"


def kill_meta_past_the_lease(cluster):
    """kvc-meta killed and left down until this client's lease is stale:
    renewed at most 1 s before, fresh for 3/4 of client_timeout_ms (3 s)."""
    subprocess.run(["kill", "-KILL", str(cluster.pid("meta"))], check=True)
    time.sleep(3.5)


def test_reads_of_an_open_file_wait_out_a_kvc_meta_restart_past_the_lease(cluster, workdir):
    """With kvc-meta away past the lease, I/O of an open file must not run
    (kvc-meta may have given its session away) but waits for a renew, up to
    io_timeout_ms (2 s here): a read issued while kvc-meta restarts returns
    its bytes once it is back (it failed with EIO at once before), and one
    that waits past io_timeout_ms fails with EIO, not a hang."""
    data = os.urandom(3 * CHUNK + 5)
    path = workdir / "held"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)  # every read a FUSE READ
    buf = mmap.mmap(-1, CHUNK)
    done = {}

    def read():
        try:
            done["bytes"] = os.preadv(fd, [buf], CHUNK)
        except OSError as e:
            done["errno"] = e.errno

    try:
        kill_meta_past_the_lease(cluster)
        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.2)  # the read waits on the stale lease meanwhile
        cluster.restart("meta", "KILL")  # dead already: started again
        reader.join(HANG)
        assert not reader.is_alive()
        assert done == {"bytes": CHUNK}
        assert bytes(buf) == data[CHUNK:2 * CHUNK]

        kill_meta_past_the_lease(cluster)
        with pytest.raises(OSError) as failed:
            os.preadv(fd, [buf], 0)
        assert failed.value.errno == errno.EIO
    finally:
        cluster.restart("meta", "KILL")
        os.close(fd)
    assert path.read_bytes() == data


def test_reads_waiting_on_a_hung_kvc_meta_fail_in_bounded_time(cluster, workdir):
    """kvc-meta frozen (not gone: each RENEW waits io_timeout_ms, 2 s here)
    past the lease, and 16 reads of an open file at once: each fails with
    EIO after about io_timeout_ms, and none waits for the others' renews
    (they used to queue on the lock, one renew each: 16 x 2 s for the
    last). Thawed, the file reads again."""
    data = os.urandom(CHUNK)
    path = workdir / "held"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    results = []

    def read():
        buf = mmap.mmap(-1, CHUNK)
        start = time.monotonic()
        try:
            os.preadv(fd, [buf], 0)
            results.append(("read", time.monotonic() - start))
        except OSError as e:
            results.append((e.errno, time.monotonic() - start))

    meta = cluster.pid("meta")
    os.kill(meta, signal.SIGSTOP)
    try:
        time.sleep(3.5)  # past the lease: renewed at most 1 s before, fresh for 2.25 s
        readers = [threading.Thread(target=read) for _ in range(16)]
        for r in readers:
            r.start()
        for r in readers:
            r.join(HANG)
        assert not any(r.is_alive() for r in readers)
    finally:
        os.kill(meta, signal.SIGCONT)
    assert sorted(r[0] for r in results) == [errno.EIO] * 16, results
    assert max(r[1] for r in results) < 10, results  # 5 x io_timeout_ms: no queue

    def reads():
        try:
            return os.preadv(fd, [mmap.mmap(-1, CHUNK)], 0) == CHUNK
        except OSError:
            return False

    assert wait_until(reads, timeout=HANG)
    os.close(fd)
    assert path.read_bytes() == data


def test_a_size_pass_stops_at_its_first_failure(cluster, workdir):
    """With kvc-meta frozen, the pass that commits sizes every second
    stops at its first failed commit (each waited io_timeout_ms) and
    leaves the rest for the next pass: before, it tried every dirty file,
    and an unmount with kvc-meta away waited once per file. Thawed, every
    size is committed."""
    log = cluster.dir / "logs" / "fuse.log"

    def stops():
        return log.read_text(errors="replace").count("more size(s) left for the next pass")
    before = stops()
    paths = [workdir / f"s{i}" for i in range(8)]
    for path in paths:
        path.write_bytes(b"")  # made and entered before the freeze
    time.sleep(0.5)
    fds = [os.open(path, os.O_RDWR | os.O_DIRECT) for path in paths]
    buf = mmap.mmap(-1, 4096)
    buf.write(b"s" * 4096)
    meta = cluster.pid("meta")
    freeze(meta)
    try:
        for fd in fds:  # O_DIRECT: on the storage servers at once, the size dirty here
            os.pwrite(fd, buf, 0)
        assert wait_until(lambda: stops() > before, timeout=HANG), \
            "the size pass did not stop at its first failure"
    finally:
        os.kill(meta, signal.SIGCONT)
    for fd in fds:
        os.close(fd)
    for path in paths:
        assert os.stat(path).st_size == 4096
        assert path.read_bytes() == b"s" * 4096


def test_removed_files_give_their_chunks_back(cluster, workdir):
    (workdir / "big").write_bytes(os.urandom(12 * CHUNK))
    ino = os.stat(workdir / "big").st_ino
    assert len(chunk_files_of(cluster, ino)) == 12
    os.unlink(workdir / "big")
    assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=30)


def test_punched_hole_reads_zeros_and_gives_chunks_back(cluster, workdir):
    """fallocate -p: whole chunks in the range leave the storage servers,
    partial chunks at its edges read as zeros, the size stays."""
    path = workdir / "holes"
    data = os.urandom(8 * CHUNK)
    path.write_bytes(data)
    ino = os.stat(path).st_ino
    def chunks():
        return len(chunk_files_of(cluster, ino))
    before = chunks()
    start, length = CHUNK + 4096, 5 * CHUNK  # chunks 2..5 whole, 1 and 6 partly
    subprocess.run(["fallocate", "-p", "-o", str(start), "-l", str(length), str(path)],
                   check=True, timeout=HANG)
    assert chunks() == before - 4
    back = path.read_bytes()
    assert len(back) == 8 * CHUNK
    assert back[:start] == data[:start]
    assert back[start:start + length] == bytes(length)
    assert back[start + length:] == data[start + length:]
    # Past the end: nothing happens, the file does not grow.
    subprocess.run(["fallocate", "-p", "-o", str(20 * CHUNK), "-l", "4096", str(path)],
                   check=True, timeout=HANG)
    assert os.stat(path).st_size == 8 * CHUNK
    # Plain allocation sets the size; other modes are refused.
    subprocess.run(["fallocate", "-o", "0", "-l", str(9 * CHUNK), str(path)], check=True,
                   timeout=HANG)
    assert os.stat(path).st_size == 9 * CHUNK
    out = subprocess.run(["fallocate", "-z", "-l", "4096", str(path)], capture_output=True,
                         text=True, timeout=HANG)
    assert out.returncode != 0 and "not supported" in out.stderr
    # Through hf3fs_fuse.io as connectors call it.
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools" / "python"))
    from hf3fs_fuse import io as hf3fs_io
    with open(path, "r+b") as f:
        hf3fs_io.punch_hole(f.fileno(), [0], [CHUNK])
    assert path.read_bytes()[:CHUNK] == bytes(CHUNK)
