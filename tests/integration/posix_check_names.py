"""Checker cases about names: object types, symlinks, hard links, errno
rules, other users' files (sticky directories, permissions), rename."""
import ctypes
import errno
import os
import shutil
import socket
import stat
import tempfile

from posix_check_lib import (AT_SYMLINK_FOLLOW, RENAME_NOREPLACE, Skip, case, check, eq, fails,
                             later, libc, linkat, newer, read, renameat2, times, write)


# ---------------------------------------------------------------- object types

@case()
def type_regular(ctx):
    fd = os.open("f", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o640)
    st = os.fstat(fd)
    os.close(fd)
    check(stat.S_ISREG(st.st_mode), f"not a regular file: {st.st_mode:o}")
    eq(stat.S_IMODE(st.st_mode), 0o640, "mode")
    eq((st.st_size, st.st_nlink), (0, 1), "size, nlink")
    eq((st.st_uid, st.st_gid), (os.geteuid(), os.getegid()), "owner")
    eq(os.stat("f").st_ino, st.st_ino, "inode by name")
    old = os.umask(0o027)
    try:
        write("masked", b"", mode=0o666)
        os.mkdir("masked-dir", 0o777)
    finally:
        os.umask(old)
    eq(stat.S_IMODE(os.stat("masked").st_mode), 0o640, "mode under umask 027")
    eq(stat.S_IMODE(os.stat("masked-dir").st_mode), 0o750, "dir mode under umask 027")


@case()
def type_directory(ctx):
    links = os.stat(".").st_nlink
    os.mkdir("d", 0o750)
    st = os.stat("d")
    check(stat.S_ISDIR(st.st_mode), "not a directory")
    eq(stat.S_IMODE(st.st_mode), 0o750, "mode")
    eq(st.st_nlink, 2, "nlink of a new directory")
    eq(os.stat(".").st_nlink, links + 1, "parent nlink after mkdir")
    eq(os.listdir("d"), [], "entries")
    os.rmdir("d")
    eq(os.stat(".").st_nlink, links, "parent nlink after rmdir")


@case()
def type_symlink(ctx):
    os.symlink("some/target", "l")
    st = os.lstat("l")
    check(stat.S_ISLNK(st.st_mode), f"lstat: not a symlink: {st.st_mode:o}")
    eq(stat.S_IMODE(st.st_mode), 0o777, "symlink mode")
    eq(st.st_size, len("some/target"), "symlink size")
    eq(os.readlink("l"), "some/target", "readlink")
    eq((st.st_uid, st.st_nlink), (os.geteuid(), 1), "owner, nlink")


@case()
def type_hard_link(ctx):
    write("f", b"data")
    os.link("f", "g")
    a, b = os.stat("f"), os.stat("g")
    eq(a.st_ino, b.st_ino, "inode of both names")
    eq((a.st_nlink, b.st_nlink), (2, 2), "nlink")


@case()
def type_fifo(ctx):
    os.mkfifo("p", 0o600)
    st = os.stat("p")
    check(stat.S_ISFIFO(st.st_mode), f"mkfifo: not a fifo: {st.st_mode:o}")
    eq(stat.S_IMODE(st.st_mode), 0o600, "mode")
    os.mknod("q", stat.S_IFIFO | 0o644)
    check(stat.S_ISFIFO(os.stat("q").st_mode), "mknod S_IFIFO: not a fifo")
    r = os.open("p", os.O_RDONLY | os.O_NONBLOCK)
    w = os.open("p", os.O_WRONLY)
    os.write(w, b"through the fifo")
    eq(os.read(r, 100), b"through the fifo", "data through the fifo")
    os.close(w)
    os.close(r)


@case()
def type_mknod_regular(ctx):
    os.mknod("r", stat.S_IFREG | 0o600)
    os.mknod("r0", 0o640)  # no type: a regular file
    for path, mode in (("r", 0o600), ("r0", 0o640)):
        st = os.stat(path)
        check(stat.S_ISREG(st.st_mode), f"{path}: not a regular file: {st.st_mode:o}")
        eq((stat.S_IMODE(st.st_mode), st.st_size), (mode, 0), f"{path} mode, size")
    write("r", b"x")
    eq(read("r"), b"x", "content")


