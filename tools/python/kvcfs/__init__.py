"""kvcfs: Python bindings of libkvc's USRBIO API (include/kvc/usrbio.h).

Pure Python over ctypes; no dependency but libkvc.so, found through
$KVC_LIB, then the build tree next to this package, then the system's
library path. Errors raise OSError with the errno libkvc returned.

    import kvcfs
    ring = kvcfs.Ring("/mnt/kvc", entries=8, for_read=True)
    iov = kvcfs.Iov.wrap(shared_memory, "/mnt/kvc")
    kvcfs.register_fd(fd)
    ring.prepare(iov, True, fd, offset, length, iov_offset=0, userdata=obj)
    ring.submit(); done = ring.wait(min_results=1)

GPU (include/kvc/gpu.h; needs a CUDA runtime and a GPU, else OSError
ENOTSUP; PyTorch is imported only by as_tensor):

    iov = kvcfs.Iov.create(mount, size); iov.pin()   # page-locked
    gpu_tensor.copy_(iov.as_tensor(), non_blocking=True)
    dev = kvcfs.Iov.wrap_device(torch_cuda_tensor, mount)  # or create_device
    ring.prepare(dev, True, fd, offset, length)      # lands in GPU memory
    dev.as_tensor()                                  # a view, no copy

Keys (docs/usrbio.md "Keys"): put, get, exists, remove and wait many keys
(files of one key directory) per submission, each key gathered from or
scattered into segments: (iov, offset, length) tuples, or numpy arrays,
torch tensors (CPU or CUDA) and memoryviews lying inside a registered iov.

    keys = kvcfs.KeyDir(mount + "/pool")
    ring.put_keys(keys, [("k1", [layer0_page, layer1_page]), ...])   # sizes
    ring.get_keys(keys, [("k1", [dst0, dst1]), ...]).wait()          # sizes
    ring.wait_keys(keys, ["k2", "k3"], timeout=5.0).wait()
    cache = kvcfs.Blocks([kv[layer] for layer in range(layers)], num_blocks)
    ring.put_keys(keys, [(f"blk-{b}", cache[b]) for b in blocks])   # resolved once
"""
import array as _pyarray
import ctypes
import errno as _errno
import operator
import threading
import os
import pathlib
import time

__all__ = ["Iov", "Ring", "KeyDir", "KeyBatch", "KEY_REPLACE", "Completion", "register_fd", "deregister_fd", "fsync",
           "extract_mount_point", "is_kvcfs", "library", "FORBID_READ_HOLES",
           "ALLOW_READ_UNCOMMITTED", "gpu_available"]

ALLOW_READ_UNCOMMITTED = 1
FORBID_READ_HOLES = 2
KEY_PUT, KEY_GET, KEY_EXISTS, KEY_REMOVE, KEY_WAIT = 3, 4, 5, 6, 7
KEY_REPLACE = 1
KEY_MAX_SEGS = 64  # segments of one key (KVC_KEY_MAX_SEGS)


def _find_library():
    candidates = []
    if os.environ.get("KVC_LIB"):
        candidates.append(os.environ["KVC_LIB"])
    here = pathlib.Path(__file__).resolve().parent
    candidates += [str(here.parents[2] / "build" / "libkvc.so"), "libkvc.so", "libkvc.so.0.1.0"]
    last = None
    for candidate in candidates:
        try:
            return ctypes.CDLL(candidate, use_errno=True)
        except OSError as e:
            last = e
    raise OSError(f"libkvc.so not found (set KVC_LIB): {last}")


library = _find_library()


class _Completion(ctypes.Structure):
    _fields_ = [("index", ctypes.c_int32), ("result", ctypes.c_int64),
                ("userdata", ctypes.c_void_p)]


