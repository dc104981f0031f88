"""3FS's USRBIO API on kvcfs, exactly as its users call it: the call
sequences of vLLM's and SGLang's hf3fs clients, of 3FS's own demo and
read_file tests, and of 3FS's fio engine, through hf3fs_fuse.io /
hf3fs_py_usrbio (Python) and hf3fs_usrbio.h (C). Python runs in fresh
interpreters, so what an import does or does not bring in is really tested.
Nothing may stay behind in /dev/shm."""
import os
import subprocess
import sys
import textwrap

from conftest import BUILD, LIBKVC, ROOT
from test_fio import engine, fio  # noqa: F401 (fixtures)

TOOLS = BUILD / "tests" / "usrbio"
SHM = "/dev/shm"


def python(script, *args, timeout=300):
    """Run script in a fresh interpreter with kvcfs's Python packages."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools" / "python"),
               KVC_LIB=str(LIBKVC))
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                         capture_output=True, text=True, timeout=timeout, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def program(*args, timeout=300):
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True,
                         timeout=timeout)
    assert out.returncode == 0 and "not ok" not in out.stdout, out.stdout + out.stderr
    return out.stdout


# Shared by the scripts below: SharedMemory that records the names it
# made, to check /dev/shm kept none of them.
RECORD_SHM = """
import multiprocessing, os
import hf3fs_fuse.io as h3io
created = []
class Recording(multiprocessing.shared_memory.SharedMemory):
    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        created.append(self.name.lstrip("/"))
multiprocessing.shared_memory.SharedMemory = Recording
def none_left():
    left = set(created) & set(os.listdir("/dev/shm"))
    assert not left, left
"""

CONNECTOR = """
import datetime, hashlib, multiprocessing, os, sys
# vLLM's and SGLang's clients import only multiprocessing, then reach
# multiprocessing.shared_memory: the import of hf3fs_fuse.io provides it.
assert not hasattr(multiprocessing, "shared_memory")
import hf3fs_fuse.io as h3io
from hf3fs_fuse.io import (deregister_fd, extract_mount_point, make_ioring, make_iovec,
                           register_fd)

path, page, entries = sys.argv[1], 1 << 20, 8
size = 64 * page
file = os.open(path, os.O_RDWR | os.O_CREAT)
os.ftruncate(file, size)
register_fd(file)
mount = extract_mount_point(path)
shm_r = multiprocessing.shared_memory.SharedMemory(size=page * entries, create=True)
shm_w = multiprocessing.shared_memory.SharedMemory(size=page * entries, create=True)
names = [shm_r.name.lstrip("/"), shm_w.name.lstrip("/")]
ior_r = make_ioring(mount, entries, for_read=True, timeout=1, numa=-1)
ior_w = make_ioring(mount, entries, for_read=False, timeout=1, numa=-1)
iov_r = make_iovec(shm_r, mount)
iov_w = make_iovec(shm_w, mount)
shm_r.unlink()  # right after make_iovec, as both clients do
shm_w.unlink()

def blob(page_index):
    return hashlib.shake_256(b"page %d" % page_index).digest(page)

for batch in ([3, 9, 10, 40, 41, 42, 63, 0], [5, 6, 7]):
    for i, p in enumerate(batch):
        shm_w.buf[i * page:(i + 1) * page] = blob(p)
    current = 0
    for p in batch:
        ior_w.prepare(iov_w[current:current + page], False, file, p * page)
        current += page
    resv = ior_w.submit().wait(min_results=len(batch))
    assert [r.result for r in resv] == [page] * len(batch), [r.result for r in resv]

batch = [42, 3, 7, 0, 63]
current = 0
for p in batch:
    ior_r.prepare(iov_r[current:current + page], True, file, p * page)
    current += page
resv = ior_r.submit().wait(min_results=len(batch), timeout=datetime.timedelta(seconds=30))
assert [r.result for r in resv] == [page] * len(batch)
for i, p in enumerate(batch):
    assert bytes(shm_r.buf[i * page:(i + 1) * page]) == blob(p), p

