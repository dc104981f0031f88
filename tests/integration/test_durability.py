"""Nothing acknowledged is lost: a client kvc-meta gave up hears of it
across restarts; fsync reaches kvc-meta; kill -9 under load loses nothing
committed; a shrinking truncate racing writers never brings old bytes
back."""
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import urllib.error
import urllib.request

import pytest

from conftest import (BUILD, CHUNK, PORT_BASE, ROOT, Cluster, _drop_caches, chunk_files_of,
                      drop_second_mount, second_mount, wait_until)


def post(cluster, path, body):
    req = urllib.request.Request(cluster.http + path, data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, None


def confirm_keys(cluster, ns, keys):
    """Allocate and confirm keys on both ranks (world 2): True when every
    step was acknowledged."""
    batch = [[k, ""] for k in keys]
    for rank in (0, 1):
        status, body = post(cluster, f"/{rank}/reserve_and_allocate_page_indices",
                            {"keys": batch, "namespace": ns})
        if status != 200:
            return False
        confirm = [[k, p] for (k, _), (_, p) in zip(batch, body["indices"])]
        status, _ = post(cluster, f"/{rank}/confirm_write",
                         {"written_keys_to_confirm": confirm, "namespace": ns})
        if status != 204:
            return False
    return True


def existing(cluster, ns, keys):
    found = []
    for i in range(0, len(keys), 500):
        _, body = post(cluster, "/0/exists", {"keys": keys[i:i + 500], "namespace": ns})
        found += [k for k, there in zip(keys[i:i + 500], body["exists"]) if there]
    return found


def fsck_problems(cluster):
    out = cluster.admin("fsck", check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


# A reader in a process of its own: this test's process must hold no file
# of a frozen kvc-fuse, or the children it starts (kvc-cluster, kvc-admin)
# would close that file when they exec and wait on the frozen daemon.
READER = textwrap.dedent("""
    import mmap, os, sys
    import kvcfs
    path, mount, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    kvcfs.register_fd(fd)
    iov = kvcfs.Iov.create(mount, size)
    iov.unlink()  # registered: the name is not needed any more
    ring = kvcfs.Ring(mount, 4, for_read=True)
    ring.prepare(iov, True, fd, 0, size)
    ring.submit()
    assert ring.wait(min_results=1)[0].result == size
    print("ready", flush=True)
    sys.stdin.readline()
    # Through the ring: kvc-fuse's data path, no size check by the kernel.
    ring.prepare(iov, True, fd, 0, size)
    ring.submit()
    result = ring.wait(min_results=1)[0].result
    if result < 0:
        print("error", -result, flush=True)
    else:
        print("read", result, flush=True)
""")


def test_dropped_client_hears_of_it_after_a_meta_restart(cluster, workdir):
    """A kvc-fuse frozen past the client timeout loses its open file (the
    file was removed meanwhile and its chunks reclaimed); kvc-meta restarts
    before the client wakes up. Awake, its ring read fails with ESTALE: it
    never reads the holes where the bytes were, although the restart
    emptied kvc-meta's memory."""
    proc, mount2 = second_mount(cluster)
    relative = workdir.relative_to(cluster.mount)
    reader = None
    try:
        data = os.urandom(8 * CHUNK)
        (workdir / "frozen").write_bytes(data)
        ino = os.stat(workdir / "frozen").st_ino
        assert chunk_files_of(cluster, ino)
        # Python loads a plain libkvc, also when the daemons are sanitized.
        client = os.environ.get("KVC_CLIENT_BUILD", str(BUILD))
        env = dict(os.environ, KVC_LIB=os.path.join(client, "libkvc.so"),
                   PYTHONPATH=str(ROOT / "tools" / "python"))
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, os.path.join(mount2, relative, "frozen"), mount2,
             str(len(data))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert reader.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGSTOP)
        try:
            os.unlink(workdir / "frozen")
            assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=30), \
                "kvc-meta gives the frozen client's file away"
            cluster.restart("meta", "KILL")
        finally:
            proc.send_signal(signal.SIGCONT)
        reader.stdin.write("go\n")
        reader.stdin.flush()
        answer = reader.stdout.readline().split()
        assert answer == ["error", str(errno.ESTALE)], f"read after the drop: {answer}"
        reader.wait(timeout=30)
        # The client rejoined: it works again.
        (workdir / "after").write_bytes(b"x" * 4096)
        assert open(os.path.join(mount2, relative, "after"), "rb").read() == b"x" * 4096
    finally:
        if reader and reader.poll() is None:
            reader.kill()
        drop_second_mount(proc, mount2)