def _sig(name, restype, *argtypes):
    fn = getattr(library, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_vp, _sz, _int, _u64, _cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p
_iov_create = _sig("kvc_iov_create", _int, ctypes.POINTER(_vp), _cp, _sz, _sz, _int, _vp)
_iov_open = _sig("kvc_iov_open", _int, ctypes.POINTER(_vp), _cp, _cp, _sz, _sz, _int)
_iov_wrap = _sig("kvc_iov_wrap", _int, ctypes.POINTER(_vp), _vp, _cp, _cp, _sz, _sz, _int)
_iov_base = _sig("kvc_iov_base", _vp, _vp)
_iov_id = _sig("kvc_iov_id", None, _vp, _cp)
_iov_unlink = _sig("kvc_iov_unlink", _int, _vp)
_iov_destroy = _sig("kvc_iov_destroy", None, _vp)
_iov_pin = _sig("kvc_iov_pin", _int, _vp)
_iov_unpin = _sig("kvc_iov_unpin", _int, _vp)
_iov_create_device = _sig("kvc_iov_create_device", _int, ctypes.POINTER(_vp), _cp, _sz, _int, _vp)
_iov_wrap_device = _sig("kvc_iov_wrap_device", _int, ctypes.POINTER(_vp), _vp, _cp, _cp, _sz,
                        _int)
_iov_device = _sig("kvc_iov_device", _int, _vp)
_gpu_available = _sig("kvc_gpu_available", _int)
_gpu_last_error = _sig("kvc_gpu_last_error", _cp)
_ring_create = _sig("kvc_ring_create", _int, ctypes.POINTER(_vp), _cp, _int, ctypes.c_bool,
                    _int, _int, _int, _int, _u64)
_ring_destroy = _sig("kvc_ring_destroy", None, _vp)
_ring_entries = _sig("kvc_ring_entries", _int, _vp)
_ring_prep = _sig("kvc_ring_prep", _int, _vp, _vp, ctypes.c_bool, _vp, _int, _u64, _u64, _vp)
_ring_submit = _sig("kvc_ring_submit", _int, _vp)


class _KeySeg(ctypes.Structure):
    _fields_ = [("iov", _vp), ("offset", _sz), ("length", _sz)]



_ring_prep_key = _sig("kvc_ring_prep_key", _int, _vp, _int, _int, _cp, ctypes.POINTER(_KeySeg),
                      _int, ctypes.c_uint32, ctypes.c_uint32, _vp)
_ring_wait = _sig("kvc_ring_wait", _int, _vp, ctypes.POINTER(_Completion), _int, _int, _vp)
_fd_register = _sig("kvc_fd_register", _int, _int, _u64)
_fd_deregister = _sig("kvc_fd_deregister", _int, _int)
_fd_sync = _sig("kvc_fd_sync", _int, _int)
_is_kvcfs = _sig("kvc_is_kvcfs", _int, _int)
_extract = _sig("kvc_extract_mount_point", _int, _cp, _sz, _cp)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _check(rc, what):
    if rc < 0:
        raise OSError(-rc, f"{what}: {os.strerror(-rc)}")
    return rc


def _check_gpu(rc, what):
    if rc < 0:
        reason = _gpu_last_error().decode(errors="replace")
        raise OSError(-rc, f"{what}: {os.strerror(-rc)}" + (f" ({reason})" if reason else ""))
    return rc


def gpu_available():
    """True when libkvc loaded a CUDA runtime that sees a GPU."""
    return _gpu_available() == 1


class _CudaArray:
    """__cuda_array_interface__ of device memory, holding its owner."""

    def __init__(self, pointer, size, owner):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1",
                                         "data": (pointer, False), "version": 3,
                                         "strides": None}
        self._owner = owner


import weakref  # noqa: E402

_live_iovs = weakref.WeakSet()  # to find the iov a buffer lies in
# An iov's handle is in use while a prepare call passes it to libkvc:
# close() waits for those calls to end before it frees the handle, so a
# thread that closes an iov never frees one under another's prepare.
_use_lock = threading.Condition()


def _use(iovs):
    """Mark iovs in use for a prepare call; ValueError if one is closed."""
    with _use_lock:
        for iov in iovs:
            if not iov._handle:
                raise ValueError("a segment's iov was closed")
        for iov in iovs:
            iov._users += 1


def _unuse(iovs):
    with _use_lock:
        for iov in iovs:
            iov._users -= 1
        _use_lock.notify_all()


def _address(buffer):
    """(address, bytes) of a numpy array, torch tensor, or buffer object."""
    if hasattr(buffer, "data_ptr"):  # torch, either device
        if not buffer.is_contiguous():
            raise ValueError("a key segment must be contiguous")
        nbytes = getattr(buffer, "nbytes", None)  # torch >= 1.11: one call
        return buffer.data_ptr(), nbytes if nbytes is not None else \
            buffer.numel() * buffer.element_size()
    for name in ("__cuda_array_interface__", "__array_interface__"):
        face = getattr(buffer, name, None)
        if face is not None:
            if face.get("strides") not in (None, ()):
                import numpy  # strides given: contiguous only
                if not numpy.asarray(buffer).flags.c_contiguous:
                    raise ValueError("a key segment must be contiguous")
            count = 1
            for n in face["shape"]:
                count *= n
            itemsize = int(face["typestr"][2:])
            return face["data"][0], count * itemsize
    view = memoryview(buffer)
    if not view.contiguous:
        raise ValueError("a key segment must be contiguous")
    if view.readonly:
        import numpy
        return _address(numpy.frombuffer(view, dtype=numpy.uint8))
    return ctypes.addressof(ctypes.c_char.from_buffer(view)), view.nbytes


