"""hf3fs_fuse.io: 3FS's Python USRBIO module, implemented on kvcfs, so the
vLLM, SGLang and LMCache hf3fs connectors run unchanged.

Put tools/python on PYTHONPATH (and libkvc.so where kvcfs finds it):
    export PYTHONPATH=/path/to/kvcfs/tools/python
"""
import ctypes
import os

import kvcfs


class IorPriority:
    HIGH = -1
    NORMAL = 0
    LOW = 1


class _IovSlice:
    __slots__ = ("iov", "start", "stop")

    def __init__(self, iov, start, stop):
        self.iov, self.start, self.stop = iov, start, stop


class iovec:
    """A registered shared-memory buffer; slice it to name the bytes of
    one I/O: ring.prepare(iov[a:b], read, fd, offset)."""

    def __init__(self, native, shm=None):
        self._native = native
        self._shm = shm
        self.size = native.size

    def __len__(self):
        return self.size

    def __getitem__(self, key):
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("iovec supports contiguous slices only")
        start, stop, _ = key.indices(self.size)
        if stop <= start:
            raise ValueError("empty iovec slice")
        return _IovSlice(self._native, start, stop)

    @property
    def buf(self):
        return self._native.memoryview()

    def close(self):
        self._native.close()


class ioring:
    def __init__(self, native):
        self._native = native

    @property
    def entries(self):
        return self._native.entries

    def prepare(self, iov_slice, read, fd, offset, userdata=None):
        if not isinstance(iov_slice, _IovSlice):
            if isinstance(iov_slice, iovec):
                iov_slice = iov_slice[:]
            else:
                raise TypeError("prepare takes a slice of an iovec")
        fd = fd if isinstance(fd, int) else fd.fileno()
        return self._native.prepare(iov_slice.iov, read, fd, offset,
                                    iov_slice.stop - iov_slice.start,
                                    iov_offset=iov_slice.start, userdata=userdata)

    def submit(self):
        return self._native.submit()

    def wait(self, max_results=0, min_results=0, timeout=None):
        if hasattr(timeout, "total_seconds"):
            timeout = timeout.total_seconds()
        return self._native.wait(max_results, min_results, timeout)

    def close(self):
        self._native.close()


def make_iovec(shm, hf3fs_mount_point, block_size=0, numa=-1):
    """Register a multiprocessing.shared_memory.SharedMemory with the mount."""
    return iovec(kvcfs.Iov.wrap(shm.buf, hf3fs_mount_point, size=shm.size,
                                block_size=block_size, numa=numa), shm)


def make_ioring(hf3fs_mount_point, entries, for_read=True, io_depth=0, priority=None,
                timeout=None, numa=-1, flags=0):
    if hasattr(timeout, "total_seconds"):
        timeout = int(timeout.total_seconds() * 1000)
    return ioring(kvcfs.Ring(hf3fs_mount_point, entries, for_read, io_depth,
                             priority if priority is not None else IorPriority.NORMAL,
                             timeout or 0, numa, flags))


def register_fd(fd, flags=0):
    kvcfs.register_fd(fd if isinstance(fd, int) else fd.fileno(), flags)


def deregister_fd(fd):
    kvcfs.deregister_fd(fd if isinstance(fd, int) else fd.fileno())


def force_fsync(fd):
    """Make the size that ring writes raised exact for every client now."""
    kvcfs.fsync(fd if isinstance(fd, int) else fd.fileno())


def extract_mount_point(path):
    return kvcfs.extract_mount_point(path)


def hardlink(target, link_name):
    os.link(target, link_name)


_punchhole = kvcfs.library.hf3fs_punchhole
_punchhole.restype = ctypes.c_int
_punchhole.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
                       ctypes.POINTER(ctypes.c_size_t), ctypes.c_size_t]


def punch_hole(fd, start, end, flags=0):
    """Make [start, end) of the file read as zeros and return its space;
    start and end may be lists of ranges (end exclusive)."""
    starts = list(start) if isinstance(start, (list, tuple)) else [start]
    ends = list(end) if isinstance(end, (list, tuple)) else [end]
    if len(starts) != len(ends):
        raise ValueError("punch_hole: as many starts as ends")
    array = ctypes.c_size_t * len(starts)
    rc = _punchhole(fd if isinstance(fd, int) else fd.fileno(), len(starts), array(*starts),
                    array(*ends), flags)
    if rc != 0:  # a positive errno, as 3FS's hf3fs_punchhole
        raise OSError(rc, f"punch_hole: {os.strerror(rc)}")


def read_file(fn, hf3fs_mount_point=None, block_size=1 << 30, off=0, priority=None, cb=None):
    """Read a whole file (from off) through a ring; return its bytes, or
    feed each block to cb(memoryview) and return None."""
    from multiprocessing import shared_memory
    mount = hf3fs_mount_point or extract_mount_point(fn)
    if mount is None:
        raise OSError(22, f"{fn} is not on a kvcfs mount")
    size = os.stat(fn).st_size - off
    block = max(1, min(block_size, size)) if size > 0 else 1
    shm = shared_memory.SharedMemory(create=True, size=block)
    fd = os.open(fn, os.O_RDONLY)
    iov = ring = None
    out = bytearray() if cb is None else None
    try:
        register_fd(fd)
        iov = make_iovec(shm, mount)
        ring = make_ioring(mount, 1, for_read=True, priority=priority)
        pos = off
        while pos < off + size:
            n = min(block, off + size - pos)
            ring.prepare(iov[0:n], True, fd, pos)
            ring.submit()
            done = ring.wait(min_results=1)
            result = done[0].result
            if result < 0:
                raise OSError(-result, os.strerror(-result))
            if result == 0:
                break
            view = shm.buf[:result]
            if cb is None:
                out += view
            else:
                cb(view)
            del view
            pos += result
    finally:
        if ring:
            ring.close()
        if iov:
            iov.close()
        try:
            deregister_fd(fd)
        except OSError:
            pass
        os.close(fd)
        shm.close()
        shm.unlink()
    return bytes(out) if out is not None else None