class QuietCluster(Cluster):
    """A cluster whose kvc-meta takes no periodic checkpoint: only fsync,
    fsyncdir, 64 MiB of growth, its start and a clean stop do, so a
    simulated machine crash shows exactly what they covered."""

    def write_config(self):
        super().write_config()
        text = self.conf.read_text().replace("[meta]\n", "[meta]\nsync_interval_ms = 600000\n", 1)
        self.conf.write_text(text)


def own_cluster(kind):
    """A cluster of this test's own (ports PORT_BASE + 40 on), so what it
    does to its daemons stays out of the session's cluster."""
    base = tempfile.mkdtemp(prefix="kvc-it-own-")
    mount = tempfile.mkdtemp(prefix="kvc-mnt-own-")
    c = kind(base, mount, PORT_BASE + 40)
    c.stop()
    c.start()
    try:
        yield c
    finally:
        c.stop()
        shutil.rmtree(base, ignore_errors=True)
        try:
            os.rmdir(mount)
        except OSError:
            pass


@pytest.fixture
def quiet_cluster():
    yield from own_cluster(QuietCluster)


@pytest.fixture
def race_cluster():
    yield from own_cluster(Cluster)


def machine_crash_of_meta(cluster):
    """kvc-meta as a machine crash leaves it: killed, then started "after a
    reboot" (another boot id), so it goes back to its last checkpoint as it
    would with the page cache gone."""
    subprocess.run(["kill", "-KILL", str(cluster.pid("meta"))], check=True)
    env = dict(os.environ, KVC_BOOT_ID="kvc-test-rebooted")
    subprocess.run([str(ROOT / "tools" / "kvc-cluster"), "restart-daemon", "meta", "--dir",
                    str(cluster.dir), "--bin", str(BUILD), "--signal", "KILL"],
                   check=True, capture_output=True, timeout=120, env=env)
    assert "back to it" in (cluster.dir / "logs" / "meta.log").read_text(), \
        "kvc-meta went back to its checkpoint"


def stat_size(cluster, path):
    """The size kvc-meta has for path (None: no such file), asked of
    kvc-meta itself, not of the kernel's caches."""
    out = cluster.admin("--json", "stat", path, check=False)
    return json.loads(out.stdout)["size"] if out.returncode == 0 else None