_last_iov = None  # a weak reference to the iov the last segment lay in


def _iov_of(address, nbytes):
    """The live iov holding [address, address + nbytes): the last one found
    first (a key's segments mostly lie in one or a few iovs)."""
    global _last_iov
    iov = _last_iov() if _last_iov is not None else None
    if iov is not None and iov._handle and iov.base <= address and \
            address + nbytes <= iov.base + iov.size:
        return iov
    for iov in list(_live_iovs):
        if iov._handle and iov.base <= address and address + nbytes <= iov.base + iov.size:
            _last_iov = weakref.ref(iov)
            return iov
    raise ValueError("a key segment must lie inside a registered kvcfs.Iov")


def _check_segment(iov, offset, length):
    """A segment (or layer) of an open iov, its numbers 64-bit (ctypes
    would wrap them); ValueError otherwise. Whether it lies inside the iov
    is kvc-fuse's check (-EFAULT), as for any client."""
    if not isinstance(iov, Iov) or not iov._handle:
        raise ValueError("a segment's iov is closed or not a kvcfs.Iov")
    if not (0 <= offset < 1 << 64 and 0 <= length < 1 << 64):
        raise ValueError(f"a segment of {length} bytes at {offset}: not 64-bit numbers")


def _segment(seg):
    """(iov, offset, length) of a segment: a tuple, or a buffer lying in
    a registered iov."""
    if isinstance(seg, tuple):
        return seg
    address, nbytes = _address(seg)
    iov = _iov_of(address, nbytes)
    return iov, address - iov.base, nbytes


class Segments:
    """A key's segments resolved once: pass it where put_keys, get_keys or
    prepare_key take a list of segments, as many times as wanted. Each
    segment of the list is checked and its iov found here, not at every
    submission (a few microseconds a segment for torch tensors)."""

    def __init__(self, segments=(), _array=None, _count=0, _iovs=()):
        if _array is not None:
            self._array, self.count, self._iovs = _array, _count, _iovs
            return
        flat, iovs = [], {}
        for seg in segments:
            if isinstance(seg, tuple):
                iov, offset, length = seg
                _check_segment(iov, offset, length)
            else:  # found inside a live iov: open, in bounds
                address, length = _address(seg)
                iov = _iov_of(address, length)
                offset = address - iov.base
            handle = iov._handle  # read once: another thread may close it
            if not handle:
                raise ValueError("a segment's iov was closed")
            iovs[id(iov)] = iov
            flat += (handle.value, offset, length)
        self.count = len(flat) // 3
        if ctypes.sizeof(_KeySeg) == 3 * 8:  # the array as 64-bit words, at once
            self._array = (_KeySeg * max(1, self.count)).from_buffer_copy(
                _pyarray.array("Q", flat or [0, 0, 0]))
        else:
            self._array = (_KeySeg * max(1, self.count))(
                *[tuple(flat[i:i + 3]) for i in range(0, len(flat), 3)])
        # The iovs live as long as this, and are checked open at each use
        # (the array holds their handles).
        self._iovs = tuple(iovs.values())

    @property
    def nbytes(self):
        return sum(self._array[i].length for i in range(self.count))

    def __len__(self):
        return self.count


