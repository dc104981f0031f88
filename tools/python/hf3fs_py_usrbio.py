"""hf3fs_py_usrbio: 3FS's native Python USRBIO module (the one its
hf3fs_fuse.io is written on), over libkvc's hf3fs_* C functions through
ctypes, so code that imports either module runs on kvcfs unchanged.

Names, signatures and behaviour follow 3FS's binding; docs/usrbio.md lists
each one and where kvcfs differs.

- iovec(base, id, hf3fs_mount_point, block_size=0, numa=-1): registers
  `base` (a writable buffer in shared memory, such as SharedMemory.buf; it
  is not kept exported, so the owner may close it, as in 3FS). An iovec
  and its slices export their bytes (memoryview(iov)); iov[a:b] is a
  slice of it, the unit of one I/O; after ioring.wait the slice carries
  `result` (bytes or -errno) and `userdata`.
- ioring(mount, entries, for_read=True, io_depth=0, priority=None,
  timeout=None (ms), numa=-1, flags=0): prepare(iov, read, fd, off,
  userdata=None) and submit() return the ring, so calls chain:
  ring.prepare(...).submit().wait(min_results=n).

Errors raise OSError with the errno, as 3FS's binding does.
"""
import ctypes
import datetime
import errno
import functools
import os
import time
import uuid

import kvcfs

__all__ = ["HF3FS_SUPER_MAGIC", "iovec", "ioring", "extract_mount_point", "register_fd",
           "deregister_fd", "force_fsync", "hardlink", "punch_hole"]

HF3FS_SUPER_MAGIC = 0x8f3f5fff
PUNCH_HOLE_MAX = 1000  # 3FS's HF3FS_IOCTL_PUNCH_HOLE_MAX


class _Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("iovh", ctypes.c_void_p),
                ("id", ctypes.c_char * 16), ("mount_point", ctypes.c_char * 256),
                ("size", ctypes.c_size_t), ("block_size", ctypes.c_size_t),
                ("numa", ctypes.c_int)]


class _Ior(ctypes.Structure):
    _fields_ = [("iov", _Iov), ("iorh", ctypes.c_void_p), ("mount_point", ctypes.c_char * 256),
                ("for_read", ctypes.c_bool), ("io_depth", ctypes.c_int),
                ("priority", ctypes.c_int), ("timeout", ctypes.c_int),
                ("flags", ctypes.c_uint64)]


