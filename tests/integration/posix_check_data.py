"""Checker cases about content and attributes: O_TRUNC, truncate and
O_APPEND sizes, times, user.* xattrs, kvcfs's own read-only attributes."""
import errno
import os
import stat
import time

from posix_check_lib import (AT_SYMLINK_NOFOLLOW, UTIME_NOW, UTIME_OMIT, Skip, c_getxattr,
                             c_listxattr, case, check, eq, fails, later, name, newer, read,
                             times, user_xattrs, utimensat, write)


# ---------------------------------------------------------------- O_TRUNC, sizes

@case()
def otrunc_longer_file(ctx):
    write("f", b"hello world\n")
    before = times("f")
    later()
    fd = os.open("f", os.O_WRONLY | os.O_TRUNC)
    eq(os.fstat(fd).st_size, 0, "fstat size after open(O_TRUNC)")
    eq(os.stat("f").st_size, 0, "stat size after open(O_TRUNC)")
    newer(before, "f", "open(O_TRUNC)")
    os.write(fd, b"hi\n")
    os.close(fd)
    eq((os.stat("f").st_size, read("f")), (3, b"hi\n"), "size, content after close")
    time.sleep(1.2)  # past attribute caches and write-back of the old size
    eq((os.stat("f").st_size, read("f")), (3, b"hi\n"), "size, content a moment later")


@case()
def otrunc_empty_file(ctx):
    write("f", b"")
    before = times("f")
    later()
    os.close(os.open("f", os.O_WRONLY | os.O_TRUNC))
    eq(os.stat("f").st_size, 0, "size")
    newer(before, "f", "open(O_TRUNC) of an empty file")


