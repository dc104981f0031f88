"""A full disk must not wedge kvcfs: a small embedded cluster whose whole
directory (kvc-meta's LMDB, the three targets, logs) is a 96 MiB tmpfs is
filled to ENOSPC through the mount (dd), through USRBIO rings and through a
page pool bound to its file; then rm, truncate and pool key deletes
succeed, the collector gives the space back (df shows it) and writes work
again. kvc-meta refuses new names below its own reserve but still deletes.
With both reserves set to 0 the old wedge comes back: rm of the big file
fails with ENOSPC."""
import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request

import pytest

from conftest import BUILD, LIBKVC, PORT_BASE, ROOT, Cluster, wait_until

MIB = 1 << 20
VOLUME = 96 * MIB
# What "auto" gives a 96 MiB volume (src/core/reserve.c): 2% is under the
# 8 MiB floor; kvc-meta keeps half.
DATA_RESERVE = 8 * MIB
META_RESERVE = 4 * MIB

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")


class TmpfsCluster(Cluster):
    """A Cluster whose directory is a tmpfs of `size` bytes; `top` goes
    before the first section of the cluster file."""

    def __init__(self, port_base, http_port, top="", meta_extra=""):
        self.base = tempfile.mkdtemp(prefix="kvc-full-")
        self.mountpoint = tempfile.mkdtemp(prefix="kvc-full-mnt-")
        super().__init__(self.base, self.mountpoint, port_base, meta_extra=meta_extra,
                         http=f"127.0.0.1:{http_port}")
        self.top = top

    def write_config(self):
        super().write_config()
        self.conf.write_text(self.top + self.conf.read_text())

    def df(self):
        """(free, available) bytes of the mount, as df sees them."""
        st = os.statvfs(self.mount)
        return st.f_bfree * st.f_frsize, st.f_bavail * st.f_frsize

    def status(self):
        return json.loads(self.admin("--json", "status").stdout)

    def targets(self):
        return [t for s in self.status()["storage"] for t in s["targets"]]


@contextlib.contextmanager
def tmpfs_cluster(port_base, http_port, top="", meta_extra=""):
    c = TmpfsCluster(port_base, http_port, top, meta_extra)
    mounted = False
    try:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={VOLUME},mode=0700", "tmpfs",
                        c.base], check=True)
        mounted = True
        c.start()
        yield c
    finally:
        c.stop()
        if mounted:
            out = subprocess.run(["umount", c.base], capture_output=True, text=True)
            if out.returncode != 0:  # something still holds it: detach it anyway
                subprocess.run(["umount", "-l", c.base], check=True)
        shutil.rmtree(c.base, ignore_errors=True)
        for d in (c.mountpoint,):
            with contextlib.suppress(OSError):
                os.rmdir(d)


@pytest.fixture(scope="module")
def full():
    with tmpfs_cluster(PORT_BASE + 400, PORT_BASE + 8670) as c:
        yield c


@pytest.fixture
def baseline(full):
    """The mount's available bytes before a test; every test gives its
    space back before it ends (and checks that it did)."""
    return full.df()[1]


def dd(path, count=None):
    args = ["dd", "if=/dev/urandom", f"of={path}", "bs=1M"]
    if count:
        args.append(f"count={count}")
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def space_back(c, baseline):
    """The collector reclaimed the chunks: almost all of the space is back and
    nothing is left to reclaim (a chunk freed later would lift a target out of
    refusing while the next test fills the volume). Almost: a target's index
    grows while a checkpoint holds its pages from reuse, and LMDB files do
    not shrink (4 MiB seen over a fill)."""
    return wait_until(lambda: c.df()[1] >= baseline - 6 * MIB
                      and c.status()["meta"]["reclaim_pending"] == 0, timeout=60)


def assert_full(c, refused_before=0):
    """Data stopped at the reserve: df shows (almost) nothing available, the
    real free space is the reserve, some target is refusing writes; kvc-meta
    still has room for names."""
    free, avail = c.df()
    assert avail < 2 * MIB, (free, avail)
    assert free >= META_RESERVE, "data left the metadata reserve alone"
    targets = c.targets()
    assert any(t["refusing"] for t in targets), targets
    assert sum(t["refused_writes"] for t in targets) > refused_before
    assert not c.status()["meta"]["refusing"]


