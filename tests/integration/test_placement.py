"""Same-host placement (src/client/transport.h): ring reads and writes of
host iovs, and FUSE reads (fuse/read_buffer.h), move between the storage
servers and shared memory without crossing a socket. Round trips (random sizes, chunk-crossing,
holes), a corrupted block, TCP forced by the cluster file, a client that
shrinks its iov or is killed mid-I/O, a storage server restarted under a
read load, and the metrics that prove which transport moved the bytes.

These run on a second kvc-fuse of the shared cluster with `local_reads =
off`: with it on (the default), kvc-fuse reads a same-host single-copy
target's chunks itself and the servers place only what it cannot
(test_local_reads.py); here every read goes through the servers, the
path replicas, managers and a key's scattered segments take."""
import errno
import mmap
import os
import random
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import shared_memory

import pytest

from conftest import (BUILD, CHUNK, PORT_BASE, ROOT, LIBKVC, chunk_name, client_conf,
                      drop_second_mount, second_mount, server_placement, wait_until)
from test_metrics import scrape, value

sys.path.insert(0, str(ROOT / "tools" / "python"))
os.environ.setdefault("KVC_LIB", str(LIBKVC))

from hf3fs_fuse import io as h3io  # noqa: E402
import kvcfs  # noqa: E402


@pytest.fixture(scope="module")
def cluster(cluster):
    with server_placement(cluster, PORT_BASE + 35) as c:
        yield c


def placed(cluster):
    """(requests, bytes) kvc-fuse sent by placement, and PLACE_READs the
    storage servers served."""
    f = scrape(cluster.fuse_metrics)
    served = sum(value(scrape(a), "kvc_storage_place_reads_total")
                 for a in cluster.storage_metrics)
    return (value(f, "kvc_fuse_transport_requests_total", transport="place"),
            value(f, "kvc_fuse_transport_bytes_total", transport="place"), served)


def tcp_requests(cluster):
    return value(scrape(cluster.fuse_metrics), "kvc_fuse_transport_requests_total",
                 transport="tcp")


class Ring:
    """One shared-memory iov and a read or write ring on a mount."""

    def __init__(self, mount, size, for_read, entries=16):
        self.shm = shared_memory.SharedMemory(create=True, size=size)
        self.iov = h3io.make_iovec(self.shm, mount)
        self.ring = h3io.make_ioring(mount, entries, for_read=for_read, timeout=1)
        self.for_read = for_read

    def run(self, fd, ios):
        """ios: (iov offset, length, file offset); returns the results."""
        for i, (at, length, off) in enumerate(ios):
            self.ring.prepare(self.iov[at:at + length], self.for_read, fd, off, userdata=i)
        self.ring.submit()
        done = self.ring.wait(min_results=len(ios))
        return [r.result for r in sorted(done, key=lambda r: r.userdata)]

    def close(self):
        self.ring.close()
        self.iov.close()
        self.shm.close()
        self.shm.unlink()


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ")[1][0] != "Z"


def open_registered(path, flags=os.O_RDWR):
    fd = os.open(path, flags)
    h3io.register_fd(fd)
    return fd


def close_registered(fd):
    h3io.deregister_fd(fd)
    os.close(fd)


def random_ring_reads(mount, path, data, rng):
    """Six batches of 1..8 ring reads of path at random offsets and sizes
    (1 byte to 3 chunks, chunk-crossing) into a 16 MiB iov on mount, each
    byte compared with data."""
    r = Ring(mount, 16 << 20, True)
    fd = open_registered(path, os.O_RDONLY)
    try:
        for _ in range(6):
            ios, at = [], 0
            for _ in range(rng.randint(1, 8)):
                length = rng.choice([1, 4095, 16384, CHUNK, CHUNK + 1, rng.randint(1, 3 * CHUNK)])
                off = rng.randint(0, len(data) - 1)
                length = min(length, len(data) - off, (16 << 20) - at)
                if length <= 0:
                    break
                ios.append((at, length, off))
                at += length
            assert r.run(fd, ios) == [length for _, length, _ in ios]
            for at, length, off in ios:
                assert bytes(r.shm.buf[at:at + length]) == bytes(data[off:off + length])
    finally:
        close_registered(fd)
        r.close()


def test_ring_reads_are_placed_random_sizes_chunk_crossing_and_holes(cluster, workdir):
    rng = random.Random(13)
    size = 5 * CHUNK + 12345
    data = bytearray(rng.randbytes(size))
    path = workdir / "f"
    with open(path, "wb") as f:
        f.write(data)
        # a hole of two chunks and a bit, then a tail
        f.seek(size + 2 * CHUNK + 777)
        f.write(b"tail" * 1000)
    data += bytes(2 * CHUNK + 777) + b"tail" * 1000
    before = placed(cluster)
    random_ring_reads(cluster.mount, path, data, rng)
    after = placed(cluster)
    assert after[0] > before[0] and after[1] > before[1] and after[2] > before[2]