class Blocks:
    """A cache's blocks laid out by layer: layers is a list of up to
    KEY_MAX_SEGS buffers (torch tensors of either device, numpy arrays,
    memoryviews or (iov, offset, length) tuples), each inside a registered
    iov and holding num_blocks pages of one size back to back: a
    [num_blocks, ...] tensor per layer, or per layer and K/V (a buffer of
    two or more dimensions must have num_blocks as its first: pass a
    [2, num_blocks, ...] layer as its K and V halves). blocks[b] is the
    Segments of block b: page b of every layer, in the layers' order. Made
    in a few microseconds a key whatever the layer count, so a batch of
    keys of 32 or 64 segments is prepared as fast as one of whole pages.
    (Memory registered as iovs of two mounts: pass tuples, which name the
    iov; a buffer is taken to lie in whichever of them was found.)

        blocks = kvcfs.Blocks([kv[layer] for layer in range(layers)], num_blocks)
        ring.put_keys(keys, [(f"block-{b}", blocks[b]) for b in block_ids])
    """

    def __init__(self, layers, num_blocks):
        num_blocks = operator.index(num_blocks)
        if num_blocks < 1:
            raise ValueError("num_blocks must be at least 1")
        if ctypes.sizeof(_KeySeg) != 3 * 8:
            raise OSError(_errno.ENOTSUP, "kvcfs.Blocks needs 64-bit pointers")
        layers = list(layers)
        if not 1 <= len(layers) <= KEY_MAX_SEGS:
            raise ValueError(f"{len(layers)} layers: a key has 1 to {KEY_MAX_SEGS} segments")
        for layer in layers:
            shape = getattr(layer, "shape", None)
            if shape is not None and len(shape) >= 2 and shape[0] != num_blocks:
                raise ValueError(f"a layer of shape {tuple(shape)} is not {num_blocks} "
                                 "blocks along its first dimension")
        segs = [_segment(x) for x in layers]
        for iov, offset, length in segs:
            _check_segment(iov, offset, length)
        self.num_blocks = num_blocks
        self._iovs = tuple({id(iov): iov for iov, _, _ in segs}.values())
        self._geometry = []
        flat = []
        for iov, offset, length in segs:
            if length % num_blocks or length == 0:
                raise ValueError(f"a layer of {length} bytes is not {num_blocks} equal pages")
            page = length // num_blocks
            self._geometry.append((offset, page))
            handle = iov._handle  # read once: another thread may close it
            if not handle:
                raise ValueError("a layer's iov was closed")
            flat += [handle.value, offset, page]
        self._flat = flat
        self.page_bytes = [page for _, page in self._geometry]
        self.key_bytes = sum(self.page_bytes)

    def __len__(self):
        return self.num_blocks

    def __getitem__(self, block):
        block = operator.index(block)
        if not -self.num_blocks <= block < self.num_blocks:
            raise IndexError(f"block {block} of {self.num_blocks}")
        block %= self.num_blocks
        flat = self._flat[:]
        flat[1::3] = [offset + block * page for offset, page in self._geometry]
        count = len(self._geometry)
        array = (_KeySeg * count).from_buffer_copy(_pyarray.array("Q", flat))
        return Segments(_array=array, _count=count, _iovs=self._iovs)


