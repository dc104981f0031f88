"""The checker's helpers: assertions that name the failing line, the calls
Python lacks (getxattr with a given size, linkat, renameat2, utimensat), the
case registry, and the Context a case gets (root or not, the unprivileged
user it may drop to, whether the directory is on kvcfs). Standard library only."""
import ctypes
import errno
import os
import sys
import time
import traceback

TICK = 0.02  # several kernel clock ticks: a change after it must show in the times
HELPERS = {"check", "fails", "eq", "unprivileged", "as_other"}
libc = ctypes.CDLL(None, use_errno=True)
for _name in ("getxattr", "lgetxattr", "listxattr", "readlink"):
    getattr(libc, _name).restype = ctypes.c_ssize_t
RENAME_NOREPLACE = 1
AT_FDCWD = -100
AT_SYMLINK_NOFOLLOW = 0x100
AT_SYMLINK_FOLLOW = 0x400
UTIME_NOW, UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2


class Failed(Exception):
    pass


class Skip(Exception):
    """The case does not apply here (not counted)."""


def _where(tb_frames):
    frames = [f for f in tb_frames if os.path.basename(f.filename).startswith("posix_check")
              and f.name not in HELPERS]
    if not frames:
        return ""
    return f" [{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}: {frames[-1].line}]"


def check(cond, message):
    if not cond:
        raise Failed(message + _where(traceback.extract_stack()))


def eq(got, want, what):
    check(got == want, f"{what}: got {short(got)}, expected {short(want)}")


def name(code):
    return errno.errorcode.get(code, str(code))


def short(value):
    text = repr(value)
    return text if len(text) <= 80 else text[:60] + f"...({len(text)} chars)"


def fails(expected, fn, *args, **kw):
    """fn(*args) fails with one of the expected errnos (an int or a tuple)."""
    expected = (expected,) if isinstance(expected, int) else expected
    want = "/".join(name(e) for e in expected)
    what = f"{fn.__name__}({', '.join(short(a) for a in args)})"
    try:
        fn(*args, **kw)
    except OSError as e:
        check(e.errno in expected, f"{what}: {name(e.errno)}, expected {want}")
        return
    check(False, f"{what} succeeded, expected {want}")


def describe(e):
    if isinstance(e, Failed):
        return str(e)
    what = f"{name(e.errno)} ({e.strerror})" if isinstance(e, OSError) else repr(e)
    return f"unexpected {what}" + _where(traceback.extract_tb(e.__traceback__))


def later():
    time.sleep(TICK)


def write(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644):
    fd = os.open(path, flags, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def times(path, follow=True):
    st = os.stat(path, follow_symlinks=follow)
    return st.st_mtime_ns, st.st_ctime_ns


def newer(before, path, what, mtime=True, ctime=True, follow=True):
    m, c = times(path, follow)
    if mtime:
        check(m > before[0], f"{what}: mtime of {path} not updated")
    if ctime:
        check(c > before[1], f"{what}: ctime of {path} not updated")


def user_xattrs(path, follow=True):
    """The user.* names, less the filesystem's own read-only ones (kvcfs)."""
    return sorted(n for n in os.listxattr(path, follow_symlinks=follow)
                  if n.startswith("user.") and not n.startswith("user.kvc."))


def c_getxattr(path, attr, size, follow=True):
    buf = ctypes.create_string_buffer(max(size, 1))
    fn = libc.getxattr if follow else libc.lgetxattr
    n = fn(path.encode(), attr.encode(), buf if size else None, ctypes.c_size_t(size))
    if n < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return n, buf.raw[:n if size else 0]


def c_listxattr(path, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    n = libc.listxattr(path.encode(), buf if size else None, ctypes.c_size_t(size))
    if n < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return n


def linkat(old, new, flags):
    if libc.linkat(AT_FDCWD, old.encode(), AT_FDCWD, new.encode(), flags) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


def renameat2(old, new, flags):
    if libc.renameat2(AT_FDCWD, old.encode(), AT_FDCWD, new.encode(), flags) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


class Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def utimensat(path, atime, mtime, flags=0):
    """atime/mtime: (sec, nsec), or UTIME_NOW / UTIME_OMIT."""
    def spec(t):
        return Timespec(0, t) if isinstance(t, int) else Timespec(*t)
    ts = (Timespec * 2)(spec(atime), spec(mtime))
    if libc.utimensat(AT_FDCWD, path.encode(), ts, flags) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))


class Context:
    def __init__(self, root, other, kvcfs):
        self.root = root      # running as root (cases drop to `other` themselves)
        self.other = other    # pwd entry of the unprivileged user
        self.kvcfs = kvcfs

    def as_other(self, fn):
        """fn() in a child that dropped to the unprivileged user; its failure is ours."""
        sys.stdout.flush()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            message = ""
            try:
                drop(self.other)
                fn()
            except BaseException as e:  # noqa: B902 - reported through the pipe
                message = describe(e)
            os.write(w, message.encode())
            os._exit(0)
        os.close(w)
        chunks = []
        while chunk := os.read(r, 65536):
            chunks.append(chunk)
        os.close(r)
        os.waitpid(pid, 0)
        if chunks:
            raise Failed(f"as {self.other.pw_name}: " + b"".join(chunks).decode())

    def unprivileged(self, fn):
        return self.as_other(fn) if self.root else fn()


def drop(user):
    os.setgroups([])
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    check(os.geteuid() == user.pw_uid and os.getuid() == user.pw_uid, "privileges kept")


CASES = []


def case(prepare=None):
    """prepare(ctx) runs as root in the case's directory before the case."""
    def register(fn):
        CASES.append((fn.__name__, fn, prepare))
        return fn
    return register