RING_FILL = """
import json, os, sys
from multiprocessing import shared_memory
from hf3fs_fuse.io import (deregister_fd, extract_mount_point, make_ioring, make_iovec,
                           register_fd)

path, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
page, entries = 1 << 20, 8
fd = os.open(path, os.O_RDWR | os.O_CREAT)
register_fd(fd)
mount = extract_mount_point(path)
shm = shared_memory.SharedMemory(size=page * entries, create=True)
iov = make_iovec(shm, mount)
shm.unlink()
ior = make_ioring(mount, entries, for_read=False, timeout=1)
shm.buf[:] = os.urandom(page * entries)
written, failed = [], []
p = first
# Batches of 8 pages until the first batch with a failure (or count pages).
while p < first + count and not failed:
    batch = range(p, min(p + entries, first + count))
    for i, q in enumerate(batch):
        ior.prepare(iov[i * page:(i + 1) * page], False, fd, q * page, userdata=q)
    for r in ior.submit().wait(min_results=len(batch)):
        (written if r.result == page else failed).append((r.userdata, r.result))
    p += len(batch)
ior.close()
iov.close()
shm.close()
deregister_fd(fd)
os.close(fd)
print(json.dumps({"written": sorted(q for q, _ in written),
                  "errors": sorted({res for _, res in failed})}))
"""