# Close as vLLM does: drop the rings and iovs, close the memory, then the file.
for name in ("iov_r", "iov_w", "ior_r", "ior_w"):
    del globals()[name]
shm_r.close()
shm_w.close()
deregister_fd(file)
os.close(file)
left = set(names) & set(os.listdir("/dev/shm"))
assert not left, left
print("connector ok")
"""


def test_connector_call_sequence(workdir):
    assert "connector ok" in python(CONNECTOR, workdir / "rank-0.bin")


DEMO = """
import os, sys
from hf3fs_fuse.io import make_iovec, make_ioring, register_fd, deregister_fd
from multiprocessing.shared_memory import SharedMemory

mount, path = sys.argv[1], sys.argv[2]
shm = SharedMemory(size=1024, create=True)
iov = make_iovec(shm, mount, 0, -1)
shm.unlink()
ior = make_ioring(mount, 100, True, 0)
fd = os.open(path, os.O_RDONLY)
register_fd(fd)
ios = [(iov[:512], fd, 512), (iov[512:], fd, 0)]
for io in ios:
    expected_size = len(memoryview(io[0]))  # slices export their bytes
    ior.prepare(io[0], True, io[1], io[2], userdata=expected_size)
resv = ior.submit().wait(min_results=2)
assert len(resv) == 2
for res in resv:
    assert res.result == res.userdata == 512, (res.result, res.userdata)
data = open(path, "rb").read()
assert bytes(shm.buf[:512]) == data[512:1024] and bytes(shm.buf[512:]) == data[:512]
deregister_fd(fd)
os.close(fd)
print("demo ok")
"""


def test_3fs_demo_sequence(cluster, workdir):
    (workdir / "testread").write_bytes(os.urandom(1024))
    assert "demo ok" in python(DEMO, cluster.mount, workdir / "testread")


READ_FILE = RECORD_SHM + """
import hashlib, sys
path = sys.argv[1]
expected = hashlib.sha256(open(path, "rb").read()).hexdigest()
# Default arguments: one 1 GiB block, one ring entry for the whole file.
data = h3io.read_file(path)
assert hashlib.sha256(data).hexdigest() == expected, len(data)
none_left()
print("read_file ok", len(data))
"""


def test_read_file_of_200_mib_with_defaults(workdir):
    path = workdir / "big"
    with open(path, "wb") as f:
        for i in range(200):
            f.write(bytes([i]) * (1 << 20))
    assert f"read_file ok {200 << 20}" in python(READ_FILE, path)


READ_FILE_CB = RECORD_SHM + """
import sys
path, block = sys.argv[1], 3 << 20
data = open(path, "rb").read()

seen = []
keep = lambda buf, at: seen.append((at, bytes(buf)))  # noqa: E731
assert h3io.read_file(path, block_size=block, cb=keep) is None
assert [at for at, _ in seen] == [0, 3 << 20, 6 << 20, 9 << 20], [at for at, _ in seen]
assert b"".join(b for _, b in seen) == data

# An int from cb is the offset to read next.
seen = []
def skip_once(buf, at):
    seen.append((at, len(buf)))
    return 7 << 20 if at == 0 else None
h3io.read_file(path, block_size=block, cb=skip_once)
assert seen == [(0, block), (7 << 20, block), (10 << 20, 3)], seen

# Any other true value stops.
seen = []
h3io.read_file(path, block_size=block, cb=lambda buf, at: seen.append(at) or at >= block)
assert seen == [0, 3 << 20], seen

# From an offset, without cb.
assert h3io.read_file(path, block_size=block, off=5 << 20) == data[5 << 20:]
assert h3io.read_file(path, block_size=block, off=len(data) + 10) == b""
none_left()
print("callbacks ok")
"""


def test_read_file_callbacks(workdir):
    (workdir / "cb").write_bytes(os.urandom((10 << 20) + 3))
    assert "callbacks ok" in python(READ_FILE_CB, workdir / "cb")


# 3FS's own read_file tests run hf3fs_fuse.io over a fake native module:
# the same checks here, so the module is built on hf3fs_py_usrbio exactly
# as 3FS's is and releases what it acquired on every path.
FAKE_NATIVE = """
import importlib, sys, types
from types import SimpleNamespace
from unittest import mock