class KeyDir:
    """A key directory: a directory of the mount, opened and registered
    for ring key operations (O_PATH: search permission suffices)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.fd = os.open(self.path, os.O_PATH | os.O_DIRECTORY)
        try:
            _check(_fd_register(self.fd, 0), "register key directory")
        except Exception:
            os.close(self.fd)
            raise

    def close(self):
        if self.fd >= 0:
            _fd_deregister(self.fd)
            os.close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class KeyBatch:
    """Key entries submitted on a ring; wait() returns each key's result
    (size or -errno) in the order given."""

    def __init__(self, ring, count):
        self._ring, self._results, self._left = ring, [None] * count, count

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._left:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done = self._ring.wait(min_results=1, timeout=left)
            if not done and deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("key batch")
            for c in done:
                batch, i = c.userdata
                batch._results[i] = c.result
                batch._left -= 1
        return self._results


def _b(text):
    return os.fsencode(text)


class Iov:
    """A shared-memory buffer registered with a kvcfs mount."""

    def __init__(self, handle, size, keep=None):
        self._handle = handle
        self._users = 0  # prepare calls passing the handle now (_use)
        self.size = size
        self.base = _iov_base(handle)
        self._keep = keep  # the caller's buffer object, kept alive with us
        _live_iovs.add(self)

    @classmethod
    def create(cls, mount, size, block_size=0, numa=-1):
        h = _vp()
        _check(_iov_create(ctypes.byref(h), _b(mount), size, block_size, numa, None), "iov create")
        return cls(h, size)

    @classmethod
    def open(cls, iov_id, mount, size, block_size=0, numa=-1):
        h = _vp()
        _check(_iov_open(ctypes.byref(h), bytes(iov_id), _b(mount), size, block_size, numa),
               "iov open")
        return cls(h, size)

    @classmethod
    def wrap(cls, buffer, mount, size=None, block_size=0, numa=-1, iov_id=None):
        """Register memory the caller maps from a shared file, such as a
        multiprocessing.shared_memory.SharedMemory's buf."""
        view = memoryview(buffer)
        size = view.nbytes if size is None else size
        base = ctypes.addressof(ctypes.c_char.from_buffer(view))
        h = _vp()
        _check(_iov_wrap(ctypes.byref(h), base, bytes(iov_id) if iov_id else None, _b(mount),
                         size, block_size, numa), "iov wrap")
        return cls(h, size, keep=view)

    @classmethod
    def create_device(cls, mount, size, device=0):
        """size bytes of GPU memory (cudaMalloc) on `device`, registered
        with the mount: ring reads land in it, ring writes read from it."""
        h = _vp()
        _check_gpu(_iov_create_device(ctypes.byref(h), _b(mount), size, device, None),
                   "device iov create")
        return cls(h, size)

    @classmethod
    def wrap_device(cls, memory, mount, size=None, device=None, iov_id=None):
        """Register GPU memory the caller owns: a CUDA torch tensor
        (contiguous; kept alive by the iov) or a device pointer (int, with
        size and device)."""
        keep = None
        if hasattr(memory, "data_ptr"):
            if not memory.is_cuda or not memory.is_contiguous():
                raise ValueError("wrap_device needs a contiguous CUDA tensor")
            keep, pointer = memory, memory.data_ptr()
            size = memory.numel() * memory.element_size() if size is None else size
            device = memory.device.index if device is None else device
        else:
            pointer = int(memory)
        if size is None or device is None:
            raise ValueError("wrap_device of a pointer needs size and device")
        h = _vp()
        _check_gpu(_iov_wrap_device(ctypes.byref(h), pointer, bytes(iov_id) if iov_id else None,
                                    _b(mount), size, device), "device iov wrap")
        return cls(h, size, keep=keep)

    @property
    def device(self):
        """The GPU of a device iov, or -1 for host memory."""
        return _iov_device(self._handle)

    def pin(self):
        """Page-lock a host iov for the GPU (cudaHostRegister)."""
        _check_gpu(_iov_pin(self._handle), "iov pin")

    def unpin(self):
        _check_gpu(_iov_unpin(self._handle), "iov unpin")

    def as_tensor(self, dtype=None, shape=None, offset=0, nbytes=None):
        """A torch tensor viewing the iov's memory, without a copy: on the
        GPU for a device iov, else on the CPU (pinned after pin(), so
        tensor.copy_(..., non_blocking=True) is asynchronous). Keep the iov
        open while its views are used."""
        import torch  # only here: nothing else in kvcfs needs torch

        nbytes = self.size - offset if nbytes is None else nbytes
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise ValueError("view outside the iov")
        if self.device >= 0:
            view = torch.as_tensor(_CudaArray(self.base + offset, nbytes, self),
                                   device=f"cuda:{self.device}")
        else:
            view = torch.frombuffer(self.memoryview()[offset:offset + nbytes], dtype=torch.uint8)
        if dtype is not None:
            view = view.view(dtype)
        return view.view(shape) if shape is not None else view

    @property
    def id(self):
        out = ctypes.create_string_buffer(16)
        _iov_id(self._handle, out)
        return out.raw

    def memoryview(self):
        if self.device >= 0:
            raise ValueError("a device iov's memory is on the GPU: use as_tensor()")
        return memoryview((ctypes.c_char * self.size).from_address(self.base)).cast("B")

    def unlink(self):
        _check(_iov_unlink(self._handle), "iov unlink")

    def close(self):
        with _use_lock:
            while self._users:
                _use_lock.wait()
            handle, self._handle = self._handle, None
        if handle:
            _iov_destroy(handle)
            self._keep = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Completion:
    __slots__ = ("index", "result", "userdata")

    def __init__(self, index, result, userdata):
        self.index, self.result, self.userdata = index, result, userdata

    def __repr__(self):
        return f"Completion(index={self.index}, result={self.result})"


