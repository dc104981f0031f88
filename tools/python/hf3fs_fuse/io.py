"""hf3fs_fuse.io: 3FS's Python USRBIO module, on kvcfs, so the vLLM, SGLang
and LMCache hf3fs connectors (and 3FS's own tools) run unchanged.

Built, as 3FS's is, on the native module hf3fs_py_usrbio (here: ctypes over
libkvc), whose functions it re-exports. Importing it also imports
multiprocessing.shared_memory, which the connectors rely on after a plain
`import multiprocessing`. docs/usrbio.md compares every name with 3FS's.

Put tools/python on PYTHONPATH (and libkvc.so where kvcfs finds it):
    export PYTHONPATH=/path/to/kvcfs/tools/python
"""
import multiprocessing.shared_memory
import os
import uuid

import hf3fs_py_usrbio as h3fio
from hf3fs_py_usrbio import (deregister_fd, extract_mount_point, force_fsync, hardlink,
                             punch_hole, register_fd)

__all__ = ["iovec", "ioring", "IorPriority", "make_iovec", "make_ioring", "read_file",
           "register_fd", "deregister_fd", "force_fsync", "extract_mount_point", "hardlink",
           "punch_hole", "h3fio"]


class iovec:
    """A registered shared-memory buffer: iov[a:b] names the bytes of one
    I/O, iov[a:b] = data writes into it. close() (or with-block, or
    garbage collection) deregisters it."""

    def __init__(self, iov, link=None):
        self.iov = iov
        self.link = link  # 3FS's registration symlink; kvcfs registers over a socket
        self._shm = None  # make_iovec's SharedMemory, kept from the collector
        self._closed = False

    def close(self):
        if not self._closed:
            self._closed = True
            self.iov._destroy()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __getitem__(self, key):
        return self.iov[key]

    def __setitem__(self, key, value):
        self.iov[key] = value


class ioring:
    """A ring of I/O entries for reads or for writes; prepare and submit
    return the native ring, so ring.submit().wait(min_results=n) chains."""

    def __init__(self, ior):
        self.ior = ior
        self._closed = False

    def close(self):
        """Deregister the ring now (3FS leaves that to the collector)."""
        if not self._closed:
            self._closed = True
            self.ior.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    @staticmethod
    def size_for_entries(entries):
        return h3fio.ioring.size_for_entries(entries)

    @property
    def entries(self):
        return self.ior.entries

    def prepare(self, iov, *args, **kwargs):
        return self.ior.prepare(iov.iov if isinstance(iov, iovec) else iov, *args, **kwargs)

    def submit(self):
        return self.ior.submit()

    def wait(self, *args, **kwargs):
        return self.ior.wait(*args, **kwargs)


class IorPriority:
    HIGH = -1
    NORMAL = 0
    LOW = 1


def make_iovec(shm, hf3fs_mount_point, block_size=0, numa=-1):
    """Register a multiprocessing.shared_memory.SharedMemory with the mount
    (shm may be unlinked right after, as 3FS's users do)."""
    iov = iovec(h3fio.iovec(shm.buf, str(uuid.uuid4()), hf3fs_mount_point, block_size, numa))
    iov._shm = shm
    return iov


def make_ioring(hf3fs_mount_point, entries, for_read=True, io_depth=0, priority=None,
                timeout=None, numa=-1, flags=0):
    """A ring of `entries` slots. io_depth > 0: run exactly that many per
    batch (waiting up to timeout ms for them); 0: everything at once; < 0:
    at most -io_depth per batch. flags 2: reading a hole fails (ENODATA)."""
    return ioring(h3fio.ioring(hf3fs_mount_point, entries, for_read, io_depth, priority, timeout,
                               numa, flags))


def read_file(fn, hf3fs_mount_point=None, block_size=1 << 30, off=0, priority=None, cb=None):
    """Read fn from off through a ring, block_size bytes at a time. Without
    cb, return the bytes. With cb, call cb(block, offset) for each block (a
    memoryview valid during the call) and return None: an int it returns
    is the offset to read next, any other true value stops."""
    if hf3fs_mount_point is None:
        hf3fs_mount_point = extract_mount_point(fn)
    blocks = []
    fd = shm = iov = ior = None
    registered = False
    try:
        fd = os.open(fn, os.O_RDONLY)
        register_fd(fd)
        registered = True
        shm = multiprocessing.shared_memory.SharedMemory(size=block_size, create=True)
        iov = make_iovec(shm, hf3fs_mount_point)
        ior = make_ioring(hf3fs_mount_point, 1, priority=priority)
        at = off
        while True:
            ior.prepare(iov[:], True, fd, at)
            done = ior.submit().wait(min_results=1)[0]
            if done.result < 0:
                raise OSError(-done.result, os.strerror(-done.result))
            if done.result == 0:
                break
            if cb is None:
                blocks.append(bytes(shm.buf[:done.result]))
            else:
                answer = cb(shm.buf[:done.result], at)
                if type(answer) is int:
                    at = answer
                    continue
                if answer:
                    return None
            if done.result < block_size:
                break
            at += block_size
        return None if cb is not None else b"".join(blocks)
    finally:
        if registered:
            deregister_fd(fd)
        if fd is not None:
            os.close(fd)
        if isinstance(ior, ioring):
            ior.close()
        if isinstance(iov, iovec):
            iov.close()
        if shm is not None:
            shm.close()
            shm.unlink()