def fresh_module():
    native = types.ModuleType("hf3fs_py_usrbio")
    for name in ("register_fd", "deregister_fd", "force_fsync", "hardlink", "punch_hole",
                 "iovec", "ioring"):
        setattr(native, name, mock.Mock())
    native.extract_mount_point = mock.Mock(return_value="/3fs")
    sys.modules["hf3fs_py_usrbio"] = native
    sys.modules.pop("hf3fs_fuse.io", None)
    return importlib.import_module("hf3fs_fuse.io"), native

# open fails: its error comes through; nothing registered or deregistered
io, native = fresh_module()
with mock.patch.object(io.os, "open", side_effect=FileNotFoundError("missing input")):
    try:
        io.read_file("missing")
        raise AssertionError("no error")
    except FileNotFoundError as e:
        assert "missing input" in str(e)
native.register_fd.assert_not_called()
native.deregister_fd.assert_not_called()

# registration fails: the fd is closed, never deregistered
io, native = fresh_module()
native.register_fd.side_effect = RuntimeError("registration failed")
with mock.patch.object(io.os, "open", return_value=17), \\
        mock.patch.object(io.os, "close") as close:
    try:
        io.read_file("input")
        raise AssertionError("no error")
    except RuntimeError:
        pass
native.deregister_fd.assert_not_called()
close.assert_called_once_with(17)

# make_iovec fails: fd deregistered and closed, memory closed and unlinked
io, native = fresh_module()
shm = mock.Mock()
shm.buf = bytearray(8)
with mock.patch.object(io.os, "open", return_value=23), \\
        mock.patch.object(io.os, "close") as close, \\
        mock.patch.object(io.multiprocessing.shared_memory, "SharedMemory", return_value=shm), \\
        mock.patch.object(io, "make_iovec", side_effect=RuntimeError("iovec failed")):
    try:
        io.read_file("input", hf3fs_mount_point="/3fs", block_size=8)
        raise AssertionError("no error")
    except RuntimeError:
        pass
native.deregister_fd.assert_called_once_with(23)
close.assert_called_once_with(23)
shm.close.assert_called_once_with()
shm.unlink.assert_called_once_with()

# a short read: its bytes, one prepare of the whole iov at off, all released
io, native = fresh_module()
shm = mock.Mock()
shm.buf = bytearray(b"data-rest")
ring = mock.Mock()
ring.submit.return_value.wait.return_value = [SimpleNamespace(result=4)]
with mock.patch.object(io.os, "open", return_value=29), \\
        mock.patch.object(io.os, "close") as close, \\
        mock.patch.object(io.multiprocessing.shared_memory, "SharedMemory", return_value=shm), \\
        mock.patch.object(io, "make_iovec", return_value=shm.buf), \\
        mock.patch.object(io, "make_ioring", return_value=ring):
    assert io.read_file("input", hf3fs_mount_point="/3fs", block_size=9) == b"data"
ring.prepare.assert_called_once_with(shm.buf[:], True, 29, 0)
ring.submit.return_value.wait.assert_called_once_with(min_results=1)
native.deregister_fd.assert_called_once_with(29)
close.assert_called_once_with(29)
shm.close.assert_called_once_with()
shm.unlink.assert_called_once_with()
print("fake native ok")
"""


def test_read_file_over_a_fake_native_module():
    assert "fake native ok" in python(FAKE_NATIVE)


BINDING = RECORD_SHM + """
import datetime, errno, os, sys, time
import hf3fs_py_usrbio as h3fio
mount, path = sys.argv[1], sys.argv[2]
assert h3io.h3fio is h3fio and h3fio.HF3FS_SUPER_MAGIC == 0x8f3f5fff

