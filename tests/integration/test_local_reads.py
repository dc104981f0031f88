"""Same-host reads without a message (src/client/transport_local.h): on
the shared cluster (one copy, no managers, every server on this host)
kvc-fuse reads what the page cache holds of a target's chunks itself,
checking their crcs; everything else goes to the servers as before. Round
trips of random sizes, chunk-crossing, holes and inline chunks served
here; a corrupted block caught here and answered EIO by its server; reads
racing rewrites never torn; a client shrinking its iov; a storage server
restarted under a read load; and `local_reads = off`."""
import errno
import os
import random
import subprocess
import sys
import threading

from conftest import (CHUNK, LIBKVC, PORT_BASE, ROOT, server_placement, wait_until)
from test_metrics import scrape, value
from test_placement import (SHRINKER, Ring, close_registered, direct_read, open_registered,
                            random_ring_reads, run_across_a_restart, write_with_a_bad_block)


def local(cluster):
    """(pieces, bytes, misses) kvc-fuse read here, and PLACE_READs the
    servers served."""
    f = scrape(cluster.fuse_metrics)
    served = sum(value(scrape(a), "kvc_storage_place_reads_total")
                 for a in cluster.storage_metrics)
    return (value(f, "kvc_fuse_transport_local_reads_total"),
            value(f, "kvc_fuse_transport_local_bytes_total"),
            value(f, "kvc_fuse_transport_local_misses_total"), served)


def test_ring_reads_of_cached_chunks_are_read_here(cluster, workdir):
    """Random sizes and offsets over file-backed chunks, a hole, an inline
    tail: every byte right, the pieces read here, none by a server."""
    rng = random.Random(29)
    size = 4 * CHUNK + 12345
    data = bytearray(rng.randbytes(size))
    path = workdir / "f"
    with open(path, "wb") as f:
        f.write(data)
        f.seek(size + CHUNK + 777)  # a hole of a chunk and a bit
        f.write(b"tail" * 1000)     # in a chunk of its own: inline
    data += bytes(CHUNK + 777) + b"tail" * 1000
    before = local(cluster)
    random_ring_reads(cluster.mount, path, data, rng)
    after = local(cluster)
    assert after[0] > before[0] and after[1] > before[1]
    assert after[2] == before[2]  # nothing went to a server after all
    assert after[3] == before[3]


def test_fuse_reads_of_cached_chunks_are_read_here(cluster, workdir):
    path = workdir / "f"
    data = os.urandom(3 * CHUNK + 5000)
    path.write_bytes(data)
    before = local(cluster)
    assert direct_read(str(path), len(data)) == data
    after = local(cluster)
    assert after[1] - before[1] >= len(data)
    assert after[3] == before[3]


def test_a_corrupted_block_is_caught_here_and_eio_from_its_server(cluster, workdir):
    """The crc check here fails: the piece goes to its server, which
    answers EIO (and queues a repair where there are copies); the other
    chunk reads right, here."""
    path = workdir / "bad"
    data = write_with_a_bad_block(cluster, path)
    r = Ring(cluster.mount, 4 << 20, True)
    fd = open_registered(path, os.O_RDONLY)
    try:
        before = local(cluster)
        assert r.run(fd, [(0, 4096, 0), (CHUNK, CHUNK, CHUNK)]) == [-errno.EIO, CHUNK]
        assert bytes(r.shm.buf[CHUNK:2 * CHUNK]) == data[CHUNK:]
        after = local(cluster)
        assert after[2] > before[2]  # missed here
        assert after[3] > before[3]  # and the server answered it
        assert after[0] > before[0]  # the good chunk read here
    finally:
        close_registered(fd)
        r.close()


def test_reads_racing_rewrites_are_never_torn(cluster, workdir):
    """A writer rewrites a chunk with one byte value after another while a
    ring reads it: each read is one value throughout (a change made
    during a read here sends the piece to its server)."""
    path = workdir / "race"
    path.write_bytes(bytes([0]) * CHUNK)
    stop = threading.Event()
    torn = []

    def writer():
        fd = os.open(path, os.O_WRONLY)
        try:
            v = 0
            while not stop.is_set():
                v = (v + 1) % 256
                os.pwrite(fd, bytes([v]) * CHUNK, 0)
        finally:
            os.close(fd)

    t = threading.Thread(target=writer)
    t.start()
    r = Ring(cluster.mount, CHUNK, True)
    fd = open_registered(path, os.O_RDONLY)
    reads = 0
    try:
        for _ in range(200):
            assert r.run(fd, [(0, CHUNK, 0)]) == [CHUNK]
            got = bytes(r.shm.buf[:CHUNK])
            if got.count(got[:1]) != CHUNK:
                torn.append(sorted(set(got))[:8])
            reads += 1
    finally:
        stop.set()
        t.join(timeout=60)
        close_registered(fd)
        r.close()
    assert not t.is_alive()
    assert torn == []