@case()
def type_unix_socket(ctx):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("sock")
    server.listen(1)
    check(stat.S_ISSOCK(os.lstat("sock").st_mode), "bind: not a socket")
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect("sock")
    peer, _ = server.accept()
    client.sendall(b"ping")
    eq(peer.recv(10), b"ping", "data through the socket")
    for s in (peer, client, server):
        s.close()
    check(stat.S_ISSOCK(os.lstat("sock").st_mode), "the socket file went with the socket")
    again = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fails(errno.EADDRINUSE, again.bind, "sock")
    again.close()
    os.unlink("sock")
    check(not os.path.lexists("sock"), "unlink left the socket")


@case()
def type_devices(ctx):
    char, block = os.makedev(1, 3), os.makedev(7, 0)
    if not ctx.root:
        fails(errno.EPERM, os.mknod, "c", stat.S_IFCHR | 0o600, char)
        fails(errno.EPERM, os.mknod, "b", stat.S_IFBLK | 0o600, block)
        check(not os.path.lexists("c") and not os.path.lexists("b"), "a refused mknod left a name")
        return
    os.mknod("c", stat.S_IFCHR | 0o600, char)
    os.mknod("b", stat.S_IFBLK | 0o640, block)
    c, b = os.lstat("c"), os.lstat("b")
    check(stat.S_ISCHR(c.st_mode), f"not a char device: {c.st_mode:o}")
    check(stat.S_ISBLK(b.st_mode), f"not a block device: {b.st_mode:o}")
    eq((c.st_rdev, b.st_rdev), (char, block), "st_rdev")
    eq((stat.S_IMODE(c.st_mode), stat.S_IMODE(b.st_mode)), (0o600, 0o640), "modes")


@case()
def readdir_lists_every_type(ctx):
    write("f", b"")
    os.mkdir("d")
    os.symlink("f", "l")
    os.mkfifo("p")
    os.link("f", "h")
    entries = {e.name: e for e in os.scandir(".")}
    eq(sorted(entries), ["d", "f", "h", "l", "p"], "names")
    for n, e in entries.items():
        eq(e.inode(), os.lstat(n).st_ino, f"d_ino of {n}")
    check(entries["d"].is_dir(follow_symlinks=False), "d: not a dir in readdir")
    check(entries["l"].is_symlink(), "l: not a symlink in readdir")
    check(entries["f"].is_file(follow_symlinks=False), "f: not a file in readdir")


# ---------------------------------------------------------------- symlinks

@case()
def symlink_targets_and_readlink(ctx):
    targets = ["plain", "a/b/../c", "/absolute/path/x", "with space and \u00fcn\u00efcode",
               "dots/./..//x/", "t" * 4095]
    for i, target in enumerate(targets):
        os.symlink(target, f"l{i}")
        eq(os.lstat(f"l{i}").st_size, len(target.encode()), f"lstat size of l{i}")
        eq(os.readlink(f"l{i}"), target, f"readlink l{i}")
    buf = ctypes.create_string_buffer(16)
    n = libc.readlink(b"l0", buf, ctypes.c_size_t(3))
    eq((n, buf.raw[:3]), (3, b"pla"), "readlink into a 3-byte buffer truncates")
    fails(errno.ENAMETOOLONG, os.symlink, "t" * 4096, "too-long")
    fails(errno.ENOENT, os.symlink, "", "empty")
    write("f", b"")
    fails(errno.EINVAL, os.readlink, "f")
    fails(errno.ENOENT, os.readlink, "missing")