def raises(errno_value, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except OSError as e:
        assert e.errno == errno_value, (e, errno_value)
        return
    raise AssertionError(f"{fn} did not raise")

fd = os.open(path, os.O_RDWR | os.O_CREAT)
os.ftruncate(fd, 1 << 20)
h3io.register_fd(fd)
raises(errno.EINVAL, h3io.register_fd, fd)  # a registered fd registers once
local = os.open("/proc/self/status", os.O_RDONLY)
raises(errno.EBADF, h3io.register_fd, local)  # not a file of the mount
os.close(local)
shm = multiprocessing.shared_memory.SharedMemory(size=1 << 20, create=True)
iov = h3io.make_iovec(shm, mount)

# Slices: buffers over the shared memory; iovec.__setitem__ writes into it.
iov[0:5] = b"hello"
assert bytes(shm.buf[:5]) == b"hello" and bytes(memoryview(iov[0:5])) == b"hello"
part = iov[100:300]
assert len(memoryview(part)) == 200 and part.base_off == 100 and iov.iov.base_off == 0
assert iov.iov.slice_by(memoryview(iov.iov)[10:20]).base_off == 10
for bad in (lambda: iov[5], lambda: iov[0:10:2]):
    try:
        bad()
        raise AssertionError("accepted")
    except (TypeError, ValueError):
        pass

assert h3io.ioring.size_for_entries(8) == h3fio.ioring.size_for_entries(8) > 0
w = h3io.make_ioring(mount, 100, for_read=False, priority=h3io.IorPriority.HIGH)
assert w.entries == 100  # exactly the entries asked for
raises(errno.EINVAL, w.prepare, iov[0:10], True, fd, 0)  # a read on a write ring
# prepare and submit return the ring: calls chain.
assert w.prepare(iov[0:4096], False, fd, 0, userdata="a") is w.ior
done = w.prepare(iov[0:4096], False, fd, 4096, userdata="b").submit().wait(min_results=2)
assert sorted((d.userdata, d.result) for d in done) == [("a", 4096), ("b", 4096)]
try:
    w.wait(1, 1)  # max_results, min_results and timeout are keywords only
    raise AssertionError("positional wait accepted")
except TypeError:
    pass

r = h3fio.ioring(mount, 8, True)
for i in range(3):
    r.prepare(iov.iov[i * 4096:(i + 1) * 4096], True, fd, i * 4096, userdata=i)
r.submit()
first = r.wait(min_results=1, max_results=2)  # never more than max_results
rest = r.wait(min_results=3 - len(first), timeout=datetime.timedelta(seconds=30))
assert 1 <= len(first) <= 2 and sorted(d.userdata for d in first + rest) == [0, 1, 2]
assert r.wait(timeout=0.05) == []  # nothing left: the timeout, then nothing
for i in range(2):
    r.prepare(iov[i * 10:(i + 1) * 10], True, fd, 0)
r.submit()
got, deadline = [], time.monotonic() + 30
while len(got) < 2 and time.monotonic() < deadline:
    batch = r.wait()  # no arguments: what is there, at most one
    assert len(batch) <= 1, batch
    got += batch
assert len(got) == 2
assert h3io.force_fsync(fd) == 0

r.destroy()
raises(errno.EINVAL, r.prepare, iov[0:10], True, fd, 0)
w.close()
iov.close()
raises(errno.EINVAL, h3fio.ioring(mount, 2, True).prepare, iov[0:10], True, fd, 0)
h3io.deregister_fd(fd)
h3io.register_fd(fd)  # registers again once deregistered
h3io.deregister_fd(fd)
os.close(fd)
shm.close()
shm.unlink()
none_left()
print("binding ok")
"""


def test_binding_behaviour(cluster, workdir):
    assert "binding ok" in python(BINDING, cluster.mount, workdir / "binding")


# Every public name of 3FS's hf3fs_fuse.io and of its native module, with
# 3FS's parameters (docs/usrbio.md has the same list).
SURFACE = """
import inspect
import hf3fs_fuse.io as io
import hf3fs_py_usrbio as native

def params(fn):
    return [(p.name, p.kind.name[:3], p.default if p.default is not p.empty else "-")
            for p in inspect.signature(fn).parameters.values()]

expect = {
    io.make_iovec: [("shm", "POS", "-"), ("hf3fs_mount_point", "POS", "-"),
                    ("block_size", "POS", 0), ("numa", "POS", -1)],
    io.make_ioring: [("hf3fs_mount_point", "POS", "-"), ("entries", "POS", "-"),
                     ("for_read", "POS", True), ("io_depth", "POS", 0), ("priority", "POS", None),
                     ("timeout", "POS", None), ("numa", "POS", -1), ("flags", "POS", 0)],
    io.read_file: [("fn", "POS", "-"), ("hf3fs_mount_point", "POS", None),
                   ("block_size", "POS", 1 << 30), ("off", "POS", 0), ("priority", "POS", None),
                   ("cb", "POS", None)],
    io.iovec: [("iov", "POS", "-"), ("link", "POS", None)],
    io.ioring: [("ior", "POS", "-")],
    io.ioring.size_for_entries: [("entries", "POS", "-")],
    native.extract_mount_point: [("path", "POS", "-")],
    native.register_fd: [("fd", "POS", "-"), ("flags", "POS", 0)],
    native.deregister_fd: [("fd", "POS", "-")],
    native.force_fsync: [("fd", "POS", "-")],
    native.hardlink: [("target", "POS", "-"), ("link_name", "POS", "-")],
    native.ioring: [("hf3fs_mount_point", "POS", "-"), ("entries", "POS", "-"),
                    ("for_read", "POS", True), ("io_depth", "POS", 0), ("priority", "POS", None),
                    ("timeout", "POS", None), ("numa", "POS", -1), ("flags", "POS", 0)],
    native.ioring.prepare: [("self", "POS", "-"), ("iov", "POS", "-"), ("read", "POS", "-"),
                            ("fd", "POS", "-"), ("off", "POS", "-"), ("userdata", "POS", None)],
    native.ioring.wait: [("self", "POS", "-"), ("max_results", "KEY", 0),
                         ("min_results", "KEY", 0), ("timeout", "KEY", None)],
    native.iovec.__new__: [("cls", "POS", "-"), ("base", "POS", "-"), ("id", "POS", "-"),
                           ("hf3fs_mount_point", "POS", "-"), ("block_size", "POS", 0),
                           ("numa", "POS", -1)],
}
for fn, want in expect.items():
    assert params(fn) == want, (fn, params(fn))
for name in ("register_fd", "deregister_fd", "force_fsync", "extract_mount_point", "hardlink",
             "punch_hole"):
    assert getattr(io, name) is getattr(native, name), name
assert (io.IorPriority.HIGH, io.IorPriority.NORMAL, io.IorPriority.LOW) == (-1, 0, 1)
for name in ("__getitem__", "__setitem__", "close", "__enter__", "__exit__"):
    assert callable(getattr(io.iovec, name)), name
for name in ("prepare", "submit", "wait", "close", "__enter__", "__exit__"):
    assert callable(getattr(io.ioring, name)), name
for name in ("__getitem__", "slice_by", "result", "base_off", "userdata"):
    assert name in dir(native.iovec) or name in ("result", "userdata"), name
for name in ("prepare", "submit", "wait", "destroy", "entries", "size_for_entries"):
    assert hasattr(native.ioring, name), name
print("surface ok")
"""


def test_public_names_and_signatures():
    assert "surface ok" in python(SURFACE)


PUNCH = """
import errno, os, sys
import hf3fs_fuse.io as h3io
path, MIB = sys.argv[1], 1 << 20
assert h3io.punch_hole(path, [1 * MIB], [2 * MIB]) is None  # by file name
fd = os.open(path, os.O_RDWR)
h3io.punch_hole(fd, [2 * MIB + 100, 3 * MIB], [2 * MIB + 200, 3 * MIB + 10])  # by fd
h3io.punch_hole(fd, 5, 9)  # single ranges as numbers
want = bytearray(open(sys.argv[2], "rb").read())
for a, b in ((1 * MIB, 2 * MIB), (2 * MIB + 100, 2 * MIB + 200), (3 * MIB, 3 * MIB + 10), (5, 9)):
    want[a:b] = bytes(b - a)
assert os.pread(fd, 4 * MIB, 0) == want
try:
    h3io.punch_hole(fd, [0, 1], [1])
    raise AssertionError("accepted")
except RuntimeError:
    pass  # as 3FS: as many starts as ends
for bad, err in ((lambda: h3io.punch_hole(path + ".missing", [0], [1]), errno.ENOENT),
                 (lambda: h3io.punch_hole(fd, [10], [5]), errno.EINVAL)):
    try:
        bad()
        raise AssertionError("accepted")
    except OSError as e:
        assert e.errno == err, e
os.close(fd)
print("punch ok")
"""


def test_punch_hole_by_name_and_by_fd(workdir, local_tmp):
    data = os.urandom(4 << 20)
    (workdir / "holes").write_bytes(data)
    (local_tmp / "ref").write_bytes(data)
    assert "punch ok" in python(PUNCH, workdir / "holes", local_tmp / "ref")


HARDLINK_ERRORS = """
import errno, os, sys
import hf3fs_fuse.io as h3io
d = sys.argv[1]
open(os.path.join(d, "t"), "wb").write(b"x")
for target, link, err in ((os.path.join(d, "missing"), os.path.join(d, "l1"), errno.ENOENT),
                          (os.path.join(d, "t"), os.path.join(d, "no-dir", "l"), errno.ENOENT)):
    try:
        h3io.hardlink(target, link)
        raise AssertionError("linked")
    except OSError as e:
        assert e.errno == err, e
print("errors ok")
"""


def test_hardlink_errors(workdir):
    assert "errors ok" in python(HARDLINK_ERRORS, workdir)


HARDLINK = """
import os, sys
import hf3fs_fuse.io as h3io
d = sys.argv[1]
target, link, via = (os.path.join(d, n) for n in ("target", "link", "via-symlink"))
open(target, "wb").write(b"shared bytes")
h3io.hardlink(target, link)
assert os.stat(link).st_ino == os.stat(target).st_ino and os.stat(target).st_nlink == 2
os.symlink("target", os.path.join(d, "sym"))
h3io.hardlink(os.path.join(d, "sym"), via)  # as 3FS: the file a symlink names
assert os.stat(via).st_ino == os.stat(target).st_ino and not os.path.islink(via)
os.unlink(target)
assert open(link, "rb").read() == b"shared bytes"
print("hardlink ok")
"""


def test_hardlink(workdir):
    """Needs hard links in kvc-meta/kvc-fuse (link(2) on the mount)."""
    assert "hardlink ok" in python(HARDLINK, workdir)


PY_IOVS = """
import gc, os, sys
import kvcfs
mount, count = sys.argv[1], int(sys.argv[2])
names = []
for i in range(count):
    iov = kvcfs.Iov.create(mount, 64 << 10)
    names.append("kvc-iov-" + iov.id.hex())
    assert os.path.exists("/dev/shm/" + names[-1])
    if i % 2:
        iov.close()
    del iov  # the others go with the garbage collector
gc.collect()
left = set(names) & set(os.listdir("/dev/shm"))
assert not left, left
print("python iovs ok")
"""


def test_library_iovs_leave_no_shm_python(cluster):
    assert "python iovs ok" in python(PY_IOVS, cluster.mount, 300)


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


def test_fio_with_128_mib_blocks(workdir, engine, fio):
    """One fio I/O per 128 MiB block (3FS's fio engine runs with such
    sizes): written, then read back and checked by fio's verify. fio runs
    in a temporary working directory (test_fio's fixtures)."""
    job = fio("--name=big", f"--ioengine=external:{engine}", f"--filename={workdir}/fio-big",
              "--size=256M", "--bs=128M", "--rw=write", "--iodepth=2", "--verify=crc32c",
              "--do_verify=1", "--verify_state_save=0")
    assert job["write"]["io_bytes"] == 256 << 20
    assert job["read"]["io_bytes"] == 256 << 20