def test_a_ring_kept_full_runs_batches_at_once(cluster, workdir):
    """A client that keeps 32 reads of 1 MiB in flight, submitting one as
    each completes (fio's and kvc-bench's pattern): kvc-fuse splits the
    queue into batches of a few MiB run by several workers at once
    (ring_service.c), completions come back in any order, and every
    read's bytes are right."""
    rng = random.Random(17)
    size = 48 << 20
    data = rng.randbytes(size)
    path = workdir / "stream"
    path.write_bytes(data)
    mib, depth, total = 1 << 20, 32, 320
    metrics = scrape(cluster.fuse_metrics)
    overlapped = value(metrics, "kvc_fuse_ring_batches_overlapped_total")
    completed = value(metrics, "kvc_fuse_ring_entries_completed_total")
    r = Ring(cluster.mount, depth * mib, True, entries=64)
    fd = open_registered(path, os.O_RDONLY)
    offsets = {}

    def submit(slot):
        off = rng.randrange(0, size - mib)
        offsets[slot] = off
        r.ring.prepare(r.iov[slot * mib:(slot + 1) * mib], True, fd, off, userdata=slot)

    try:
        for slot in range(depth):
            submit(slot)
        submitted, done = depth, 0
        while done < total:
            for res in r.ring.submit().wait(min_results=1):
                slot = res.userdata
                assert res.result == mib, res.result
                off = offsets[slot]
                assert bytes(r.shm.buf[slot * mib:(slot + 1) * mib]) == data[off:off + mib]
                done += 1
                if submitted < total:
                    submit(slot)
                    submitted += 1
    finally:
        close_registered(fd)
        r.close()
    metrics = scrape(cluster.fuse_metrics)
    assert value(metrics, "kvc_fuse_ring_entries_completed_total") >= completed + total
    assert value(metrics, "kvc_fuse_ring_batches_overlapped_total") > overlapped


def test_ring_writes_are_placed_and_read_back(cluster, workdir):
    rng = random.Random(7)
    path = workdir / "w"
    path.write_bytes(b"")
    w = Ring(cluster.mount, 8 << 20, False)
    f = scrape(cluster.fuse_metrics)
    writes_before = sum(value(scrape(a), "kvc_storage_place_writes_total")
                        for a in cluster.storage_metrics)
    fd = open_registered(path)
    expect = bytearray()
    try:
        ios, at = [], 0
        for length in (3 * CHUNK + 5, 17, CHUNK, 40000):
            w.shm.buf[at:at + length] = rng.randbytes(length)
            ios.append((at, length, len(expect)))
            expect += bytes(w.shm.buf[at:at + length])
            at += length
        assert w.run(fd, ios) == [length for _, length, _ in ios]
    finally:
        close_registered(fd)
        w.close()
    assert path.read_bytes() == bytes(expect)
    writes_after = sum(value(scrape(a), "kvc_storage_place_writes_total")
                       for a in cluster.storage_metrics)
    assert writes_after > writes_before
    assert f is not None


