"""USRBIO against a live cluster: rings in C (native and 3FS APIs) and in
Python (the hf3fs_fuse.io compatibility module, as the vLLM and SGLang
connectors use it), data checked against the FUSE mount both ways, bad
input, another uid, a client killed with I/O in flight."""
import errno
import hashlib
import os
import pwd
import random
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import shared_memory

import pytest

from conftest import BUILD, LIBKVC, ROOT, wait_until

sys.path.insert(0, str(ROOT / "tools" / "python"))
os.environ.setdefault("KVC_LIB", str(LIBKVC))

import kvcfs  # noqa: E402
from hf3fs_fuse import io as h3io  # noqa: E402

TOOLS = BUILD / "tests" / "usrbio"


def run(*args, timeout=300, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def test_root_lists_the_registrations_xattr(cluster):
    shown = run("getfattr", "-n", "user.kvc.usrbio", "--only-values", cluster.mount).stdout
    assert "clients=" in shown


def registrations(cluster):
    out = run("getfattr", "-n", "user.kvc.usrbio", "--only-values", cluster.mount).stdout
    return dict(kv.split("=") for kv in out.split())


def test_ring_writes_read_back_through_fuse(workdir, local_tmp):
    ref = local_tmp / "ref"
    out = run(TOOLS / "ring_roundtrip", "write", workdir / "ringfile", ref, 50_000_017, 11, 4)
    assert out.returncode == 0, out.stderr
    assert os.stat(workdir / "ringfile").st_size == 50_000_017
    assert run("cmp", ref, workdir / "ringfile").returncode == 0
    out = run(TOOLS / "ring_roundtrip", "read", workdir / "ringfile", ref, 5, 3)
    assert out.returncode == 0, out.stderr


def test_fuse_writes_read_back_through_rings(workdir, local_tmp):
    ref = local_tmp / "ref"
    ref.write_bytes(os.urandom(21 * (1 << 20) + 12345))
    assert run("cp", ref, workdir / "copied").returncode == 0
    out = run(TOOLS / "ring_roundtrip", "read", workdir / "copied", ref, 9, 5)
    assert out.returncode == 0, out.stderr


def test_several_processes_with_several_rings(workdir, local_tmp):
    procs = [subprocess.Popen([str(TOOLS / "ring_roundtrip"), "write", str(workdir / f"p{i}"),
                               str(local_tmp / f"r{i}"), str(9_000_000 + i * 777), str(i), "3"],
                              stderr=subprocess.PIPE, text=True) for i in range(4)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    for i in range(4):
        assert run("cmp", local_tmp / f"r{i}", workdir / f"p{i}").returncode == 0


def test_bad_input_is_refused_entry_by_entry(cluster, workdir):
    out = run(TOOLS / "ring_bad_input", workdir)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 failed" in out.stdout
    # The daemon keeps serving rings afterwards.
    out = run(TOOLS / "hf3fs_compat", workdir / "after-bad.pool")
    assert out.returncode == 0, out.stdout


def test_a_layout_1_client_gets_its_batches_in_order(workdir):
    """A ring of layout 1 (completions indexed by slot) queues rounds of
    large reads and small ones without waiting: kvc-fuse runs its batches
    one at a time, so each completion carries its slot, in submission
    order. Three runs: with overlapping batches a run fails about four
    times in five."""
    for _ in range(3):
        out = run(TOOLS / "ring_layout1", workdir)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "8 checks, 0 failed" in out.stdout


def test_hf3fs_c_api_program(workdir):
    out = run(TOOLS / "hf3fs_compat", workdir / "compat.pool")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not ok" not in out.stdout


def test_another_uid_cannot_use_our_iov(cluster, workdir):
    iov = kvcfs.Iov.create(str(cluster.mount), 1 << 20)
    try:
        nobody = pwd.getpwnam("nobody")
        out = subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
                              "--clear-groups", str(TOOLS / "ring_bad_input"), "--other-uid-iov",
                              iov.id.hex(), str(cluster.mount)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        iov.unlink()
        iov.close()


def test_killed_client_leaves_no_registration(cluster, workdir, local_tmp):
    # This test process may hold a control connection of its own.
    before = registrations(cluster)
    p = subprocess.Popen([str(TOOLS / "ring_roundtrip"), "write", str(workdir / "killed"),
                          str(local_tmp / "ref"), str(400 << 20), "3", "4"])
    assert wait_until(lambda: registrations(cluster)["rings"] != before["rings"], timeout=60)
    time.sleep(0.3)  # I/O in flight
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert wait_until(lambda: registrations(cluster) == before)
    out = run(TOOLS / "ring_roundtrip", "write", workdir / "after", local_tmp / "ref2",
              3_000_000, 4, 2)
    assert out.returncode == 0, out.stderr


def test_ring_write_extends_size_without_fsync(cluster, workdir):
    path = workdir / "grow"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    shm = shared_memory.SharedMemory(create=True, size=1 << 20)
    try:
        mount = h3io.extract_mount_point(str(path))
        ring = h3io.make_ioring(mount, 4, for_read=False)  # before any fd is registered
        h3io.register_fd(fd)
        iov = h3io.make_iovec(shm, mount)
        ring.prepare(iov[0:1 << 20], False, fd, 7 << 20)
        ring.submit()
        assert ring.wait(min_results=1)[0].result == 1 << 20
        # Another process sees the new size within a few seconds, no fsync.
        assert wait_until(lambda: run("stat", "-c", "%s", path).stdout.strip()
                          == str(8 << 20), timeout=10)
        h3io.force_fsync(fd)
        assert os.stat(path).st_size == 8 << 20
        # A read-only fd on a write ring fails at prepare with EACCES.
        ro = os.open(path, os.O_RDONLY)
        h3io.register_fd(ro)
        with pytest.raises(OSError) as e:
            ring.prepare(iov[0:4096], False, ro, 0)
        assert e.value.errno == errno.EACCES
        h3io.deregister_fd(ro)
        os.close(ro)
        ring.close()
        iov.close()
        h3io.deregister_fd(fd)
    finally:
        os.close(fd)
        shm.close()
        shm.unlink()


PAGE = 2 << 20
POOL = 4 << 30


class ConnectorClient:
    """One hf3fs client object as vLLM/SGLang make them: its own shared
    memory for reads and writes and its own rings of 8 entries."""

    def __init__(self, mount, fd, entries=8):
        self.fd = fd
        self.shm_r = shared_memory.SharedMemory(create=True, size=PAGE * entries)
        self.shm_w = shared_memory.SharedMemory(create=True, size=PAGE * entries)
        self.iov_r = h3io.make_iovec(self.shm_r, mount)
        self.iov_w = h3io.make_iovec(self.shm_w, mount)
        self.ior_r = h3io.make_ioring(mount, entries, for_read=True, timeout=1)
        self.ior_w = h3io.make_ioring(mount, entries, for_read=False, timeout=1)

    def batch_write(self, pages, blobs):
        for i, (page, blob) in enumerate(zip(pages, blobs)):
            self.shm_w.buf[i * PAGE:(i + 1) * PAGE] = blob
            self.ior_w.prepare(self.iov_w[i * PAGE:(i + 1) * PAGE], False, self.fd, page * PAGE)
        self.ior_w.submit()
        return [r.result for r in self.ior_w.wait(min_results=len(pages))]

    def batch_read(self, pages):
        for i, page in enumerate(pages):
            self.ior_r.prepare(self.iov_r[i * PAGE:(i + 1) * PAGE], True, self.fd, page * PAGE,
                               userdata=i)
        self.ior_r.submit()
        done = self.ior_r.wait(min_results=len(pages))
        assert all(r.result == PAGE for r in done), [r.result for r in done]
        return [hashlib.sha256(self.shm_r.buf[i * PAGE:(i + 1) * PAGE]).hexdigest()
                for i in range(len(pages))]

    def close(self):
        for x in (self.ior_r, self.ior_w, self.iov_r, self.iov_w):
            x.close()
        for shm in (self.shm_r, self.shm_w):
            shm.close()
            shm.unlink()


def test_connector_pattern_two_ranks(workdir):
    ranks, clients_per_rank, total_pages = 2, 16, 500
    rng = random.Random(42)
    mount = h3io.extract_mount_point(str(workdir))
    fds, clients = [], []
    try:
        for rank in range(ranks):
            fd = os.open(workdir / f"rank-{rank}", os.O_RDWR | os.O_CREAT)
            os.ftruncate(fd, POOL)
            h3io.register_fd(fd)
            fds.append(fd)
            clients.append([ConnectorClient(mount, fd) for _ in range(clients_per_rank)])
        num_pages = POOL // PAGE
        chosen = [(rank, page) for rank in range(ranks)
                  for page in rng.sample(range(num_pages), total_pages // ranks)]
        blob_seed = {key: rng.randbytes(16) for key in chosen}

        def blob(key):
            return hashlib.shake_256(blob_seed[key]).digest(PAGE)

        work = [chosen[i::ranks * clients_per_rank] for i in range(ranks * clients_per_rank)]
        errors = []

        def client_thread(idx, read):
            rank, c = idx // clients_per_rank, idx % clients_per_rank
            client = clients[rank][c]
            try:
                mine = [key for key in work[idx] if key[0] == rank] or []
                for b in range(0, len(mine), 8):
                    batch = mine[b:b + 8]
                    pages = [p for _, p in batch]
                    if read:
                        digests = client.batch_read(pages)
                        for key, digest in zip(batch, digests):
                            if digest != hashlib.sha256(blob(key)).hexdigest():
                                errors.append(f"page {key} differs")
                    else:
                        results = client.batch_write(pages, [blob(k) for k in batch])
                        if any(r != PAGE for r in results):
                            errors.append(f"write results {results}")
            except Exception as e:  # collected and asserted below
                errors.append(repr(e))

        # Each rank's pages go to that rank's clients only.
        work = [[] for _ in range(ranks * clients_per_rank)]
        for n, key in enumerate(chosen):
            work[key[0] * clients_per_rank + n % clients_per_rank].append(key)
        for read in (False, True):
            threads = [threading.Thread(target=client_thread, args=(i, read))
                       for i in range(ranks * clients_per_rank)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert not errors, errors[:5]
        assert sum(len(w) for w in work) == total_pages
        for rank in range(ranks):
            assert os.stat(workdir / f"rank-{rank}").st_size == POOL
    finally:
        for per_rank in clients:
            for client in per_rank:
                client.close()
        for fd in fds:
            h3io.deregister_fd(fd)
            os.close(fd)


def test_read_file_helper(workdir):
    data = os.urandom(5 * (1 << 20) + 3)
    (workdir / "whole").write_bytes(data)
    assert h3io.read_file(str(workdir / "whole"), block_size=1 << 20) == data
    chunks = []
    h3io.read_file(str(workdir / "whole"), block_size=3 << 20,
                   cb=lambda v, at: chunks.append((at, bytes(v))))
    assert [at for at, _ in chunks] == [0, 3 << 20]
    assert b"".join(c for _, c in chunks) == data
    assert h3io.extract_mount_point("/proc") is None


def test_io_depth_rules(cluster, workdir):
    mount = str(cluster.mount)
    fd = os.open(workdir / "depth", os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, 1 << 20)
    kvcfs.register_fd(fd)
    iov = kvcfs.Iov.create(mount, 1 << 20)
    try:
        # io_depth 4, no timeout: two entries wait for two more.
        ring = kvcfs.Ring(mount, 8, for_read=True, io_depth=4, timeout=0)
        for i in range(2):
            ring.prepare(iov, True, fd, i * 4096, 4096, iov_offset=i * 4096)
        ring.submit()
        assert ring.wait(min_results=1, timeout=0.3) == []
        for i in range(2, 4):
            ring.prepare(iov, True, fd, i * 4096, 4096, iov_offset=i * 4096)
        ring.submit()
        done = ring.wait(min_results=4, timeout=30)
        assert len(done) == 4 and all(c.result == 4096 for c in done)
        ring.close()
        # io_depth 4 with a 50 ms timeout: two entries run once it passes.
        ring = kvcfs.Ring(mount, 8, for_read=True, io_depth=4, timeout=50)
        for i in range(2):
            ring.prepare(iov, True, fd, i * 4096, 4096, iov_offset=i * 4096)
        ring.submit()
        done = ring.wait(min_results=2, timeout=30)
        assert len(done) == 2 and all(c.result == 4096 for c in done)
        ring.close()
        # io_depth -2: at most two per batch, everything completes.
        ring = kvcfs.Ring(mount, 8, for_read=True, io_depth=-2)
        for i in range(7):
            ring.prepare(iov, True, fd, i * 4096, 4096, iov_offset=i * 4096, userdata=i)
        ring.submit()
        got = []
        while len(got) < 7:
            got += ring.wait(min_results=1, timeout=30)
        assert sorted(c.userdata for c in got) == list(range(7))
        ring.close()
    finally:
        iov.close()
        kvcfs.deregister_fd(fd)
        os.close(fd)


WAITER = """
import os, sys, errno
sys.path.insert(0, sys.argv[3])
import kvcfs
fd = os.open(sys.argv[1], os.O_RDONLY)
kvcfs.register_fd(fd)
iov = kvcfs.Iov.create(sys.argv[2], 1 << 20)
iov.unlink()  # this process is killed: leave no name in /dev/shm
ring = kvcfs.Ring(sys.argv[2], 4, for_read=True)
print("ready", flush=True)
sys.stdin.readline()
ring.prepare(iov, True, fd, 0, 4096)
ring.submit()
print("waiting", flush=True)
try:
    ring.wait(min_results=1)
    print("completed")
except OSError as e:
    print(errno.errorcode[e.errno])
"""


def test_waiter_returns_when_kvc_fuse_dies(cluster, workdir):
    """A client waiting (no timeout) on I/O that kvc-fuse will never finish
    gets ECONNRESET once kvc-fuse is gone, not a hang."""
    path = workdir / "orphaned-io"
    path.write_bytes(b"x" * 8192)
    child = subprocess.Popen([sys.executable, "-c", WAITER, str(path), str(cluster.mount),
                              str(ROOT / "tools" / "python")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    fuse = cluster.pid("fuse")
    try:
        assert child.stdout.readline().strip() == "ready"
        os.kill(fuse, signal.SIGSTOP)  # nothing will be served from now on
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "waiting"
        os.kill(fuse, signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
        assert out.strip() == "ECONNRESET"
    finally:
        child.kill()
        os.kill(fuse, signal.SIGCONT) if os.path.exists(f"/proc/{fuse}") else None
        cluster.restart("fuse", "KILL")
    assert path.read_bytes() == b"x" * 8192


def test_registered_fd_keeps_working_after_close(cluster, workdir):
    """3FS: even if a registered fd is closed, its file is used for I/O
    until deregistration; kvc-fuse holds no file of its own mount."""
    path = workdir / "closed-after-register"
    data = os.urandom(1 << 20)
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    kvcfs.register_fd(fd)
    os.close(fd)
    iov = kvcfs.Iov.create(str(cluster.mount), 1 << 20)
    ring = kvcfs.Ring(str(cluster.mount), 4, for_read=True)
    try:
        ring.prepare(iov, True, fd, 0, 1 << 20)
        ring.submit()
        assert ring.wait(min_results=1)[0].result == 1 << 20
        assert bytes(iov.memoryview()) == data
    finally:
        kvcfs.deregister_fd(fd)
        ring.close()
        iov.close()
    assert wait_until(lambda: registrations(cluster)["files"] == "0")


def test_handles_from_before_a_kvc_fuse_restart_are_harmless(cluster, workdir):
    """After kvc-fuse restarts, this process registers again over a new
    connection; destroying an iov from before must not deregister the new
    one that got the same number."""
    path = workdir / "after-restart"
    data = os.urandom(1 << 20)
    path.write_bytes(data)
    old = kvcfs.Iov.create(str(cluster.mount), 1 << 20)
    cluster.restart("fuse", "KILL")
    fd = os.open(path, os.O_RDWR)
    kvcfs.register_fd(fd)
    new = kvcfs.Iov.create(str(cluster.mount), 1 << 20)
    ring = kvcfs.Ring(str(cluster.mount), 4, for_read=True)
    try:
        old.close()
        ring.prepare(new, True, fd, 0, 1 << 20)
        ring.submit()
        assert ring.wait(min_results=1)[0].result == 1 << 20
        assert bytes(new.memoryview()) == data
    finally:
        ring.close()
        new.close()
        kvcfs.deregister_fd(fd)
        os.close(fd)


MORE_THAN_ENOUGH = """
import os, sys
sys.path.insert(0, sys.argv[3])
import kvcfs
fd = os.open(sys.argv[1], os.O_RDONLY)
kvcfs.register_fd(fd)
iov = kvcfs.Iov.create(sys.argv[2], 1 << 20)
iov.unlink()  # killed if it hangs: leave no name in /dev/shm
ring = kvcfs.Ring(sys.argv[2], 8, for_read=True)
for i in range(3):
    ring.prepare(iov, True, fd, i * 4096, 4096, iov_offset=i * 4096, userdata=i)
ring.submit()
first = ring.wait(max_results=2, min_results=1)  # no timeout
rest = ring.wait(min_results=3 - len(first))
print(sorted(c.userdata for c in first + rest), len(first))
"""


def test_wait_returns_with_more_than_min_results(cluster, workdir):
    """Three completions posted at once, collected two at most and one at
    least: the wait returns what it took (it used to wait on for the one
    it had left in the ring, forever)."""
    path = workdir / "three"
    path.write_bytes(os.urandom(3 * 4096))
    out = run(sys.executable, "-c", MORE_THAN_ENOUGH, path, cluster.mount,
              ROOT / "tools" / "python", timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("]")[0] == "[0, 1, 2"


def test_ring_holds_the_entries_asked_for(cluster, workdir):
    """As in 3FS, a ring of 5 entries takes 5 I/Os and refuses the 6th
    (its memory holds 8 slots)."""
    fd = os.open(workdir / "five", os.O_RDWR | os.O_CREAT)
    kvcfs.register_fd(fd)
    iov = kvcfs.Iov.create(str(cluster.mount), 1 << 20)
    ring = kvcfs.Ring(str(cluster.mount), 5, for_read=True)
    try:
        assert ring.entries == 5
        for i in range(5):
            ring.prepare(iov, True, fd, 0, 4096, iov_offset=i * 4096)
        with pytest.raises(OSError) as e:
            ring.prepare(iov, True, fd, 0, 4096)
        assert e.value.errno == errno.EAGAIN
        ring.submit()
        assert len(ring.wait(min_results=5)) == 5
    finally:
        ring.close()
        iov.close()
        kvcfs.deregister_fd(fd)
        os.close(fd)


def test_an_fd_number_registers_once(cluster, workdir):
    """As in 3FS: a registered number is refused (EINVAL) until it is
    deregistered, also after the fd was closed and the number reused."""
    path = workdir / "once"
    path.write_bytes(b"x" * 4096)
    fd = os.open(path, os.O_RDONLY)
    kvcfs.register_fd(fd)
    with pytest.raises(OSError) as e:
        kvcfs.register_fd(fd)
    assert e.value.errno == errno.EINVAL
    os.close(fd)
    again = os.open(path, os.O_RDONLY)  # the lowest free number: the same
    try:
        assert again == fd
        with pytest.raises(OSError) as e:
            kvcfs.register_fd(again)
        assert e.value.errno == errno.EINVAL
        kvcfs.deregister_fd(fd)
        kvcfs.register_fd(again)
        kvcfs.deregister_fd(again)
    finally:
        os.close(again)


@pytest.fixture(scope="module")
def served(cluster):
    """The cluster through a kvc-fuse with `local_reads = off`: reads go
    to the servers, so a frozen one holds its reads up."""
    from conftest import PORT_BASE, server_placement
    with server_placement(cluster, PORT_BASE + 33) as c:
        yield c


def test_a_ring_read_completes_without_waiting_for_its_batch(served, workdir):
    """Two reads submitted together, one of a chunk on a frozen storage
    server: the other completes as soon as its bytes land, not with its
    batch's slowest request (fuse/ring_batch.c's entry_landed), and the
    frozen one completes once its server runs again. The frozen server is
    the later of the two in the cluster file: a kvc-fuse without receiving
    threads (under 4 cores) takes a wave's answers in server order."""
    from conftest import CHUNK, chunk_name, freeze
    cluster = served
    data = os.urandom(2 * CHUNK)
    path = served.mount / workdir.name / "two-chunks"
    path.write_bytes(data)
    inode = os.stat(path).st_ino

    def server_of(chunk):
        found = list(cluster.dir.glob(f"s*/t*/{chunk_name(inode, chunk)}"))
        assert len(found) == 1
        return found[0].relative_to(cluster.dir).parts[0]

    servers = [server_of(0), server_of(1)]
    assert servers[0] != servers[1]
    late = 0 if int(servers[0][1:]) > int(servers[1][1:]) else 1
    shm = shared_memory.SharedMemory(create=True, size=2 * CHUNK)
    iov = h3io.make_iovec(shm, cluster.mount)
    ior = h3io.make_ioring(cluster.mount, 8, for_read=True)
    fd = os.open(path, os.O_RDONLY)
    h3io.register_fd(fd)
    try:
        for c in (0, 1):  # both servers know the iov and have a connection
            ior.prepare(iov[c * CHUNK:(c + 1) * CHUNK], True, fd, c * CHUNK)
        assert [c.result for c in ior.submit().wait(min_results=2)] == [CHUNK, CHUNK]
        shm.buf[:] = bytes(2 * CHUNK)
        pid = cluster.pid(servers[late])
        freeze(pid)
        try:
            for c in (0, 1):
                ior.prepare(iov[c * CHUNK:(c + 1) * CHUNK], True, fd, c * CHUNK, userdata=c)
            first = ior.submit().wait(min_results=1, timeout=20)
            assert [(c.userdata, c.result) for c in first] == [(1 - late, CHUNK)]
            at = (1 - late) * CHUNK
            assert bytes(shm.buf[at:at + CHUNK]) == data[at:at + CHUNK]
            more = ior.wait(min_results=0, timeout=0.2)
            assert [(c.userdata, c.result) for c in more] == []  # still waiting on its server
        finally:
            os.kill(pid, signal.SIGCONT)
        rest = ior.wait(min_results=1, timeout=60)
        assert [c.userdata for c in rest] == [late]
        # back in time, or past the storage client's timeout: never wrong bytes
        assert rest[0].result in (CHUNK, -errno.EIO)
        if rest[0].result == CHUNK:
            assert bytes(shm.buf[late * CHUNK:(late + 1) * CHUNK]) == \
                data[late * CHUNK:(late + 1) * CHUNK]
    finally:
        h3io.deregister_fd(fd)
        os.close(fd)
        ior.close()
        iov.close()
        shm.close()
        shm.unlink()