@case()
def symlink_lstat_vs_stat(ctx):
    write("f", b"12345")
    os.mkdir("d")
    os.symlink("f", "lf")
    os.symlink("d", "ld")
    lst, st, target = os.lstat("lf"), os.stat("lf"), os.stat("f")
    check(stat.S_ISLNK(lst.st_mode) and lst.st_size == 1, "lstat of the link")
    check(stat.S_ISREG(st.st_mode), "stat through the link: not the file")
    eq((st.st_ino, st.st_size), (target.st_ino, 5), "stat through the link")
    fd = os.open("lf", os.O_RDONLY)
    eq(os.fstat(fd).st_ino, target.st_ino, "fstat of the opened link")
    os.close(fd)
    check(stat.S_ISDIR(os.stat("ld").st_mode) and stat.S_ISLNK(os.lstat("ld").st_mode),
          "link to a directory")
    os.chmod("lf", 0o600)
    eq(stat.S_IMODE(os.stat("f").st_mode), 0o600, "chmod through the link")
    check(stat.S_ISLNK(os.lstat("lf").st_mode), "chmod changed the link")


@case()
def symlink_loops(ctx):
    os.symlink("b", "a")
    os.symlink("a", "b")
    os.symlink("self", "self")
    for path in ("a", "self", "a/x"):
        fails(errno.ELOOP, os.stat, path)
        fails(errno.ELOOP, os.open, path, os.O_RDONLY)
    fails(errno.ELOOP, os.open, "a", os.O_CREAT | os.O_WRONLY, 0o644)
    fails(errno.ELOOP, os.listdir, "self")
    check(stat.S_ISLNK(os.lstat("a").st_mode), "lstat of a loop")
    write("target", b"end")
    os.symlink("target", "c40")
    for i in range(39, -1, -1):
        os.symlink(f"c{i + 1}", f"c{i}")
    eq(read("c1"), b"end", "a chain of 40 links resolves")
    fails(errno.ELOOP, os.open, "c0", os.O_RDONLY)  # 41 links
    os.symlink("target", "lt")
    fails(errno.ELOOP, os.open, "lt", os.O_RDONLY | os.O_NOFOLLOW)
    fails(errno.ELOOP, os.open, "lt", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    os.close(os.open("target", os.O_RDONLY | os.O_NOFOLLOW))


@case()
def symlink_dangling(ctx):
    os.symlink("missing", "dl")
    check(stat.S_ISLNK(os.lstat("dl").st_mode), "lstat of a dangling link")
    fails(errno.ENOENT, os.stat, "dl")
    fails(errno.ENOENT, os.open, "dl", os.O_RDONLY)
    check(os.path.lexists("dl") and not os.path.exists("dl"), "exists/lexists")
    eq(os.readlink("dl"), "missing", "readlink")
    os.symlink("other", "dl2")
    fails(errno.EEXIST, os.open, "dl2", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    check(not os.path.lexists("other"), "O_EXCL through a dangling link created its target")
    write("dl", b"created through the link", os.O_WRONLY | os.O_CREAT, 0o644)
    check(stat.S_ISREG(os.lstat("missing").st_mode), "O_CREAT did not create the target")
    eq(read("missing"), b"created through the link", "target content")
    os.symlink("nodir/x", "dl3")
    fails(errno.ENOENT, os.open, "dl3", os.O_CREAT | os.O_WRONLY, 0o644)
    os.unlink("dl")
    eq(read("missing"), b"created through the link", "unlink of the link kept the target")


@case()
def symlink_to_directory(ctx):
    os.makedirs("a/real")
    write("a/real/f", b"inside")
    os.symlink("a/real", "rel")
    os.symlink(os.path.abspath("a/real"), "abs")
    os.symlink("real", "a/sibling")  # relative to the link's own directory
    for link in ("rel", "abs", "a/sibling", "rel/"):
        eq(os.listdir(link), ["f"], f"listdir {link}")
        eq(read(os.path.join(link, "f")), b"inside", f"read through {link}")
    write("rel/new", b"n")
    eq(read("a/real/new"), b"n", "create through the link")
    eq(os.stat("rel/..").st_ino, os.stat("a").st_ino, "'..' through the link is physical")
    here = os.getcwd()
    os.chdir("rel")
    try:
        eq(os.getcwd(), os.path.join(here, "a", "real"), "getcwd after chdir through the link")
    finally:
        os.chdir(here)
    fails(errno.ENOTDIR, os.rmdir, "rel")
    os.unlink("rel")
    check(os.path.isdir("a/real") and not os.path.lexists("rel"), "unlink of the link")


# ---------------------------------------------------------------- hard links

@case()
def link_nlink_counts(ctx):
    write("f", b"shared")
    fd = os.open("f", os.O_RDONLY)
    os.link("f", "g")
    os.link("g", "h")
    for n in "fgh":
        eq(os.stat(n).st_nlink, 3, f"nlink of {n}")
    eq(os.fstat(fd).st_nlink, 3, "fstat nlink")
    os.unlink("g")
    eq((os.stat("f").st_nlink, os.stat("h").st_nlink, os.fstat(fd).st_nlink), (2, 2, 2),
       "nlink after unlink")
    os.rename("h", "k")
    eq(os.stat("k").st_nlink, 2, "nlink after rename")
    os.unlink("f")
    eq((os.stat("k").st_nlink, read("k")), (1, b"shared"), "last name")
    os.close(fd)


@case()
def link_ctime(ctx):
    write("f", b"x")
    steps = (("link", lambda: os.link("f", "g")), ("unlink", lambda: os.unlink("g")),
             ("rename", lambda: os.rename("f", "f2")), ("chmod", lambda: os.chmod("f2", 0o600)))
    path = "f"
    for what, step in steps:
        before = times(path)
        later()
        step()
        path = "f2" if what == "rename" else path
        newer(before, path, what, mtime=False)
        eq(times(path)[0], before[0], f"mtime after {what}")


@case()
def link_data_shared(ctx):
    write("f", b"one")
    os.link("f", "g")
    write("g", b"two", os.O_WRONLY | os.O_APPEND)
    eq(read("f"), b"onetwo", "write via g, read via f")
    os.truncate("f", 2)
    eq((os.stat("g").st_size, read("g")), (2, b"on"), "truncate via f seen via g")
    os.unlink("f")
    eq(read("g"), b"on", "data after the other name went")


@case()
def link_errors(ctx):
    write("f", b"")
    os.mkdir("d")
    os.symlink("f", "l")
    os.mkfifo("p")
    for existing in ("f", "d", "l", "p"):
        fails(errno.EEXIST, os.link, "f", existing)
    fails(errno.EPERM, os.link, "d", "dlink")
    fails(errno.ENOENT, os.link, "missing", "x")
    fails(errno.ENOENT, os.link, "f", "nodir/x")
    fails(errno.ENOTDIR, os.link, "f", "f/x")
    other = tempfile.mkdtemp(prefix="posix-check-exdev-")
    try:
        if os.stat(other).st_dev != os.stat(".").st_dev:
            fails(errno.EXDEV, os.link, "f", os.path.join(other, "x"))
            fails(errno.EXDEV, os.rename, "f", os.path.join(other, "x"))
    finally:
        shutil.rmtree(other, ignore_errors=True)


@case()
def link_to_symlink_itself(ctx):
    write("f", b"target")
    os.symlink("f", "l")
    os.link("l", "hl", follow_symlinks=False)
    st = os.lstat("hl")
    check(stat.S_ISLNK(st.st_mode), "a hard link to a symlink is a symlink")
    eq((st.st_ino, st.st_nlink, os.readlink("hl")), (os.lstat("l").st_ino, 2, "f"), "ino, nlink")
    linkat("l", "hf", AT_SYMLINK_FOLLOW)
    eq(os.lstat("hf").st_ino, os.stat("f").st_ino, "linkat(AT_SYMLINK_FOLLOW) links the target")


@case()
def link_unlink_last_while_open(ctx):
    data = os.urandom(300000)
    write("f", data)
    fd = os.open("f", os.O_RDWR)
    os.unlink("f")
    check(not os.path.lexists("f") and os.listdir(".") == [], "the name is gone")
    eq(os.fstat(fd).st_nlink, 0, "fstat nlink of an unlinked open file")
    eq(os.pread(fd, len(data) + 10, 0), data, "data through the fd")
    os.pwrite(fd, b"more", len(data))
    eq(os.pread(fd, 10, len(data)), b"more", "write through the fd")
    eq(os.fstat(fd).st_size, len(data) + 4, "size through the fd")
    os.close(fd)


# ---------------------------------------------------------------- errno rules

def _one_of_each():
    write("f", b"")
    os.mkdir("d")
    os.symlink("f", "l")
    os.symlink("missing", "dangling")
    os.mkfifo("p")
    return ("f", "d", "l", "dangling", "p")


@case()
def errno_eexist(ctx):
    for existing in _one_of_each():
        fails(errno.EEXIST, os.mkdir, existing)
        fails(errno.EEXIST, os.mkfifo, existing)
        fails(errno.EEXIST, os.mknod, existing, stat.S_IFREG | 0o600)
        fails(errno.EEXIST, os.symlink, "x", existing)
        fails(errno.EEXIST, os.link, "f", existing)
        fails(errno.EEXIST, os.open, existing, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    check(not os.path.lexists("missing"), "a refused create made the dangling link's target")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fails(errno.EADDRINUSE, s.bind, "f")
    s.close()


@case()
def errno_enoent(ctx):
    calls = [(os.open, "missing", os.O_RDONLY), (os.stat, "missing"), (os.lstat, "missing"),
             (os.unlink, "missing"), (os.rmdir, "missing"), (os.rename, "missing", "x"),
             (os.readlink, "missing"), (os.chmod, "missing", 0o644), (os.listdir, "missing"),
             (os.open, "nodir/f", os.O_CREAT | os.O_WRONLY, 0o644), (os.mkdir, "nodir/d"),
             (os.symlink, "x", "nodir/l"), (os.mkfifo, "nodir/p"), (os.stat, ""),
             (os.truncate, "missing", 0), (os.listxattr, "missing")]
    for fn, *args in calls:
        fails(errno.ENOENT, fn, *args)


@case()
def errno_enotdir(ctx):
    write("f", b"")
    os.mkdir("d")
    os.symlink("f", "l")
    for fn, *args in [(os.stat, "f/x"), (os.open, "f/x", os.O_CREAT | os.O_WRONLY, 0o644),
                      (os.mkdir, "f/d"), (os.rmdir, "f"), (os.listdir, "f"),
                      (os.open, "f", os.O_RDONLY | os.O_DIRECTORY), (os.stat, "f/"),
                      (os.rmdir, "l"), (os.stat, "l/"), (os.rename, "d", "f"),
                      (os.symlink, "x", "f/l")]:
        fails(errno.ENOTDIR, fn, *args)


@case()
def errno_eisdir(ctx):
    os.mkdir("d")
    fails(errno.EISDIR, os.unlink, "d")
    for flags in (os.O_WRONLY, os.O_RDWR, os.O_CREAT | os.O_WRONLY, os.O_RDONLY | os.O_TRUNC):
        fails(errno.EISDIR, os.open, "d", flags, 0o644)
    fd = os.open("d", os.O_RDONLY)
    fails(errno.EISDIR, os.read, fd, 10)
    os.close(fd)


@case()
def errno_enotempty(ctx):
    for i, make in enumerate((lambda d: write(f"{d}/f", b""), lambda d: os.mkdir(f"{d}/s"),
                              lambda d: os.symlink("x", f"{d}/l"),
                              lambda d: os.mkfifo(f"{d}/p"))):
        os.mkdir(f"d{i}")
        make(f"d{i}")
        fails((errno.ENOTEMPTY, errno.EEXIST), os.rmdir, f"d{i}")
        check(os.path.isdir(f"d{i}") and os.listdir(f"d{i}"), "a refused rmdir changed it")


@case()
def errno_enametoolong(ctx):
    n255, m255, n256 = "a" * 255, "b" * 255, "c" * 256
    write(n255, b"255")
    eq(read(n255), b"255", "a 255-byte name")
    check(n255 in os.listdir("."), "readdir of a 255-byte name")
    os.rename(n255, m255)
    os.mkdir(n255)
    os.rmdir(n255)
    write("f", b"")
    for fn, *args in [(os.open, n256, os.O_CREAT | os.O_WRONLY, 0o644), (os.mkdir, n256),
                      (os.symlink, "x", n256), (os.link, "f", n256), (os.rename, "f", n256),
                      (os.stat, n256), (os.mkfifo, n256), (os.stat, "x/" * 2100)]:
        fails(errno.ENAMETOOLONG, fn, *args)


@case()
def errno_einval(ctx):
    os.makedirs("d/sub")
    fails(errno.EINVAL, os.rename, "d", "d/sub/x")
    fails(errno.EINVAL, os.rename, "d", "d/x")
    fails(errno.EINVAL, os.rmdir, "d/.")
    write("f", b"")
    fails(errno.EINVAL, os.truncate, "f", -1)
    check(os.path.isdir("d/sub"), "a refused rename moved the directory")


def protected_hardlinks():
    try:
        with open("/proc/sys/fs/protected_hardlinks") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def _foreign_fixture(ctx):
    """Root's objects the unprivileged user may see but not change."""
    os.chmod(".", 0o755)
    os.mkdir("sticky", 0o777)
    os.chmod("sticky", 0o1777)
    os.mkdir("open", 0o777)
    os.chmod("open", 0o777)
    for d in ("sticky", "open"):
        write(f"{d}/theirs", b"root's", mode=0o666)
        os.chmod(f"{d}/theirs", 0o666)
    os.mkdir("sticky/their-dir")
    write("ro", b"read only", mode=0o644)
    os.setxattr("ro", "user.seen", b"by all")
    write("secret", b"", mode=0o600)
    os.mkdir("closed", 0o700)
    os.chown(".", 0, 0)


@case(prepare=_foreign_fixture)
def sticky_directory(ctx):
    def checks():
        write("sticky/mine", b"mine")
        fails(errno.EPERM, os.unlink, "sticky/theirs")
        fails(errno.EPERM, os.rename, "sticky/theirs", "sticky/taken")
        fails(errno.EPERM, os.rename, "sticky/mine", "sticky/theirs")
        fails(errno.EPERM, os.rmdir, "sticky/their-dir")
        eq(read("sticky/theirs"), b"root's", "the other user's file")
        write("sticky/theirs", b"writable", os.O_WRONLY | os.O_TRUNC)  # mode 0666: allowed
        os.rename("sticky/mine", "sticky/mine2")
        os.unlink("sticky/mine2")
        os.unlink("open/theirs")  # without the sticky bit, a writable dir is enough
    ctx.unprivileged(checks)


@case(prepare=_foreign_fixture)
def other_users_files(ctx):
    def checks():
        eq(read("ro"), b"read only", "reading a 0644 file")
        eq(os.getxattr("ro", "user.seen"), b"by all", "reading its xattr")
        fails(errno.EACCES, os.open, "ro", os.O_WRONLY)
        fails(errno.EACCES, os.open, "ro", os.O_WRONLY | os.O_TRUNC)
        fails(errno.EACCES, os.truncate, "ro", 0)
        fails(errno.EACCES, os.setxattr, "ro", "user.x", b"1")
        fails(errno.EACCES, os.removexattr, "ro", "user.seen")
        fails(errno.EACCES, os.open, "secret", os.O_RDONLY)
        fails(errno.EACCES, os.open, "new", os.O_CREAT | os.O_WRONLY, 0o644)
        fails(errno.EACCES, os.mkdir, "newdir")
        fails(errno.EACCES, os.symlink, "x", "newlink")
        fails(errno.EACCES, os.listdir, "closed")
        fails(errno.EACCES, os.stat, "closed/x")
        fails(errno.EPERM, os.chmod, "ro", 0o666)
        fails(errno.EPERM, os.chown, "ro", os.getuid(), -1)
        fails(errno.EPERM, os.utime, "ro", (1, 1))
        fails(errno.EACCES, os.utime, "ro", None)
        write("open/mine", b"")
        fails(errno.EPERM, os.chown, "open/mine", 0, -1)
        fails(errno.EPERM, os.chown, "open/mine", -1, 0)
        os.chown("open/mine", os.getuid(), os.getgid())
        if protected_hardlinks():
            fails(errno.EPERM, os.link, "ro", "open/hardlink")
    ctx.unprivileged(checks)


# ---------------------------------------------------------------- rename

@case()
def rename_file_over_file(ctx):
    write("a", b"new")
    write("b", b"old")
    os.link("b", "b2")
    ino = os.stat("a").st_ino
    os.rename("a", "b")
    eq((read("b"), os.stat("b").st_ino), (b"new", ino), "the target is the source")
    check(not os.path.lexists("a"), "the source name stayed")
    eq((read("b2"), os.stat("b2").st_nlink), (b"old", 1), "the replaced inode's other name")


@case()
def rename_over_each_type(ctx):
    write("t", b"target")
    write("f1", b"file")
    os.symlink("t", "l1")
    os.rename("f1", "l1")  # file over symlink
    check(stat.S_ISREG(os.lstat("l1").st_mode), "file over symlink")
    eq(read("t"), b"target", "the symlink's target")
    os.symlink("t", "l2")
    write("f2", b"")
    os.rename("l2", "f2")  # symlink over file
    check(stat.S_ISLNK(os.lstat("f2").st_mode) and os.readlink("f2") == "t", "symlink over file")
    os.mkfifo("p")
    write("f3", b"")
    os.rename("p", "f3")  # fifo over file
    check(stat.S_ISFIFO(os.lstat("f3").st_mode), "fifo over file")
    os.makedirs("da/x")
    os.mkdir("db")
    links = os.stat(".").st_nlink
    os.rename("da", "db")  # dir over empty dir
    check(os.path.isdir("db/x") and not os.path.lexists("da"), "dir over empty dir")
    eq(os.stat(".").st_nlink, links - 1, "parent nlink after dir over dir")
    os.makedirs("dc/y")
    fails((errno.ENOTEMPTY, errno.EEXIST), os.rename, "dc", "db")
    check(os.path.isdir("db/x") and os.path.isdir("dc/y"), "a refused rename changed them")
    write("f4", b"")
    fails(errno.EISDIR, os.rename, "f4", "dc")
    fails(errno.EISDIR, os.rename, "f4", "db")
    fails(errno.ENOTDIR, os.rename, "dc", "f4")
    os.symlink("dc", "ldc")
    fails(errno.ENOTDIR, os.rename, "db", "ldc")  # a symlink to a dir is not a dir
    check(os.path.isfile("f4") and os.path.isdir("dc/y"), "refused renames changed them")


@case()
def rename_same_inode_is_a_noop(ctx):
    write("f", b"same")
    os.rename("f", "f")
    eq(read("f"), b"same", "rename to itself")
    os.link("f", "g")
    os.rename("f", "g")
    check(os.path.lexists("f") and os.path.lexists("g"), "rename between hard links removed one")
    eq(os.stat("g").st_nlink, 2, "nlink after rename between hard links")
    os.mkdir("d")
    os.rename("d", "d")
    check(os.path.isdir("d"), "dir renamed to itself")


@case()
def rename_across_directories(ctx):
    os.makedirs("a/sub")
    os.mkdir("b")
    write("a/f", b"moved")
    os.rename("a/f", "b/f")
    eq(read("b/f"), b"moved", "file across directories")
    os.rename("a/sub", "b/sub")
    eq((os.stat("a").st_nlink, os.stat("b").st_nlink), (2, 3), "nlink of both parents")
    eq(os.stat("b/sub/..").st_ino, os.stat("b").st_ino, "'..' of the moved dir")
    eq(sorted(os.listdir("b")), ["f", "sub"], "entries of the new parent")
    eq(os.listdir("a"), [], "entries of the old parent")


@case()
def rename_noreplace(ctx):
    if not hasattr(libc, "renameat2"):
        raise Skip("no renameat2 in libc")
    write("a", b"a")
    write("b", b"b")
    os.symlink("missing", "dl")
    fails(errno.EEXIST, renameat2, "a", "b", RENAME_NOREPLACE)
    fails(errno.EEXIST, renameat2, "a", "dl", RENAME_NOREPLACE)
    eq((read("a"), read("b")), (b"a", b"b"), "after a refused RENAME_NOREPLACE")
    renameat2("a", "c", RENAME_NOREPLACE)
    eq((read("c"), os.path.lexists("a")), (b"a", False), "RENAME_NOREPLACE to a new name")