def ring_fill(path, first=0, count=4096):
    """Write 1 MiB pages first.. through a ring of 8 until one fails.
    Returns (pages written, the distinct failures as -errno)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools" / "python"), KVC_LIB=str(LIBKVC))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(RING_FILL), str(path),
                          str(first), str(count)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["written"], result["errors"]


def post(c, path, body):
    req = urllib.request.Request(c.http + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def keys_of(c, ns):
    return [k["key"] for k in json.loads(c.admin("--json", "key", "ls", ns).stdout)]


def test_df_and_status_show_the_reserve(full):
    free, avail = full.df()
    # All three targets share the tmpfs: it counts once, with its reserve.
    assert free - avail == DATA_RESERVE, (free, avail)
    assert VOLUME - DATA_RESERVE - 4 * MIB < avail < VOLUME - DATA_RESERVE
    status = full.status()
    meta = status["meta"]
    assert meta["reserve_bytes"] == META_RESERVE
    assert meta["volume_total_bytes"] == VOLUME and not meta["refusing"]
    assert meta["volume_free_bytes"] >= avail
    for t in full.targets():
        assert t["reserve_bytes"] == DATA_RESERVE and t["total_bytes"] == VOLUME
        assert not t["refusing"] and t["refused_writes"] == 0
    text = full.admin("status").stdout
    assert "8.0 MiB kept back for metadata" in text and "4.0 MiB kept back" in text, text
    assert "FULL" not in text


def test_fuse_fill_then_rm_frees_and_writes_work_again(full, baseline):
    big = full.mount / "big"
    out = dd(big)
    assert out.returncode != 0 and "No space left on device" in out.stderr, out.stderr
    assert big.stat().st_size > 60 * MIB
    assert_full(full)
    assert "FULL: refusing writes" in full.admin("status").stdout
    # Reads still work on a full disk, and so does creating a name: data
    # stopped before kvc-meta's reserve.
    with open(big, "rb") as f:
        assert len(f.read(MIB)) == MIB
    (full.mount / "small-name").touch()
    # A punch that is not chunk-aligned: its edges are zeros written to
    # the storage servers, which take no space and pass the reserve.
    free = full.df()[0]
    out = subprocess.run(["fallocate", "-p", "-o", str(MIB // 2), "-l", str(2 * MIB),
                          str(big)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with open(big, "rb") as f:
        assert f.read(3 * MIB)[MIB // 2:5 * MIB // 2] == bytes(2 * MIB)
    # The punched 2 MiB came back; the daemons' logs and indexes share the
    # volume, so a few pages may have gone elsewhere meanwhile (under the
    # sanitizers, the logs grow faster).
    try:
        assert full.df()[0] >= free + 2 * MIB - 256 * 1024
    finally:
        # whatever happened, the volume is not left full for the next test
        subprocess.run(["rm", "-f", str(big)], capture_output=True, text=True)
    assert not big.exists()
    assert space_back(full, baseline), (full.df(), baseline)
    assert not any(t["refusing"] for t in full.targets())
    out = dd(full.mount / "again", count=16)
    assert out.returncode == 0, out.stderr
    assert (full.mount / "again").stat().st_size == 16 * MIB
    os.unlink(full.mount / "again")
    os.unlink(full.mount / "small-name")
    assert space_back(full, baseline)


def test_ring_fill_then_truncate_frees(full, baseline):
    refused = sum(t["refused_writes"] for t in full.targets())
    path = full.mount / "ring-file"
    written, errors = ring_fill(path)
    assert errors == [-errno.ENOSPC], errors
    assert len(written) > 60, "the volume took most of 96 MiB first"
    assert_full(full, refused)

    out = subprocess.run(["truncate", "-s", "0", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert path.stat().st_size == 0
    assert space_back(full, baseline), (full.df(), baseline)
    written, errors = ring_fill(path, 0, 16)
    assert errors == [] and written == list(range(16))
    os.unlink(path)
    assert space_back(full, baseline)


def test_bound_pool_fill_then_key_deletes_free(full, baseline):
    """A connector's pool file, bound to its pool: pages are allocated and
    written until the disk is full; deleting the keys (SGLang's
    delete_keys, kvc-admin key delete) frees their pages, the collector
    punches them out of the file, and the pages take writes again."""
    refused = sum(t["refused_writes"] for t in full.targets())
    pages = 128  # more than the volume holds
    pool_file = full.mount / "rank-0"
    with open(pool_file, "wb") as f:
        f.truncate(pages * MIB)
    for rank in (0, 1):
        assert post(full, f"/{rank}/initialize", {"num_pages": pages, "namespace": "full"})[0] \
            == 204
    full.admin("pool", "bind", "full", "0", "/rank-0", "1M")
    keys = [[f"k{i}", ""] for i in range(pages)]
    status, body = post(full, "/0/reserve_and_allocate_page_indices",
                        {"keys": keys, "namespace": "full"})
    assert status == 200
    page_of = {k: p for (k, _), (_, p) in zip(keys, body["indices"])}
    assert sorted(page_of.values()) == list(range(pages))
    key_of = {p: k for k, p in page_of.items()}

    written, errors = ring_fill(pool_file, 0, pages)
    assert errors == [-errno.ENOSPC], errors
    assert 60 < len(written) < pages
    assert_full(full, refused)
    done = [[key_of[p], p] for p in written]
    assert post(full, "/0/confirm_write", {"written_keys_to_confirm": done,
                                           "pages_to_release": [], "namespace": "full"})[0] \
        == 204

    # Half the keys through SGLang's route, the rest with kvc-admin.
    half = len(done) // 2
    assert post(full, "/0/delete_keys", {"keys": [k for k, _ in done[:half]],
                                         "namespace": "full"})[0] == 204
    deleted = json.loads(full.admin("--json", "key", "delete", "full",
                                    *[k for k, _ in done[half:]]).stdout)
    assert deleted["deleted"] == len(done) - half, deleted
    assert space_back(full, baseline), (full.df(), baseline)
    assert wait_until(lambda: json.loads(full.admin("--json", "pool", "show", "full", "0")
                                         .stdout)["punch_pending"] == 0, timeout=30)
    assert pool_file.stat().st_size == pages * MIB
    # The freed pages are handed out again and take writes.
    status, body = post(full, "/0/reserve_and_allocate_page_indices",
                        {"keys": [["again", ""]], "namespace": "full"})
    assert status == 200 and body["indices"][0][1] in written
    written_again, errors = ring_fill(pool_file, body["indices"][0][1], 1)
    assert errors == [] and len(written_again) == 1
    full.admin("pool", "unbind", "full", "0")
    assert post(full, "/0/clear", {"namespace": "full"})[0] == 204
    os.unlink(pool_file)
    assert space_back(full, baseline)


def test_kvc_meta_refuses_new_names_below_its_reserve_but_deletes(full, baseline):
    """Another writer of the volume (here a file next to the cluster's
    data) takes it below kvc-meta's reserve: new names, links, xattrs,
    pools and pages get ENOSPC (HTTP 507); rm, rmdir, rename, truncate,
    removing xattrs and deleting keys work."""
    d = full.mount / "names"
    d.mkdir()
    keep = d / "keep"
    keep.write_bytes(os.urandom(2 * MIB))
    os.setxattr(keep, "user.tag", b"x")
    (d / "sub").mkdir()
    assert post(full, "/0/initialize", {"num_pages": 8, "namespace": "held"})[0] == 204
    assert post(full, "/1/initialize", {"num_pages": 8, "namespace": "held"})[0] == 204
    assert post(full, "/0/reserve_and_allocate_page_indices",
                {"keys": [["held", ""]], "namespace": "held"})[0] == 200
    assert keys_of(full, "held") == ["held"]
    filler = full.dir / "filler"
    free = os.statvfs(full.dir).f_bavail * os.statvfs(full.dir).f_frsize
    with open(filler, "wb") as f:  # leave 1 MiB: under the 4 MiB reserve
        f.write(bytes(free - MIB))
    try:
        assert wait_until(lambda: full.status()["meta"]["refusing"], timeout=10)
        for make in (lambda: (d / "new").touch(), lambda: (d / "newdir").mkdir(),
                     lambda: os.symlink("keep", d / "ln"), lambda: os.link(keep, d / "hard"),
                     lambda: os.setxattr(keep, "user.more", b"y"), lambda: os.mkfifo(d / "ff")):
            with pytest.raises(OSError) as e:
                make()
            assert e.value.errno == errno.ENOSPC
        # The connectors' HTTP routes: no new pool or page, but deletes.
        assert post(full, "/0/initialize", {"num_pages": 8, "namespace": "late"})[0] == 507
        assert post(full, "/0/reserve_and_allocate_page_indices",
                    {"keys": [["late", ""]], "namespace": "held"})[0] == 507
        assert post(full, "/0/delete_keys", {"keys": ["held"], "namespace": "held"})[0] == 204
        assert keys_of(full, "held") == []
        assert full.status()["meta"]["refused"] >= 8
        assert "FULL: refusing new names" in full.admin("status").stdout
        os.removexattr(keep, "user.tag")
        os.rename(keep, d / "kept")
        os.truncate(d / "kept", MIB)
        os.unlink(d / "kept")
        os.rmdir(d / "sub")
    finally:
        os.unlink(filler)
    assert wait_until(lambda: not full.status()["meta"]["refusing"], timeout=10)
    (d / "new").touch()
    assert post(full, "/0/initialize", {"num_pages": 8, "namespace": "late"})[0] == 204
    for ns in ("late", "held"):
        assert post(full, "/0/clear", {"namespace": ns})[0] == 204
    shutil.rmtree(d)
    assert space_back(full, baseline)


def test_without_the_reserve_a_full_disk_wedges():
    """The failure the reserve exists for: with both reserves at 0, data
    fills the volume to the last block and then kvc-meta cannot commit
    the very unlink that would free it."""
    with tmpfs_cluster(PORT_BASE + 500, PORT_BASE + 8680, top="storage_reserve_mb = 0\n",
                       meta_extra="reserve_mb = 0\n") as c:
        free, avail = c.df()
        assert free == avail, "no reserve: all of it is available"
        out = dd(c.mount / "big")
        assert out.returncode != 0 and "No space left on device" in out.stderr, out.stderr
        assert c.df()[0] < MIB
        fails = 0
        for _ in range(3):
            out = subprocess.run(["rm", "-f", str(c.mount / "big")], capture_output=True,
                                 text=True)
            fails += out.returncode != 0 and "No space left on device" in out.stderr
        assert fails == 3, "rm fails, again and again"
        assert (c.mount / "big").exists()


def test_a_get_beside_a_put_that_meets_a_full_disk_reads_its_key(full, baseline):
    """One ring submission with a get of a key that exists and a put whose
    writes fail (-ENOSPC): the get completes with its size and bytes. A
    worker ran a batch's gets and then its puts through the same array of
    storage ios, and took each key's result from its slots after both
    passes: the get read the put's failure."""
    sys.path.insert(0, str(ROOT / "tools" / "python"))
    os.environ.setdefault("KVC_LIB", str(LIBKVC))
    import kvcfs
    (full.mount / "keys").mkdir()
    keys = kvcfs.KeyDir(full.mount / "keys")
    ring = kvcfs.Ring(str(full.mount), 8, for_read=False)
    iov = kvcfs.Iov.create(str(full.mount), 4 * MIB)
    iov.unlink()
    big = full.mount / "big"
    try:
        data = os.urandom(2 * MIB)
        iov.memoryview()[0:2 * MIB] = data
        assert ring.put_keys(keys, [("there", [(iov, 0, 2 * MIB)])]).wait() == [2 * MIB]
        out = dd(big)
        assert out.returncode != 0 and "No space left on device" in out.stderr, out.stderr
        assert_full(full)
        iov.memoryview()[2 * MIB:4 * MIB] = bytes(2 * MIB)
        ring.prepare_key(kvcfs.KEY_GET, keys, "there", [(iov, 2 * MIB, 2 * MIB)],
                         userdata="get")
        ring.prepare_key(kvcfs.KEY_PUT, keys, "new", [(iov, 0, 2 * MIB)], userdata="put")
        ring.submit()
        results = {c.userdata: c.result for c in ring.wait(min_results=2, timeout=60)}
        assert results["put"] < 0, results
        assert results["get"] == 2 * MIB, results
        assert bytes(iov.memoryview()[2 * MIB:4 * MIB]) == data
    finally:
        subprocess.run(["rm", "-rf", str(big), str(full.mount / "keys")], capture_output=True)
        ring.close()
        iov.close()
        keys.close()
    assert space_back(full, baseline), (full.df(), baseline)