class Ring:
    """A USRBIO ring for reads or for writes (not thread-safe, like 3FS)."""

    def __init__(self, mount, entries, for_read=True, io_depth=0, priority=0, timeout=0,
                 numa=-1, flags=0):
        h = _vp()
        _check(_ring_create(ctypes.byref(h), _b(mount), entries, for_read, io_depth,
                            priority or 0, int(timeout or 0), numa, flags), "ring create")
        self._handle = h
        self.for_read = for_read
        self.entries = _ring_entries(h)
        self._userdata = {}
        self._next_token = 1
        self._completions = (_Completion * self.entries)()

    def prepare(self, iov, read, fd, offset, length, iov_offset=0, userdata=None):
        token = self._next_token
        self._next_token += 1
        ptr = iov.base + iov_offset
        _use((iov,))
        try:
            rc = _ring_prep(self._handle, iov._handle, read, ptr, fd, offset, length, token)
        finally:
            _unuse((iov,))
        _check(rc, "ring prepare")
        self._userdata[token] = userdata
        return rc

    def submit(self):
        return _check(_ring_submit(self._handle), "ring submit")

    def prepare_key(self, op, keydir, name, segments=(), flags=0, timeout_ms=0,
                    userdata=None):
        """Queue one key entry (op: KEY_PUT ... KEY_WAIT); returns its slot.
        segments: a list of segments, or a Segments (Blocks' items)."""
        if not isinstance(segments, Segments):
            segments = Segments(segments)
        token = self._next_token
        self._next_token += 1
        fd = keydir.fd if isinstance(keydir, KeyDir) else int(keydir)
        _use(segments._iovs)  # open, and kept open until libkvc has read them
        try:
            rc = _ring_prep_key(self._handle, op, fd, os.fsencode(name), segments._array,
                                segments.count, flags, timeout_ms, token)
        finally:
            _unuse(segments._iovs)
        _check(rc, "ring prepare key")
        self._userdata[token] = userdata
        return rc

    def _keys(self, op, keydir, items, flags=0, timeout_ms=0):
        """Submit items ((name, segments) pairs, or names) as key entries,
        as many at a time as the ring takes; the batch's wait() gives the
        results in order."""
        items = list(items)
        batch = KeyBatch(self, len(items))
        queued = 0
        for i, item in enumerate(items):
            name, segs = (item, ()) if isinstance(item, (str, bytes)) else item
            while True:
                try:
                    self.prepare_key(op, keydir, name, segs, flags, timeout_ms, (batch, i))
                    break
                except OSError as e:
                    if e.errno != _errno.EAGAIN:
                        raise
                    self.submit()  # ring full: take some completions first
                    for c in self.wait(min_results=1):
                        b, j = c.userdata
                        b._results[j] = c.result
                        b._left -= 1
            queued += 1
        self.submit()
        return batch

    def put_keys(self, keydir, items, replace=False):
        """Put keys: items are (name, [segment, ...]); a key is its segments
        back to back. Results: the size, or -EEXIST (unless replace)."""
        return self._keys(KEY_PUT, keydir, items, KEY_REPLACE if replace else 0)

    def get_keys(self, keydir, items):
        """Get keys into (name, [segment, ...]): -EMSGSIZE unless the
        segments add up to the key's size."""
        return self._keys(KEY_GET, keydir, items)

    def exists_keys(self, keydir, names):
        return self._keys(KEY_EXISTS, keydir, names)

    def remove_keys(self, keydir, names):
        return self._keys(KEY_REMOVE, keydir, names)

    def wait_keys(self, keydir, names, timeout=None):
        """Complete each name with its size once it exists, or -ETIMEDOUT
        after timeout seconds (None: kvc-fuse's longest, an hour)."""
        ms = 0 if timeout is None else max(1, int(timeout * 1000))
        return self._keys(KEY_WAIT, keydir, names, timeout_ms=ms)

    def wait(self, max_results=0, min_results=0, timeout=None):
        """Completions (up to max_results; 0 = the ring's size), waiting for
        min_results or until timeout seconds pass (None = no limit)."""
        max_results = max_results or self.entries
        deadline = None
        if timeout is not None:
            t = time.time() + timeout
            deadline = ctypes.byref(_Timespec(int(t), int((t % 1) * 1e9)))
        n = _check(_ring_wait(self._handle, self._completions, min(max_results, self.entries),
                              min_results, deadline), "ring wait")
        out = []
        for c in self._completions[:n]:
            userdata = self._userdata.pop(c.userdata or 0, None)
            out.append(Completion(c.index, c.result, userdata))
        return out

    def close(self):
        if self._handle:
            _ring_destroy(self._handle)
            self._handle = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def register_fd(fd, flags=0):
    _check(_fd_register(fd, flags), "register fd")


def deregister_fd(fd):
    _check(_fd_deregister(fd), "deregister fd")


def fsync(fd):
    _check(_fd_sync(fd), "fsync")


def is_kvcfs(fd):
    return _is_kvcfs(fd) == 1


def extract_mount_point(path):
    out = ctypes.create_string_buffer(4096)
    rc = _extract(out, len(out), _b(path))
    if rc == -_errno.ENOENT:
        return None
    _check(rc, "extract mount point")
    return os.fsdecode(out.value)