def write_with_a_bad_block(cluster, path):
    """Two file-backed chunks of random bytes at path, the first with a
    byte flipped in its chunk file (a bad block 0); returns the bytes."""
    data = os.urandom(2 * CHUNK)
    with open(path, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    inode = int(subprocess.run(["getfattr", "-n", "user.kvc.inode", "--only-values", str(path)],
                               capture_output=True, text=True, check=True).stdout)
    name = chunk_name(inode, 0)
    chunk = [p for p in cluster.dir.glob(f"s*/t*/{name}")]
    assert len(chunk) == 1
    raw = bytearray(chunk[0].read_bytes())
    raw[1000] ^= 0xFF
    chunk[0].write_bytes(bytes(raw))
    return data


def test_a_corrupted_block_is_eio_through_placement(cluster, workdir):
    path = workdir / "bad"
    data = write_with_a_bad_block(cluster, path)
    r = Ring(cluster.mount, 4 << 20, True)
    fd = open_registered(path, os.O_RDONLY)
    try:
        before = placed(cluster)
        # the bad block fails its io, read through a bounce buffer (4 KiB
        # of a block) or straight into the iov (whole blocks); the other
        # chunk reads fine
        assert r.run(fd, [(0, 4096, 0), (CHUNK, CHUNK, CHUNK)]) == [-errno.EIO, CHUNK]
        assert r.run(fd, [(2 * CHUNK, CHUNK, 0)]) == [-errno.EIO]
        # the bad block as the edge of a placed piece: checked in the server
        assert r.run(fd, [(2 * CHUNK, 40000, 500)]) == [-errno.EIO]
        assert r.run(fd, [(2 * CHUNK, 16384, 16384)]) == [16384]
        assert bytes(r.shm.buf[2 * CHUNK:2 * CHUNK + 16384]) == data[16384:32768]

        assert bytes(r.shm.buf[CHUNK:2 * CHUNK]) == data[CHUNK:]
        assert placed(cluster)[2] > before[2]
    finally:
        close_registered(fd)
        r.close()


def test_a_corrupted_inline_chunk_is_eio_through_placement(cluster, workdir):
    """A small file's chunk lives in its target's index (an inline record),
    whose bytes a placed read copies straight into the iov: its crcs are
    checked in the record first. A byte flipped in the record (in the
    index file, under LMDB, which checks nothing) fails every placed read
    of that block with EIO and places nothing of it, while a block beside
    it is read as before. The same for a ring key of 4 KiB segments, whose
    pieces are placed as one run from the record: the run fails its crc
    before anything is copied, and read again piece by piece, every
    segment of the good blocks gets its bytes, none of the bad one's. The
    server stays up."""
    size = 48 << 10  # three 16 KiB blocks, under the inline limit
    data = os.urandom(size)
    path = workdir / "small"
    with open(path, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    flipped = 0
    for index in cluster.dir.glob("s*/t*/index/data.mdb"):
        raw = bytearray(index.read_bytes())
        at = raw.find(data[:256])
        while at >= 0:  # every copy LMDB may still hold
            raw[at + 1000] ^= 0xFF  # block 0
            flipped += 1
            at = raw.find(data[:256], at + 1)
        if flipped:
            with open(index, "r+b") as f:
                f.write(raw)
            break
    assert flipped, "the record's bytes are not in any index"
    r = Ring(cluster.mount, 1 << 20, True)
    fd = open_registered(path, os.O_RDONLY)
    try:
        before = placed(cluster)
        r.shm.buf[:size] = b"\xee" * size
        assert r.run(fd, [(0, size, 0)]) == [-errno.EIO]
        assert r.run(fd, [(0, 500, 700)]) == [-errno.EIO]
        assert bytes(r.shm.buf[:1000]) == b"\xee" * 1000, "bad bytes were placed"
        assert r.run(fd, [(16384, 32768, 16384)]) == [32768]
        assert bytes(r.shm.buf[16384:49152]) == data[16384:]
        assert placed(cluster)[2] > before[2]
    finally:
        close_registered(fd)
        r.close()
    keys = kvcfs.KeyDir(workdir)
    ring = kvcfs.Ring(str(cluster.mount), 8, for_read=False)
    iov = kvcfs.Iov.create(str(cluster.mount), 1 << 20)
    try:
        segs = [(iov, i * 8192, 4096) for i in range(size // 4096)]
        iov.memoryview()[:len(segs) * 8192] = b"\xee" * (len(segs) * 8192)
        assert ring.get_keys(keys, [("small", segs)]).wait() == [-errno.EIO]
        view = iov.memoryview()
        for i, (_, off, n) in enumerate(segs):
            want = data[i * 4096:(i + 1) * 4096] if i >= 4 else b"\xee" * 4096  # block 0: none
            assert bytes(view[off:off + n]) == want, i
    finally:
        iov.close()
        ring.close()
        keys.close()
    assert (workdir / "small").stat().st_size == size  # kvc-storage is still up


def test_a_bad_block_fails_only_its_own_pieces_of_a_run(cluster, workdir):
    """A key of 4 KiB segments whose chunk has one bad block: the server
    reads the key's pieces as one run, which fails its crc check; it reads
    them again one by one, so the get fails (a segment of the bad block)
    but every segment of the good blocks was placed with its bytes."""
    keys = kvcfs.KeyDir(workdir)
    ring = kvcfs.Ring(str(cluster.mount), 8, for_read=False)
    iov = kvcfs.Iov.create(str(cluster.mount), 1 << 20)
    try:
        size = 128 << 10  # past the inline limit: a chunk file to damage
        data = os.urandom(size)
        (workdir / "bad-key").write_bytes(data)
        inode = int(subprocess.run(["getfattr", "-n", "user.kvc.inode", "--only-values",
                                    str(workdir / "bad-key")],
                                   capture_output=True, text=True, check=True).stdout)
        name = chunk_name(inode, 0)
        chunk = list(cluster.dir.glob(f"s*/t*/{name}"))
        assert len(chunk) == 1
        raw = bytearray(chunk[0].read_bytes())
        raw[1000] ^= 0xFF  # block 0 of 8
        chunk[0].write_bytes(bytes(raw))
        segs = [(iov, i * 8192, 4096) for i in range(size // 4096)]
        iov.memoryview()[:len(segs) * 8192] = b"\xee" * (len(segs) * 8192)
        merged = sum(value(scrape(a), "kvc_storage_read_pieces_merged_total")
                     for a in cluster.storage_metrics)
        assert ring.get_keys(keys, [("bad-key", segs)]).wait() == [-errno.EIO]
        assert sum(value(scrape(a), "kvc_storage_read_pieces_merged_total")
                   for a in cluster.storage_metrics) > merged, "not read as one run"
        view = iov.memoryview()
        for i, (_, off, n) in enumerate(segs[4:], start=4):  # blocks 1..7
            assert bytes(view[off:off + n]) == data[i * 4096:(i + 1) * 4096], i
    finally:
        iov.close()
        ring.close()
        keys.close()


def direct_read(path, size, offset=0):
    """size bytes of the file from offset, read with O_DIRECT (past the
    kernel's page cache: every read reaches kvc-fuse), 1 MiB at a time
    into aligned memory."""
    buf = mmap.mmap(-1, 1 << 20)
    out = bytearray()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        while len(out) < size:
            n = os.preadv(fd, [buf], offset + len(out))
            assert n > 0
            out += buf[:n]
    finally:
        os.close(fd)
        buf.close()
    return bytes(out)


def test_fuse_reads_are_placed(cluster, workdir):
    """A FUSE read lands in its thread's shared memory, where a same-host
    server places it: byte for byte, and counted as placed at both ends."""
    data = os.urandom(5 * CHUNK + 4097)
    (workdir / "f").write_bytes(data)
    before = placed(cluster)
    assert direct_read(str(workdir / "f"), len(data)) == data
    after = placed(cluster)
    assert after[0] > before[0] and after[2] > before[2], (before, after)
    assert after[1] - before[1] >= len(data)


def test_fuse_writes_are_placed(cluster, workdir):
    """A FUSE write is staged in its thread's shared memory, where a
    same-host server takes the bytes from: counted at both ends, and the
    file reads back byte for byte (through placement and through a
    client that uses TCP only)."""
    def writes():
        return sum(value(scrape(a), "kvc_storage_place_writes_total")
                   for a in cluster.storage_metrics)
    data = os.urandom(3 * CHUNK + 12345)
    before, sent = writes(), placed(cluster)[1]
    with open(workdir / "w", "wb") as f:
        for at in range(0, len(data), 100000):  # unaligned writes, chunk-crossing
            f.write(data[at:at + 100000])
            f.flush()
    assert writes() >= before + 4, "every chunk's bytes were taken by placement"
    assert placed(cluster)[1] - sent >= len(data)
    assert direct_read(str(workdir / "w"), len(data)) == data
    assert (workdir / "w").read_bytes() == data


def test_a_placed_read_that_fails_gives_its_buffer_up(cluster, workdir):
    """A placed piece that fails with EIO (here a corrupted block) may have
    left a server's read into the buffer in flight: kvc-fuse's place epoch
    moves, and the FUSE read buffer in use is given up, never reused (the
    next read gets a new one and its bytes are right)."""
    path = workdir / "bad"
    data = write_with_a_bad_block(cluster, path)

    def counters():
        f = scrape(cluster.fuse_metrics)
        return (value(f, "kvc_fuse_transport_place_epoch_total"),
                value(f, "kvc_fuse_transport_place_memory_dropped_total"))

    before = counters()
    with pytest.raises(OSError) as e:
        direct_read(str(path), CHUNK)
    assert e.value.errno == errno.EIO
    # kvc-fuse gives the buffer up after it answered the kernel: the
    # count may move a moment after the read returned
    wait_until(lambda: counters()[1] > before[1], timeout=10)
    after = counters()
    assert after[0] > before[0], (before, after)
    assert after[1] > before[1], (before, after)
    # the good chunk, read after: right, and placed again
    served = placed(cluster)[2]
    assert direct_read(str(path), CHUNK, CHUNK) == data[CHUNK:]
    assert placed(cluster)[2] > served


def test_transport_tcp_in_the_cluster_file_forces_tcp(cluster, workdir, local_tmp):
    conf = client_conf(cluster, local_tmp / "tcp.conf", "[meta]", "transport = tcp\n\n[meta]")
    data = os.urandom(3 * CHUNK + 99)
    (workdir / "t").write_bytes(data)
    proc, mount = second_mount(cluster, conf)
    try:
        before = placed(cluster)[2]
        r = Ring(mount, 4 << 20, True)
        fd = open_registered(os.path.join(mount, workdir.name, "t"), os.O_RDONLY)
        try:
            assert r.run(fd, [(0, len(data), 0)]) == [len(data)]
            assert bytes(r.shm.buf[:len(data)]) == data
        finally:
            close_registered(fd)
            r.close()
        # FUSE reads too
        assert direct_read(os.path.join(mount, workdir.name, "t"), len(data)) == data
        assert placed(cluster)[2] == before  # no server placed anything
    finally:
        drop_second_mount(proc, mount)


def test_key_segments_with_holes_placed_and_over_tcp(cluster, workdir, local_tmp):
    """Gets of keys scattered into many segments of one iov, each key one
    piece a chunk: the spans placed by the server, or over TCP (a second
    kvc-fuse whose cluster file says tcp) the piece's bytes received
    segment by segment; a key whose last bytes are a hole (a file made
    longer by truncate) gets zeros there, across the segments the hole
    covers. Byte for byte both ways, and no placement on the TCP mount."""
    rng = random.Random(7)
    files = {"full": rng.randbytes(CHUNK + 50000), "holed": rng.randbytes(30000)}
    for name, data in files.items():
        (workdir / name).write_bytes(data)
    os.truncate(workdir / "holed", 70000)
    files["holed"] += bytes(40000)
    conf = client_conf(cluster, local_tmp / "tcp.conf", "[meta]", "transport = tcp\n\n[meta]")
    proc, mount = second_mount(cluster, conf)
    try:
        for where in (str(cluster.mount), mount):
            ring = kvcfs.Ring(where, 8, for_read=False)
            iov = kvcfs.Iov.create(where, 8 << 20)
            keys = kvcfs.KeyDir(os.path.join(where, workdir.name))
            try:
                items = []
                for k, (name, data) in enumerate(files.items()):
                    cuts = sorted(rng.sample(range(1, len(data)), 23))
                    lengths = [b - a for a, b in zip([0] + cuts, cuts + [len(data)])]
                    at, segs = k * (4 << 20) + sum(lengths) + 25 * 4096, []
                    for n in lengths:  # later segments at lower addresses
                        at -= n + 4096
                        segs.append((iov, at, n))
                        iov.memoryview()[at:at + n] = b"\xee" * n
                    items.append((name, segs))
                before = placed(cluster)[2]
                assert ring.get_keys(keys, items).wait() == [len(d) for d in files.values()]
                for name, segs in items:
                    got = b"".join(bytes(iov.memoryview()[o:o + n]) for _, o, n in segs)
                    assert got == files[name], (where, name)
                if where == mount:
                    assert placed(cluster)[2] == before  # no server placed anything
            finally:
                keys.close()
                iov.close()
                ring.close()
    finally:
        drop_second_mount(proc, mount)


SHRINKER = r"""
import os, sys, time
from multiprocessing import shared_memory
sys.path.insert(0, sys.argv[3])
from hf3fs_fuse import io as h3io
mount, path = sys.argv[1], sys.argv[2]
size = 8 << 20
shm = shared_memory.SharedMemory(create=True, size=size)
iov = h3io.make_iovec(shm, mount)
ring = h3io.make_ioring(mount, 8, for_read=sys.argv[4] == "read", timeout=1)
fd = os.open(path, os.O_RDWR)
h3io.register_fd(fd)
print("ready", flush=True)
results = []
for round in range(40):
    for i in range(8):
        ring.prepare(iov[i << 20:(i + 1) << 20], sys.argv[4] == "read", fd, i << 20)
    ring.submit()
    if round == 3:
        os.ftruncate(shm._fd, 4096)  # shrink the iov under the I/O
    results += [r.result for r in ring.wait(min_results=8)]
print(sorted(set(results)), flush=True)
shm.unlink()
"""


@pytest.mark.parametrize("op", ["read", "write"])
def test_a_client_shrinking_its_iov_hurts_only_itself(cluster, workdir, op):
    path = workdir / "shrink"
    path.write_bytes(os.urandom(8 * CHUNK))
    pids = {s: cluster.pid(s) for s in ("s1", "s2", "s3")}
    out = subprocess.run([sys.executable, "-c", SHRINKER, str(cluster.mount), str(path),
                          str(ROOT / "tools" / "python"), op],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KVC_LIB": str(LIBKVC)})
    assert out.returncode == 0, out.stderr
    results = eval(out.stdout.splitlines()[-1])
    # the servers stayed up
    assert {s: cluster.pid(s) for s in pids} == pids
    if -errno.EFAULT not in results:
        subprocess.run("tail -n 20 %s/logs/*" % cluster.dir, shell=True)
    assert -errno.EFAULT in results, results  # its own I/O failed, cleanly
    # and another client's ring works
    for s in pids:
        assert subprocess.run(["kill", "-0", str(pids[s])]).returncode == 0
    r = Ring(cluster.mount, 8 << 20, True)
    fd = open_registered(path, os.O_RDONLY)
    try:
        assert r.run(fd, [(0, 8 * CHUNK, 0)]) == [8 * CHUNK]
    finally:
        close_registered(fd)
        r.close()


HOLE_FAULT = r"""
import os, sys
from multiprocessing import shared_memory
sys.path.insert(0, sys.argv[3])
from hf3fs_fuse import io as h3io
mount, path = sys.argv[1], sys.argv[2]
size = 4 << 20
shm = shared_memory.SharedMemory(create=True, size=size)
try:
    iov = h3io.make_iovec(shm, mount)
    ring = h3io.make_ioring(mount, 8, for_read=True, timeout=1)
    fd = os.open(path, os.O_RDONLY)
    h3io.register_fd(fd)
    os.ftruncate(shm._fd, (2 << 20) + 8192)  # the iov shrinks: its last 2 MiB are gone
    for _ in range(3):
        # first: 12 KiB of bytes then a hole, landing across the new end
        # (the bytes placed, the hole's zeros faulting); then, in the same
        # request to the same server, the file's first 4 KiB
        ring.prepare(iov[(2 << 20) - 4096:(3 << 20) - 4096], True, fd, 4096)
        ring.prepare(iov[0:4096], True, fd, 0)
        ring.submit()
        done = ring.wait(min_results=2)
        print(sorted(r.result for r in done), flush=True)
    print(bytes(shm.buf[0:16]).hex(), flush=True)
finally:
    shm.unlink()
"""


def test_a_hole_whose_zeros_fault_fails_only_its_own_read(cluster, workdir):
    """A ring read of a file's bytes and the hole after them, into iov
    memory the client cut off where the hole's zeros go: that read fails
    with EFAULT, and a read of the same chunk in the same placed request
    still succeeds (its connection and placement stay: no fallback to
    TCP, nothing retried)."""
    path = workdir / "holey"
    data = os.urandom(16384)
    path.write_bytes(data)
    os.truncate(path, CHUNK)  # bytes 16 KiB .. 1 MiB: a hole
    def fallbacks():
        return value(scrape(cluster.fuse_metrics), "kvc_fuse_transport_place_fallbacks_total")
    before = fallbacks()
    out = subprocess.run([sys.executable, "-c", HOLE_FAULT, str(cluster.mount), str(path),
                          str(ROOT / "tools" / "python")],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KVC_LIB": str(LIBKVC)})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for line in lines[:3]:
        assert eval(line) == [-errno.EFAULT, 4096], lines
    assert lines[3] == data[:16].hex()
    assert fallbacks() == before, "the fault turned placement off"


def test_a_client_killed_mid_read_costs_nothing_else(cluster, workdir):
    path = workdir / "k"
    data = os.urandom(8 * CHUNK)
    path.write_bytes(data)
    pids = {s: cluster.pid(s) for s in ("s1", "s2", "s3")}
    loop = SHRINKER.replace("if round == 3:", "if False:").replace("range(40)", "range(100000)")
    p = subprocess.Popen([sys.executable, "-c", loop, str(cluster.mount), str(path),
                          str(ROOT / "tools" / "python"), "read"],
                         stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "KVC_LIB": str(LIBKVC)})
    assert p.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # placed reads in flight
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert all(alive(pid) for pid in pids.values())
    r = Ring(cluster.mount, 8 << 20, True)
    fd = open_registered(path, os.O_RDONLY)
    try:
        before = placed(cluster)[2]
        assert r.run(fd, [(0, 8 * CHUNK, 0)]) == [8 * CHUNK]
        assert bytes(r.shm.buf[:8 * CHUNK]) == data
        assert placed(cluster)[2] > before
    finally:
        close_registered(fd)
        r.close()


def run_across_a_restart(cluster, threads, stop):
    """Start threads, restart storage server s2 half a second in, let them
    run a second more, then stop them (stop: their Event); none may hang."""
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        cluster.restart("s2")
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)  # no hang


def test_a_storage_server_restarted_mid_stream(cluster, workdir):
    path = workdir / "restart"
    data = os.urandom(6 * CHUNK)
    path.write_bytes(data)
    r = Ring(cluster.mount, 8 << 20, True)
    fd = open_registered(path, os.O_RDONLY)
    results, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            res = r.run(fd, [(0, 6 * CHUNK, 0)])
            results.append(res[0])
            if res[0] == 6 * CHUNK and bytes(r.shm.buf[:6 * CHUNK]) != data:
                results.append("wrong bytes")

    t = threading.Thread(target=reader)
    run_across_a_restart(cluster, [t], stop)
    assert "wrong bytes" not in results
    # only clean errors while the server was away (one copy: EIO)
    assert set(results) <= {6 * CHUNK, -errno.EIO}, set(results)
    # and placement again once it is back
    before = placed(cluster)[2]
    assert wait_until(lambda: r.run(fd, [(0, 6 * CHUNK, 0)]) == [6 * CHUNK], timeout=20)
    assert bytes(r.shm.buf[:6 * CHUNK]) == data
    assert wait_until(lambda: (r.run(fd, [(0, 6 * CHUNK, 0)]), placed(cluster)[2] > before)[1],
                      timeout=10)
    close_registered(fd)
    r.close()


def test_fuse_writes_across_a_storage_server_restart(cluster, workdir):
    """Placed FUSE writes while a storage server restarts: each write
    succeeds or fails with EIO (no hang, no other error: a placement that
    broke mid-write moves the place epoch and gives the staging memory
    up, as test_a_placed_read_that_fails_gives_its_buffer_up shows for
    reads); once the server is back the file's bytes are the last
    write's, and writes are placed again."""
    path = workdir / "wrestart"
    path.write_bytes(bytes(6 * CHUNK))
    results, stop = [], threading.Event()

    def writer(n):
        blob = bytes([n]) * CHUNK
        with open(path, "r+b", buffering=0) as f:
            while not stop.is_set():
                try:
                    for c in range(6):
                        os.pwrite(f.fileno(), blob, c * CHUNK)
                    results.append(0)
                except OSError as e:
                    results.append(e.errno)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(1, 5)]
    run_across_a_restart(cluster, threads, stop)
    assert set(results) <= {0, errno.EIO}, set(results)
    assert results.count(0) > 0
    data = os.urandom(6 * CHUNK)
    assert wait_until(lambda: _write_ok(path, data), timeout=20)
    assert direct_read(str(path), len(data)) == data
    sent = placed(cluster)[1]
    assert wait_until(lambda: (_write_ok(path, data), placed(cluster)[1] > sent)[1], timeout=10)


def _write_ok(path, data):
    try:
        with open(path, "r+b") as f:
            f.write(data)
        return True
    except OSError:
        return False


def test_admin_status_names_the_transport(cluster, local_tmp):
    import json
    status = json.loads(cluster.admin("--json", "status").stdout)
    assert [s["transport"] for s in status["storage"]] == ["place"] * len(cluster.storage_addresses)
    out = cluster.admin("status")
    assert out.stderr == ""  # a probe, not a log line
    assert out.stdout.count("transport from this host: same-host placement") == \
        len(cluster.storage_addresses), out.stdout
    conf = local_tmp / "tcp.conf"
    conf.write_text(cluster.conf.read_text().replace("[meta]", "transport = tcp\n\n[meta]", 1))
    out = subprocess.run([str(BUILD / "kvc-admin"), "--config", str(conf), "--json",
                          "status"], capture_output=True, text=True, timeout=60)
    assert [s["transport"] for s in json.loads(out.stdout)["storage"]] == \
        ["tcp"] * len(cluster.storage_addresses)


def test_small_key_segments_are_read_as_one_run_and_placed(cluster, workdir):
    """A get of keys of many small segments (KV pages per layer): a key's
    segments in one chunk go to the storage server as one piece with a
    span per segment, which it reads once and places span by span (no
    bounce copy in kvc-fuse); every byte lands in its segment, segments
    spread in any order of memory, and the servers' pieces, spans and
    merged-pieces metrics count it. A key whose last segments lie past a
    chunk boundary (a piece per chunk, the segment across it in both),
    one that is not a whole number of 16 KiB blocks, and one whose
    segments alternate between two iovs (a piece per segment), too."""
    ring = kvcfs.Ring(str(cluster.mount), 64, for_read=False)
    iovs = [kvcfs.Iov.create(str(cluster.mount), 16 << 20) for _ in range(2)]
    keys = kvcfs.KeyDir(workdir)
    rng = random.Random(31)
    try:
        items, want = [], {}
        for k, (size, nsegs) in enumerate([(65536, 16), (65536, 64), (40000, 7),
                                           (CHUNK + 12288, 16)]):
            cuts = sorted(rng.sample(range(1, size), nsegs - 1))
            lengths = [b - a for a, b in zip([0] + cuts, cuts + [size])]
            # layer-major: apart from each other, the later segments at
            # lower addresses; key 2's alternate between the iovs (one
            # region per placed request: its pieces cannot make a run)
            base = k * (3 << 20)
            segs = [(iovs[i % 2 if k == 2 else 0],
                     base + sum(lengths[i + 1:]) + (nsegs - i) * 512, n)
                    for i, n in enumerate(lengths)]
            data = rng.randbytes(size)
            pos = 0
            for iov, off, n in segs:
                iov.memoryview()[off:off + n] = data[pos:pos + n]
                pos += n
            items.append((f"k{k}", segs))
            want[f"k{k}"] = data
        assert ring.put_keys(keys, items).wait() == [len(want[n]) for n, _ in items]
        # key 3: its segments before the chunk boundary, and after it
        cut = [0]
        for _, off, n in items[3][1]:
            cut.append(cut[-1] + n)
        across = sum(1 for a, b in zip(cut, cut[1:]) if a < CHUNK < b)
        pieces = 1 + 1 + 7 + 2
        spans = 16 + 64 + 7 + 16 + across

        def counters():
            m = [scrape(a) for a in cluster.storage_metrics]
            return [sum(value(x, name) for x in m) for name in
                    ("kvc_storage_place_read_pieces_total", "kvc_storage_place_read_spans_total",
                     "kvc_storage_read_pieces_merged_total")]
        # An earlier test's restart may have paused placement to a
        # server for a few seconds (its reads go by TCP meanwhile)
        deadline = time.monotonic() + 20
        while True:
            for name, segs in items:
                for iov, off, n in segs:
                    iov.memoryview()[off:off + n] = b"\xee" * n
            before = counters()
            assert ring.get_keys(keys, items).wait() == [len(want[n]) for n, _ in items]
            for name, segs in items:
                got = b"".join(bytes(iov.memoryview()[off:off + n]) for iov, off, n in segs)
                assert got == want[name], name
            delta = [b - a for a, b in zip(before, counters())]
            if delta[:2] == [pieces, spans] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert delta[:2] == [pieces, spans], "a key's segments were not one piece with spans"
        assert delta[2] >= 15 + 63, "the spans of one chunk were not read as one run"
        assert (workdir / "k1").read_bytes() == want["k1"]
    finally:
        keys.close()
        for iov in iovs:
            iov.close()
        ring.close()


def test_ring_keys_of_host_segments_are_placed(cluster, workdir):
    ring = kvcfs.Ring(str(cluster.mount), 16, for_read=False)
    iovs = [kvcfs.Iov.create(str(cluster.mount), 8 << 20) for _ in range(2)]
    keys = kvcfs.KeyDir(workdir)
    try:
        data = os.urandom(5 * CHUNK + 4096)  # past the bounce buffer's keys
        segs = [(iovs[0], 0, 2 * CHUNK), (iovs[1], 16384, len(data) - 2 * CHUNK)]
        at = 0
        for iov, off, n in segs:
            iov.memoryview()[off:off + n] = data[at:at + n]
            at += n
        before = placed(cluster)
        writes = sum(value(scrape(a), "kvc_storage_place_writes_total")
                     for a in cluster.storage_metrics)
        assert ring.put_keys(keys, [("k", segs)]).wait() == [len(data)]
        assert (workdir / "k").read_bytes() == data
        for iov, off, n in segs:
            iov.memoryview()[off:off + n] = bytes(n)
        assert ring.get_keys(keys, [("k", segs)]).wait() == [len(data)]
        assert b"".join(bytes(iov.memoryview()[off:off + n]) for iov, off, n in segs) == data
        assert placed(cluster)[2] > before[2]
        assert sum(value(scrape(a), "kvc_storage_place_writes_total")
                   for a in cluster.storage_metrics) > writes
    finally:
        keys.close()
        for iov in iovs:
            iov.close()
        ring.close()


def test_storage_says_how_it_checks_blocks(cluster):
    """kvc-storage logs the crc32c kind it found on the CPU (the folding
    kind where AVX-512 VPCLMULQDQ is there, docs/operations.md)."""
    for name in ("s1", "s2", "s3"):
        log = (cluster.dir / "logs" / f"{name}.log").read_text()
        assert any(f"block checksums: crc32c by {kind}" in log
                   for kind in ("table", "sse4.2 crc32", "avx512 vpclmulqdq")), name