@case()
def otrunc_with_ocreat_existing(ctx):
    write("f", b"x" * 1000, mode=0o600)
    ino = os.stat("f").st_ino
    fd = os.open("f", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    st = os.fstat(fd)
    os.close(fd)
    eq((st.st_ino, st.st_size, stat.S_IMODE(st.st_mode)), (ino, 0, 0o600),
       "ino, size, mode after O_CREAT|O_TRUNC of an existing file")
    eq(os.stat("f").st_size, 0, "stat size")


@case()
def otrunc_seen_by_other_fd(ctx):
    write("f", os.urandom(3 << 20))
    reader = os.open("f", os.O_RDONLY)
    os.close(os.open("f", os.O_WRONLY | os.O_TRUNC))
    eq(os.fstat(reader).st_size, 0, "fstat of another open fd")
    eq(os.pread(reader, 100, 0), b"", "read through another open fd")
    os.close(reader)
    write("f", b"0123456789", os.O_WRONLY | os.O_TRUNC)
    eq(read("f"), b"0123456789", "rewrite after O_TRUNC of a 3 MiB file")
    os.truncate("f", 3 << 20)
    data = read("f")
    eq((len(data), data[:10], data[10:].count(0)), (3 << 20, b"0123456789", (3 << 20) - 10),
       "regrown file: old bytes past the truncation must read as zeros")


@case()
def ftruncate_grow_and_shrink(ctx):
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(fd, b"abc")
    before = (os.fstat(fd).st_mtime_ns, os.fstat(fd).st_ctime_ns)
    later()
    os.ftruncate(fd, 10)
    newer(before, "f", "ftruncate")
    eq((os.fstat(fd).st_size, os.pread(fd, 20, 0)), (10, b"abc" + b"\0" * 7), "grown")
    os.ftruncate(fd, 2)
    eq((os.fstat(fd).st_size, os.pread(fd, 20, 0)), (2, b"ab"), "shrunk")
    os.ftruncate(fd, 6)
    eq(os.pread(fd, 20, 0), b"ab\0\0\0\0", "regrown: zeros, not the old bytes")
    os.close(fd)
    data = os.urandom((5 << 20) // 2)
    write("big", data)
    os.truncate("big", 100000)
    os.truncate("big", 3 << 20)
    got = read("big")
    eq((len(got), got[:100000] == data[:100000], got[100000:].count(0)),
       (3 << 20, True, (3 << 20) - 100000), "2.5 MiB cut to 100000 and regrown to 3 MiB")
    fd = os.open("f", os.O_RDONLY)
    fails((errno.EINVAL, errno.EBADF), os.ftruncate, fd, 0)
    os.close(fd)


@case()
def o_append_writes(ctx):
    write("f", b"abc")
    fd = os.open("f", os.O_WRONLY | os.O_APPEND)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"def")
    eq(read("f"), b"abcdef", "O_APPEND after lseek(0)")
    other = os.open("f", os.O_WRONLY | os.O_APPEND)
    for f, chunk in ((fd, b"1"), (other, b"2"), (fd, b"3")):
        os.write(f, chunk)
    os.close(fd)
    os.close(other)
    eq(read("f"), b"abcdef123", "two appenders")
    write("f", b"x", os.O_WRONLY | os.O_APPEND | os.O_TRUNC)
    eq(read("f"), b"x", "O_APPEND|O_TRUNC")


@case()
def write_past_end_leaves_zeros(ctx):
    fd = os.open("f", os.O_RDWR | os.O_CREAT, 0o644)
    os.pwrite(fd, b"z", 5000)
    eq(os.fstat(fd).st_size, 5001, "size")
    eq(os.pread(fd, 6000, 0), b"\0" * 5000 + b"z", "the hole reads as zeros")
    eq(os.pread(fd, 10, 9000), b"", "read past the end")
    os.close(fd)


# ---------------------------------------------------------------- times

@case()
def times_parent_directory(ctx):
    os.mkdir("d")
    write("src", b"")
    steps = [("create", lambda: write("d/f", b"")), ("mkdir", lambda: os.mkdir("d/s")),
             ("symlink", lambda: os.symlink("f", "d/l")), ("link", lambda: os.link("src", "d/h")),
             ("mkfifo", lambda: os.mkfifo("d/p")), ("rename within", lambda: os.rename("d/f", "d/g")),
             ("rename into", lambda: os.rename("src", "d/src")), ("unlink", lambda: os.unlink("d/g")),
             ("rmdir", lambda: os.rmdir("d/s")), ("rename out", lambda: os.rename("d/h", "h"))]
    for what, step in steps:
        before = times("d")
        later()
        step()
        newer(before, "d", what)


@case()
def times_chmod_chown_write(ctx):
    write("f", b"data")
    for what, step in (("chmod", lambda: os.chmod("f", 0o600)),
                       ("chown", lambda: os.chown("f", os.geteuid(), os.getegid()))):
        before = times("f")
        later()
        step()
        newer(before, "f", what, mtime=False)
        eq(times("f")[0], before[0], f"mtime after {what}")
    if ctx.root:
        before = times("f")
        later()
        os.chown("f", 1234, 5678)
        st = os.stat("f")
        eq((st.st_uid, st.st_gid), (1234, 5678), "owner after chown")
        newer(before, "f", "chown to another user", mtime=False)
    before = times("f")
    later()
    write("f", b"more", os.O_WRONLY | os.O_APPEND)
    newer(before, "f", "write")


@case()
def times_utimensat(ctx):
    write("f", b"")
    before = times("f")
    later()
    os.utime("f", ns=(1_000_000_123_456_789, 2_000_000_987_654_321))
    st = os.stat("f")
    eq((st.st_atime_ns, st.st_mtime_ns), (1_000_000_123_456_789, 2_000_000_987_654_321),
       "exact times")
    check(st.st_ctime_ns > before[1], "utimensat did not update ctime")
    utimensat("f", UTIME_OMIT, (3_000_000, 5))
    st = os.stat("f")
    eq((st.st_atime_ns, st.st_mtime_ns), (1_000_000_123_456_789, 3_000_000_000_000_005),
       "UTIME_OMIT keeps atime")
    start = time.time_ns()
    later()
    utimensat("f", UTIME_NOW, UTIME_NOW)
    st = os.stat("f")
    check(st.st_mtime_ns > start - 10_000_000 and st.st_atime_ns > start - 10_000_000,
          "UTIME_NOW: times are not now")
    fd = os.open("f", os.O_RDONLY)
    os.utime(fd, ns=(7_000_000_000, 8_000_000_000))
    os.close(fd)
    eq(os.stat("f").st_mtime_ns, 8_000_000_000, "futimens")
    os.symlink("f", "l")
    utimensat("l", (11, 0), (12, 0), AT_SYMLINK_NOFOLLOW)
    eq((os.lstat("l").st_mtime_ns, os.stat("f").st_mtime_ns), (12_000_000_000, 8_000_000_000),
       "utimensat(AT_SYMLINK_NOFOLLOW) sets the link's times only")


@case()
def setgid_directory_inheritance(ctx):
    if not ctx.root:
        raise Skip("needs root (chown to another group)")
    os.mkdir("g")
    os.chown("g", 0, 4321)
    os.chmod("g", 0o2775)
    write("g/f", b"")
    os.mkdir("g/sub")
    eq(os.stat("g/f").st_gid, 4321, "gid of a file created in a setgid dir")
    st = os.stat("g/sub")
    eq((st.st_gid, bool(st.st_mode & stat.S_ISGID)), (4321, True), "gid, setgid of a subdir")


# ---------------------------------------------------------------- xattrs

@case()
def xattr_set_get_list_remove(ctx):
    write("f", b"")
    before = times("f")
    later()
    os.setxattr("f", "user.a", b"1")
    newer(before, "f", "setxattr", mtime=False)
    os.setxattr("f", "user.b", b"\0bin\xffary\0")
    eq((os.getxattr("f", "user.a"), os.getxattr("f", "user.b")), (b"1", b"\0bin\xffary\0"), "get")
    eq(user_xattrs("f"), ["user.a", "user.b"], "list")
    os.setxattr("f", "user.a", b"22")
    eq(os.getxattr("f", "user.a"), b"22", "replaced value")
    os.setxattr("f", "user.empty", b"")
    eq(os.getxattr("f", "user.empty"), b"", "empty value")
    fd = os.open("f", os.O_RDONLY)
    eq(os.getxattr(fd, "user.a"), b"22", "fgetxattr")
    os.close(fd)
    before = times("f")
    later()
    os.removexattr("f", "user.a")
    newer(before, "f", "removexattr", mtime=False)
    fails(errno.ENODATA, os.getxattr, "f", "user.a")
    fails(errno.ENODATA, os.removexattr, "f", "user.a")
    fails(errno.ENODATA, os.getxattr, "f", "user.never")
    eq(user_xattrs("f"), ["user.b", "user.empty"], "list after remove")


@case()
def xattr_create_replace_flags(ctx):
    write("f", b"")
    os.setxattr("f", "user.a", b"1", os.XATTR_CREATE)
    fails(errno.EEXIST, os.setxattr, "f", "user.a", b"2", os.XATTR_CREATE)
    eq(os.getxattr("f", "user.a"), b"1", "after a refused XATTR_CREATE")
    fails(errno.ENODATA, os.setxattr, "f", "user.b", b"2", os.XATTR_REPLACE)
    fails(errno.ENODATA, os.getxattr, "f", "user.b")
    os.setxattr("f", "user.a", b"3", os.XATTR_REPLACE)
    eq(os.getxattr("f", "user.a"), b"3", "XATTR_REPLACE")


@case()
def xattr_buffer_sizes(ctx):
    write("f", b"")
    os.setxattr("f", "user.ten", b"0123456789")
    eq(c_getxattr("f", "user.ten", 0)[0], 10, "getxattr(size 0) gives the length")
    fails(errno.ERANGE, c_getxattr, "f", "user.ten", 4)
    eq(c_getxattr("f", "user.ten", 10), (10, b"0123456789"), "getxattr of the exact size")
    need = c_listxattr("f", 0)
    check(need >= len("user.ten") + 1, f"listxattr(size 0) = {need}")
    fails(errno.ERANGE, c_listxattr, "f", 3)
    eq(c_listxattr("f", need), need, "listxattr of the size it asked for")


@case()
def xattr_limits(ctx):
    write("f", b"")
    value = os.urandom(4000)
    os.setxattr("f", "user.v", value)
    eq(os.getxattr("f", "user.v"), value, "a 4000-byte value")
    fails(errno.E2BIG, os.setxattr, "f", "user.big", b"x" * 65537)
    try:  # the largest value Linux takes; a filesystem may lack room for it
        os.setxattr("f", "user.max", b"m" * 65536)
        eq(os.getxattr("f", "user.max"), b"m" * 65536, "a 64 KiB value")
    except OSError as e:
        check(e.errno in (errno.ENOSPC, errno.E2BIG), f"a 64 KiB value: {name(e.errno)}")
    write("g", b"")  # ext4 keeps one block for all of a file's xattrs
    long_name = "user." + "n" * 250
    os.setxattr("g", long_name, b"v")
    eq(os.getxattr("g", long_name), b"v", "a 255-byte name")
    fails(errno.ERANGE, os.setxattr, "g", long_name + "n", b"v")
    fails(errno.EINVAL, os.setxattr, "g", "user.", b"v")
    fails(errno.EOPNOTSUPP, os.setxattr, "g", "nosuchnamespace.x", b"v")


@case()
def xattr_on_directory(ctx):
    os.mkdir("d")
    os.setxattr("d", "user.dir", b"yes")
    eq(os.getxattr("d", "user.dir"), b"yes", "get on a dir")
    eq(user_xattrs("d"), ["user.dir"], "list on a dir")
    os.removexattr("d", "user.dir")
    eq(user_xattrs("d"), [], "list after remove")


@case()
def xattr_on_symlink_and_fifo(ctx):
    write("f", b"")
    os.symlink("f", "l")
    os.mkfifo("p")
    for special in ("l", "p"):
        fails(errno.EPERM, os.setxattr, special, "user.a", b"1", follow_symlinks=False)
        fails(errno.ENODATA, os.getxattr, special, "user.a", follow_symlinks=False)
    os.setxattr("l", "user.through", b"link")  # follows the link
    eq(os.getxattr("f", "user.through"), b"link", "setxattr through a symlink sets the target")
    eq(user_xattrs("l", follow=False), [], "the link itself has none")


@case()
def xattr_follows_the_inode(ctx):
    write("f", b"")
    os.setxattr("f", "user.k", b"v")
    os.link("f", "g")
    eq(os.getxattr("g", "user.k"), b"v", "via a hard link")
    os.rename("f", "h")
    eq(os.getxattr("h", "user.k"), b"v", "after rename")
    write("other", b"")
    os.rename("h", "other")
    eq(os.getxattr("other", "user.k"), b"v", "renamed over another file")
    os.unlink("g")
    os.unlink("other")
    write("other", b"")
    eq(user_xattrs("other"), [], "a new file at a reused name")


@case()
def kvcfs_layout_attributes(ctx):
    if not ctx.kvcfs:
        raise Skip("not a kvcfs mount")
    write("f", b"")
    st = os.stat("f")
    eq(os.getxattr("f", "user.kvc.inode"), str(st.st_ino).encode(), "user.kvc.inode")
    layout = os.getxattr("f", "user.kvc.layout")
    check(layout.startswith(b"chunk_size="), f"user.kvc.layout: {layout!r}")
    for attr in ("user.kvc.layout", "user.kvc.inode"):
        fails(errno.EPERM, os.setxattr, "f", attr, b"forged")
        fails(errno.EPERM, os.removexattr, "f", attr)
    eq(os.getxattr("f", "user.kvc.layout"), layout, "user.kvc.layout after refused changes")
    os.setxattr("f", "user.mine", b"1")
    eq(os.getxattr("f", "user.kvc.layout"), layout, "user.kvc.layout beside a user xattr")