def test_fsync_and_fsyncdir_survive_a_machine_crash(quiet_cluster):
    """fsync returns once the file's bytes, its size and its name are
    durable on the storage servers and in kvc-meta (both stores: the page
    pools' changes acknowledged before it too); fsync of a directory makes
    its entries durable. What neither covered is what a machine crash
    loses, and the stores come back consistent."""
    c = quiet_cluster
    for rank in (0, 1):
        assert post(c, f"/{rank}/initialize", {"num_pages": 256, "namespace": "d"})[0] == 204
    before = [f"before-{i}" for i in range(16)]
    assert confirm_keys(c, "d", before)
    (c.mount / "dir").mkdir()
    (c.mount / "dir" / "named").write_bytes(b"")
    fd = os.open(c.mount / "dir", os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
    data = os.urandom(3 * CHUNK + 12345)
    with open(c.mount / "dir" / "synced", "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    # Acknowledged after the last sync: a machine crash may take these.
    after = [f"after-{i}" for i in range(16)]
    assert confirm_keys(c, "d", after)
    (c.mount / "dir" / "unsynced").write_bytes(b"x" * 4096)
    assert stat_size(c, "/dir/unsynced") == 4096

    machine_crash_of_meta(c)
    assert wait_until(lambda: stat_size(c, "/dir/synced") is not None, timeout=30)
    assert stat_size(c, "/dir/synced") == len(data), "fsync made the size durable"
    assert (c.mount / "dir" / "synced").read_bytes() == data
    assert stat_size(c, "/dir/named") == 0, "fsyncdir made the entry durable"
    assert stat_size(c, "/dir/unsynced") is None, "the crash took what nothing synced"
    assert sorted(existing(c, "d", before)) == sorted(before), "acknowledged before the sync"
    assert existing(c, "d", after) == []
    assert fsck_problems(c).startswith("page pools: 0 problem")


def test_a_file_made_after_a_crash_never_reads_a_lost_file_s_bytes(quiet_cluster):
    """A machine crash takes kvc-meta back to its last checkpoint, and with
    it the next inode number; the chunks of files made after that
    checkpoint stay on the storage servers. A new file must not get a lost
    file's number and read its bytes where it has holes (it did: files
    made by another client after the crash got the lost files' numbers).
    Files made by kvc-meta (O_EXCL: kvc-fuse makes truncating creates
    itself, with numbers granted durably before use)."""
    c = quiet_cluster
    (c.mount / "d").mkdir()
    lost = set()
    for i in range(100):
        path = c.mount / "d" / f"lost-{i}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"\xab" * 4096)  # nothing syncs them
        os.close(fd)
        lost.add(os.stat(path).st_ino)
    assert wait_until(lambda: stat_size(c, "/d/lost-99") == 4096, timeout=30)
    machine_crash_of_meta(c)
    assert stat_size(c, "/d/lost-99") is None, "the crash took the unsynced files"
    proc, mount2 = second_mount(c)  # a client that never saw the lost files
    try:
        os.makedirs(os.path.join(mount2, "e"), exist_ok=True)
        for i in range(100):
            new = os.path.join(mount2, "e", f"new-{i}")
            with open(new, "wb") as f:  # numbers from a grant made after the crash
                f.truncate(4096)
            assert os.stat(new).st_ino not in lost, f"new-{i}: a lost file's inode number"
            assert open(new, "rb").read() == bytes(4096), "a hole reads zeros"
    finally:
        drop_second_mount(proc, mount2)


def test_fsynced_small_files_survive_a_machine_crash_of_the_storage_servers(quiet_cluster):
    """Small files live in the storage targets' chunk index (inline chunks),
    which is under checkpoints: an fsync takes one. The storage servers
    killed and started "after a reboot" (another boot id: each index goes
    back to its last checkpoint) still hold every fsynced byte, and take
    new writes."""
    c = quiet_cluster
    synced = {f"s{i}": os.urandom(4096 + 977 * i) for i in range(24)}
    (c.mount / "small").mkdir()
    for name, data in synced.items():
        with open(c.mount / "small" / name, "wb") as f:
            f.write(data)
            f.flush()  # out of Python's buffer (st_blksize, 1 MiB here) first
            os.fsync(f.fileno())
    for i in range(24):  # after the last fsync: a crash may take these
        (c.mount / "small" / f"u{i}").write_bytes(os.urandom(8192))
    env = dict(os.environ, KVC_BOOT_ID="kvc-test-rebooted")
    for server in ("s1", "s2", "s3"):
        subprocess.run(["kill", "-KILL", str(c.pid(server))], check=True)
        subprocess.run([str(ROOT / "tools" / "kvc-cluster"), "restart-daemon", server, "--dir",
                        str(c.dir), "--bin", str(BUILD), "--signal", "KILL"],
                       check=True, capture_output=True, timeout=120, env=env)
    _drop_caches()  # read from the servers, not the writer's page cache
    bad = [name for name, data in synced.items()
           if (c.mount / "small" / name).read_bytes() != data]
    logs = "".join((c.dir / "logs" / f"s{i}.log").read_text() for i in (1, 2, 3))
    assert bad == [], (bad, [l for l in logs.splitlines() if "back to it" in l])
    (c.mount / "small" / "after").write_bytes(b"a" * 5000)
    assert (c.mount / "small" / "after").read_bytes() == b"a" * 5000


def test_kill9_under_load_loses_nothing_acknowledged(cluster, workdir):
    """kill -9 of kvc-meta while files are created and pool keys confirmed:
    everything acknowledged before is there after the restart, and the
    page accounting is clean."""
    for rank in (0, 1):
        assert post(cluster, f"/{rank}/initialize",
                    {"num_pages": 4096, "namespace": "load"})[0] == 204
    files, keys, stop = [], [], threading.Event()

    def file_writer(n):
        i = 0
        while not stop.is_set():
            path = workdir / f"w{n}-{i}"
            i += 1
            try:
                path.write_bytes(path.name.encode())
                files.append(path)
            except OSError:
                pass  # kvc-meta is down for a moment

    def key_writer(n):
        i = 0
        while not stop.is_set():
            batch = [f"k{n}-{i + j}" for j in range(8)]
            i += 8
            try:
                if confirm_keys(cluster, "load", batch):
                    keys.extend(batch)
            except OSError:
                pass

    threads = [threading.Thread(target=file_writer, args=(n,)) for n in range(2)]
    threads += [threading.Thread(target=key_writer, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    try:
        assert wait_until(lambda: len(files) >= 50 and len(keys) >= 200, timeout=60)
        cluster.restart("meta", "KILL")
        count = len(files)
        assert wait_until(lambda: len(files) > count + 10, timeout=60), "work goes on"
    finally:
        stop.set()
        for t in threads:
            t.join()
    for path in files:
        assert path.read_bytes() == path.name.encode(), f"{path.name} was acknowledged"
    assert sorted(existing(cluster, "load", keys)) == sorted(keys)
    assert fsck_problems(cluster).startswith("page pools: 0 problem")



def test_writer_with_an_old_size_extends_the_file_after_a_shrink(cluster, workdir):
    """Another kvc-fuse still has the file's old, larger size when this one
    shrinks it; its write past the new end is a write after the truncate:
    the file grows to cover it, and nothing old shows up in between."""
    proc, mount2 = second_mount(cluster)
    try:
        path = workdir / "shrunk"
        path.write_bytes(b"O" * (4 * CHUNK))
        relative = path.relative_to(cluster.mount)
        fd = os.open(os.path.join(mount2, relative), os.O_RDWR)
        try:
            os.truncate(path, CHUNK)  # here: size 1 MiB, chunks beyond cut
            assert stat_size(cluster, "/" + str(relative)) == CHUNK
            assert os.pwrite(fd, b"N" * 4096, 2 * CHUNK) == 4096  # there: 4 MiB known
        finally:
            os.close(fd)
        assert stat_size(cluster, "/" + str(relative)) == 2 * CHUNK + 4096, \
            "the write after the shrink extends the file"
        os.truncate(path, 4 * CHUNK)
        with open(path, "rb") as f:
            data = f.read()
        assert data[:CHUNK] == b"O" * CHUNK
        assert data[CHUNK:2 * CHUNK] == bytes(CHUNK), "no old byte comes back"
        assert data[2 * CHUNK:2 * CHUNK + 4096] == b"N" * 4096
        assert data[2 * CHUNK + 4096:] == bytes(2 * CHUNK - 4096)
    finally:
        drop_second_mount(proc, mount2)


def test_writes_racing_shrinking_truncates_never_bring_old_bytes_back(race_cluster):
    """Writers on a second kvc-fuse, which never learns of the shrinks,
    write new bytes anywhere in the file while this one shrinks it again
    and again (and writes below every cut itself). Afterwards: the old
    bytes are gone wherever any shrink cut them, and nothing lies beyond
    the final size (growing the file shows zeros). It needs the chunk
    store's one lock order (chunk lock before LMDB's writer): without it a
    write and a cut of one chunk deadlock kvc-storage, and the truncates
    of this test's own cluster fail with EIO."""
    import random
    cluster = race_cluster
    proc, mount2 = second_mount(cluster)
    try:
        size = 4 * CHUNK
        path = cluster.mount / "raced"
        path.write_bytes(b"O" * size)
        relative = path.relative_to(cluster.mount)
        fds = [os.open(path, os.O_RDWR), os.open(os.path.join(mount2, relative), os.O_RDWR)]
        stop = threading.Event()
        cuts, written = [], [0]

        def writer(fd, seed):
            rng = random.Random(seed)
            end = size if fd == fds[1] else CHUNK // 2  # here: below every cut
            while not stop.is_set():
                offset = rng.randrange(0, end - 65536) & ~4095
                try:
                    os.pwrite(fd, b"N" * rng.choice((4096, 65536)), offset)
                    written[0] += 1
                except OSError:
                    pass

        def shrinker():
            rng = random.Random(7)
            for _ in range(40):
                cut = rng.randrange(CHUNK // 2, size) & ~4095
                os.truncate(path, cut)
                cuts.append(cut)

        threads = [threading.Thread(target=writer, args=(fd, i)) for i, fd in enumerate(fds * 2)]
        for t in threads:
            t.start()
        try:
            shrinker()
            after = written[0]  # and writes after the last cut too
            assert wait_until(lambda: written[0] >= after + 64, timeout=60)
        finally:
            stop.set()
            for t in threads:
                t.join()
            for fd in fds:
                os.close(fd)
        final = stat_size(cluster, "/" + str(relative))
        os.truncate(path, size + CHUNK)
        with open(path, "rb") as f:
            data = f.read()
        assert len(data) == size + CHUNK
        old = data.find(b"O", min(cuts))
        assert old < 0, f"an old byte at {old}, beyond the cut to {min(cuts)}"
        beyond = data[final:]
        assert beyond == bytes(len(beyond)), \
            f"bytes beyond the final size {final} show up: first at {final + beyond.find(b'N')}"
    finally:
        drop_second_mount(proc, mount2)