class _Cqe(ctypes.Structure):
    _fields_ = [("index", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("result", ctypes.c_int64), ("userdata", ctypes.c_void_p)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _fn(name, restype, *argtypes):
    fn = getattr(kvcfs.library, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


_int, _sz, _cp, _vp = ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_void_p
_iov_p, _ior_p = ctypes.POINTER(_Iov), ctypes.POINTER(_Ior)
_extract = _fn("hf3fs_extract_mount_point", _int, _cp, _int, _cp)
_reg_fd = _fn("hf3fs_reg_fd", _int, _int, ctypes.c_uint64)
_dereg_fd = _fn("hf3fs_dereg_fd", None, _int)
_fd_sync = _fn("kvc_fd_sync", _int, _int)
_hardlink = _fn("hf3fs_hardlink", _int, _cp, _cp)
_punchhole = _fn("hf3fs_punchhole", _int, _int, _int, ctypes.POINTER(_sz),
                 ctypes.POINTER(_sz), _sz)
_iovwrap = _fn("hf3fs_iovwrap", _int, _iov_p, _vp, _cp, _cp, _sz, _sz, _int)
_iovdestroy = _fn("hf3fs_iovdestroy", None, _iov_p)
_ior_size = _fn("hf3fs_ior_size", _sz, _int)
_iorcreate4 = _fn("hf3fs_iorcreate4", _int, _ior_p, _cp, _int, ctypes.c_bool, _int, _int, _int,
                  ctypes.c_uint64)
_iordestroy = _fn("hf3fs_iordestroy", None, _ior_p)
_io_entries = _fn("hf3fs_io_entries", _int, _ior_p)
_prep_io = _fn("hf3fs_prep_io", _int, _ior_p, _iov_p, ctypes.c_bool, _vp, _int, _sz,
               ctypes.c_uint64, _vp)
_submit = _fn("hf3fs_submit_ios", _int, _ior_p)
_wait = _fn("hf3fs_wait_for_ios", _int, _ior_p, ctypes.POINTER(_Cqe), _int, _int,
            ctypes.POINTER(_Timespec))


def _raise(code, what=None):
    raise OSError(code, os.strerror(code) + (f": {what}" if what else ""))


def _fileno(fd):
    return fd if isinstance(fd, int) else fd.fileno()


def extract_mount_point(path):
    """The kvcfs mount point that path is in, or None."""
    out = ctypes.create_string_buffer(4096)
    length = _extract(out, len(out), os.fsencode(path))
    if length < 0:
        return None
    if length > len(out):
        _raise(errno.ENAMETOOLONG, path)
    return os.fsdecode(out.value)


def register_fd(fd, flags=0):
    """Register an open file of the mount for ring I/O; a registered
    number cannot be registered again before deregister_fd (EINVAL)."""
    rc = _reg_fd(_fileno(fd), flags)
    if rc > 0:
        _raise(rc)


def deregister_fd(fd):
    _dereg_fd(_fileno(fd))


def force_fsync(fd):
    """Make the size that ring writes raised exact for every client now.
    Returns 0, or -1 on failure (3FS returns its ioctl's value)."""
    return 0 if _fd_sync(_fileno(fd)) == 0 else -1


def hardlink(target, link_name):
    """Link the file target opens as link_name (raises OSError)."""
    rc = _hardlink(os.fsencode(target), os.fsencode(link_name))
    if rc != 0:
        _raise(rc, link_name)


def _sizes(values):
    return list(values) if isinstance(values, (list, tuple, range)) else [values]


def punch_hole(file, start, end, flags=0):
    """Make each [start[i], end[i]) of the file read as zeros and return
    its space. file: a path (opened read-write for the call) or an fd."""
    starts, ends = _sizes(start), _sizes(end)
    if len(starts) != len(ends) or len(starts) > PUNCH_HOLE_MAX:
        raise RuntimeError("size not equal")
    array = _sz * len(starts)
    by_name = isinstance(file, (str, bytes, os.PathLike))
    fd = os.open(file, os.O_RDWR) if by_name else _fileno(file)
    try:
        rc = _punchhole(fd, len(starts), array(*starts), array(*ends), flags)
    finally:
        if by_name:
            os.close(fd)
    if rc != 0:
        _raise(rc)


@functools.lru_cache(maxsize=256)
def _view_type(length):
    """The class of iovec objects of `length` bytes: a ctypes array over
    the memory (so they export it as a buffer), with iovec's methods."""
    return type("iovec", (iovec, ctypes.Array), {"_type_": ctypes.c_uint8, "_length_": length})


class iovec:
    """A registered shared-memory buffer, or a slice of one."""

    def __new__(cls, base, id, hf3fs_mount_point, block_size=0, numa=-1):
        try:
            raw = uuid.UUID(str(id)).bytes
        except ValueError:
            raise ValueError(f"id '{id}' is not a valid UUID") from None
        view = memoryview(base).cast("B")
        if view.readonly:
            raise TypeError("iovec needs a writable buffer")
        size = view.nbytes
        address = ctypes.addressof(ctypes.c_uint8.from_buffer(view)) if size else 0
        view.release()  # not kept exported: the owner may close it (as in 3FS)
        handle = _Iov()
        rc = _iovwrap(ctypes.byref(handle), address, raw, os.fsencode(hf3fs_mount_point), size,
                      block_size, numa)
        if rc < 0:
            _raise(-rc)
        self = _view_type(size).from_address(address)
        self._handle, self._root, self.result, self.userdata = handle, None, 0, None
        return self

    def __init__(self, *args, **kwargs):
        pass  # everything happened in __new__

    def _base(self):
        """The registered iovec this is, or is a slice of."""
        return self if self._root is None else self._root

    def _slice(self, address, length):
        root = self._base()
        view = _view_type(length).from_address(address)
        view._handle, view._root, view.result, view.userdata = None, root, 0, None
        return view

    def __getitem__(self, key):
        if not isinstance(key, slice):
            raise TypeError("iovec supports slices only")
        start, stop, step = key.indices(len(self))
        if step != 1:
            raise ValueError("step not 1 when slicing iovec")
        return self._slice(ctypes.addressof(self) + start, max(0, stop - start))

    def __setitem__(self, key, value):
        memoryview(self).cast("B")[key] = value

    def slice_by(self, buf):
        """The slice of this iovec that buf (a buffer inside it) covers."""
        view = memoryview(buf).cast("B")
        address = ctypes.addressof(ctypes.c_uint8.from_buffer(view)) if view.nbytes else 0
        length = view.nbytes
        view.release()
        start = ctypes.addressof(self)
        if address < start or address + length > start + len(self):
            raise IndexError("given buf is out of range")
        return self._slice(address, length)

    @property
    def base_off(self):
        return ctypes.addressof(self) - ctypes.addressof(self._base())

    def _destroy(self):
        """Deregister the iovec this is (a slice of) now; its slices then
        fail at prepare with EINVAL."""
        handle = self._base()._handle
        if handle.iovh:
            _iovdestroy(ctypes.byref(handle))

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self._destroy()


def _seconds(timeout):
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


class ioring:
    """A ring for reads or for writes (one thread at a time, as in 3FS)."""

    def __init__(self, hf3fs_mount_point, entries, for_read=True, io_depth=0, priority=None,
                 timeout=None, numa=-1, flags=0):
        del priority  # accepted and ignored, as 3FS's binding does
        if isinstance(timeout, datetime.timedelta):
            timeout = int(timeout.total_seconds() * 1000)
        self._slots = {}  # slot -> (the iovec slice, userdata)
        self._ior = _Ior()
        rc = _iorcreate4(ctypes.byref(self._ior), os.fsencode(hf3fs_mount_point), entries,
                         for_read, io_depth, timeout or 0, numa, flags)
        if rc < 0:
            _raise(-rc)

    @staticmethod
    def size_for_entries(entries):
        return _ior_size(entries)

    @property
    def entries(self):
        return _io_entries(ctypes.byref(self._ior))

    def prepare(self, iov, read, fd, off, userdata=None):
        if not isinstance(iov, iovec):
            raise TypeError("prepare takes an iovec (or a slice of one)")
        rc = _prep_io(ctypes.byref(self._ior), ctypes.byref(iov._base()._handle), read,
                      ctypes.addressof(iov), _fileno(fd), off, len(iov), None)
        if rc < 0:
            _raise(-rc)
        self._slots[rc] = (iov, userdata)
        return self

    def submit(self):
        rc = _submit(ctypes.byref(self._ior))
        if rc < 0:
            _raise(-rc)
        return self

    def wait(self, *, max_results=0, min_results=0, timeout=None):
        """The prepared slices that completed (each with .result and
        .userdata): at least min_results unless timeout (seconds or a
        timedelta) passes first, at most max_results (0: min_results, or 1)."""
        max_results = max(max_results, min_results)
        now = time.time()
        deadline = None if timeout is None else now + _seconds(timeout)
        cqes = (_Cqe * (max_results or 1))()
        out = []
        while True:
            # Once min_results are in, take only what is there already.
            until = deadline if len(out) < min_results else now
            spec = None if until is None else _Timespec(int(until), int((until % 1) * 1e9))
            room = (max_results or 1) - len(out)
            rc = _wait(ctypes.byref(self._ior), cqes, room, min_results - len(out),
                       ctypes.byref(spec) if spec else None)
            if rc < 0:
                if out:
                    return out
                _raise(-rc)
            for cqe in cqes[:rc]:
                done, userdata = self._slots.pop(cqe.index, (None, None))
                if done is None:
                    continue
                done.result, done.userdata = cqe.result, userdata
                out.append(done)
            if rc == 0 or len(out) >= max_results:
                return out

    def destroy(self):
        if self._ior.iorh:
            _iordestroy(ctypes.byref(self._ior))
        self._slots.clear()

    def __del__(self):
        if getattr(self, "_ior", None) is not None:
            self.destroy()