def test_a_client_shrinking_its_iov_under_reads_here_hurts_only_itself(cluster, workdir):
    path = workdir / "shrink"
    path.write_bytes(os.urandom(8 * CHUNK))
    fuse = cluster.pid("fuse")
    before = local(cluster)
    out = subprocess.run([sys.executable, "-c", SHRINKER, str(cluster.mount), str(path),
                          str(ROOT / "tools" / "python"), "read"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "KVC_LIB": str(LIBKVC)})
    assert out.returncode == 0, out.stderr
    results = eval(out.stdout.splitlines()[-1])
    assert -errno.EFAULT in results, results  # its own reads failed, cleanly
    assert local(cluster)[0] > before[0]       # and were read here
    assert cluster.pid("fuse") == fuse          # kvc-fuse took no SIGBUS
    r = Ring(cluster.mount, 8 << 20, True)
    fd = open_registered(path, os.O_RDONLY)
    try:
        assert r.run(fd, [(0, 8 * CHUNK, 0)]) == [8 * CHUNK]
    finally:
        close_registered(fd)
        r.close()


def test_a_storage_server_restarted_under_reads_here(cluster, workdir):
    """Reads here of a server's target stop when its process goes (its
    change counters went with it), go through the servers while it is
    away (clean EIO for its chunks), and start again with the new one."""
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
    assert set(results) <= {6 * CHUNK, -errno.EIO}, set(results)
    with open(cluster.dir / "logs" / "fuse.log") as f:
        assert "went away: its chunks are read through it again" in f.read()
    # every chunk read here again, from the new process's target too
    before = local(cluster)

    def all_here():
        b = local(cluster)
        ok = r.run(fd, [(0, 6 * CHUNK, 0)]) == [6 * CHUNK]
        return ok and local(cluster)[0] - b[0] == 6 and local(cluster)[3] == b[3]

    assert wait_until(all_here, timeout=20)
    assert bytes(r.shm.buf[:6 * CHUNK]) == data
    assert local(cluster)[0] > before[0]
    close_registered(fd)
    r.close()


def test_local_reads_off_in_the_cluster_file(cluster, workdir):
    path = workdir / "f"
    data = os.urandom(2 * CHUNK + 99)
    path.write_bytes(data)
    with server_placement(cluster, PORT_BASE + 38) as served:
        before = local(served)
        assert direct_read(str(served.mount / workdir.name / "f"), len(data)) == data
        after = local(served)
        assert after[:3] == (0, 0, 0)  # not even registered
        assert after[3] > before[3]    # the servers placed it


def test_place_local_hands_out_memory_no_client_can_write(cluster):
    """PLACE_LOCAL on a server's placement socket, as a hostile local
    process of the same user would send it: a target of another server is
    -ENXIO, a reserved word set -EINVAL; a good one gets the directory and
    the counters, which it can neither map writable nor resize."""
    import array
    import errno as e
    import mmap
    import socket
    import struct
    import kvcwire
    address = cluster.storage_addresses[0]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(b"\0kvc-place:" + address.encode())
    try:
        assert kvcwire.handshake(sock, kvcwire.secret_of(address)) == 0

        def ask(target, reserved=0):
            sock.sendall(kvcwire.frame(84, struct.pack("<II", target, reserved)))
            fds = array.array("i")
            msg, anc, _, _ = sock.recvmsg(kvcwire.HEADER.size + 8,
                                          socket.CMSG_LEN(4 * fds.itemsize))
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
            header = kvcwire.HEADER.unpack(msg[:kvcwire.HEADER.size])
            rest = msg[kvcwire.HEADER.size:]
            if len(rest) < header[5]:
                rest += kvcwire.recv_exact(sock, header[5] - len(rest))
            return header[4], rest, list(fds)

        assert ask(1)[0] == -e.ENXIO  # s2's target
        assert ask(0, 7)[0] == -e.EINVAL
        status, body, fds = ask(0)
        assert status == 0 and struct.unpack("<II", body) == (1024, 0) and len(fds) == 2
        try:
            assert os.path.isdir(f"/proc/self/fd/{fds[0]}/index")
            counters = mmap.mmap(fds[1], 8192, mmap.MAP_SHARED, mmap.PROT_READ)
            counters.close()
            try:
                mmap.mmap(fds[1], 8192, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                assert False, "the counters mapped writable"
            except PermissionError:
                pass
            try:
                os.ftruncate(fds[1], 0)
                assert False, "the counters resized"
            except PermissionError:
                pass
        finally:
            for fd in fds:
                os.close(fd)
    finally:
        sock.close()
    assert kvcwire.ping(address)
