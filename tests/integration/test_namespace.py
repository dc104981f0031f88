"""The namespace through standard tools: mkdir -p, ls -R, stat, du, df, mv,
rm -r, errors, permissions for other users."""
import errno
import os
import pwd
import signal
import stat
import subprocess

import pytest

from conftest import drop_second_mount, second_mount, wait_until


def run(*args, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, **kw)


def test_mkdir_ls_stat_du_mv_rm(workdir):
    tree = workdir / "a" / "b" / "c"
    assert run("mkdir", "-p", str(tree)).returncode == 0
    (tree / "f1").write_bytes(b"1" * 5000)
    (workdir / "a" / "f2").write_bytes(b"2" * 70000)
    listing = run("ls", "-R", str(workdir / "a")).stdout
    for name in ("b", "c", "f1", "f2"):
        assert name in listing
    st = run("stat", "-c", "%s %F %h", str(workdir / "a" / "f2")).stdout.split(None, 1)
    assert st[0] == "70000" and "regular" in st[1]
    assert run("stat", "-c", "%h", str(workdir / "a")).stdout.strip() == "3"
    du = int(run("du", "-sk", str(workdir / "a")).stdout.split()[0])
    assert du >= 70
    df = run("df", "-k", str(workdir)).stdout.splitlines()[1].split()
    assert int(df[1]) > 0, "df shows the targets' capacity"
    assert run("mv", str(workdir / "a" / "b"), str(workdir / "moved")).returncode == 0
    assert (workdir / "moved" / "c" / "f1").read_bytes() == b"1" * 5000
    assert not (workdir / "a" / "b").exists()
    assert run("rm", "-r", str(workdir / "a"), str(workdir / "moved")).returncode == 0
    assert os.listdir(workdir) == []


def test_rename_replaces_a_file(workdir):
    (workdir / "x").write_bytes(b"new")
    (workdir / "y").write_bytes(b"old")
    os.rename(workdir / "x", workdir / "y")
    assert (workdir / "y").read_bytes() == b"new"
    assert sorted(os.listdir(workdir)) == ["y"]


def test_errors_map_to_errno(workdir):
    with pytest.raises(FileNotFoundError):
        open(workdir / "missing", "rb")
    (workdir / "d").mkdir()
    (workdir / "d" / "f").write_bytes(b"")
    with pytest.raises(FileExistsError):
        (workdir / "d").mkdir()
    with pytest.raises(OSError) as e:
        os.rmdir(workdir / "d")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(FileExistsError):
        os.open(workdir / "d" / "f", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    with pytest.raises(NotADirectoryError):
        os.listdir(workdir / "d" / "f")
    with pytest.raises(IsADirectoryError):
        os.unlink(workdir / "d")
    with pytest.raises(OSError) as e:
        os.rename(workdir / "d", workdir / "d" / "inside")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        os.open(workdir / ("n" * 256), os.O_CREAT | os.O_WRONLY)
    assert e.value.errno == errno.ENAMETOOLONG


def test_large_directory_lists_every_entry(workdir):
    names = {f"key-{i:05d}" for i in range(1500)}
    for n in names:
        (workdir / n).write_bytes(b"")
    assert set(os.listdir(workdir)) == names
    assert int(run("sh", "-c", f"ls {workdir} | wc -l").stdout) == 1500


def test_chmod_chown_utimens(workdir):
    path = workdir / "perm"
    path.write_bytes(b"data")
    os.chmod(path, 0o600)
    os.chown(path, 1234, 5678)
    os.utime(path, (1000000, 2000000))
    st = os.stat(path)
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (0o600, 1234, 5678)
    assert int(st.st_mtime) == 2000000 and int(st.st_atime) == 1000000


def test_other_users_see_the_mount_and_permissions_apply(workdir):
    nobody = pwd.getpwnam("nobody")
    os.chmod(workdir, 0o755)
    (workdir / "private").write_bytes(b"secret")
    os.chmod(workdir / "private", 0o600)
    (workdir / "public").write_bytes(b"hello")
    os.chmod(workdir / "public", 0o644)

    def as_nobody(*cmd):
        return subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}",
                               "--clear-groups", *cmd], capture_output=True, text=True)

    assert as_nobody("cat", str(workdir / "public")).stdout == "hello"
    denied = as_nobody("cat", str(workdir / "private"))
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    denied = as_nobody("touch", str(workdir / "new-by-nobody"))
    assert denied.returncode != 0 and "Permission denied" in denied.stderr
    open_dir = workdir / "shared"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    assert as_nobody("touch", str(open_dir / "mine")).returncode == 0
    assert os.stat(open_dir / "mine").st_uid == nobody.pw_uid


def test_admin_status_and_stat(cluster, workdir):
    (workdir / "f").write_bytes(b"z" * 3000)
    out = cluster.admin("status")
    assert out.stdout.count(" up ") >= 4
    rel = str(workdir.relative_to(cluster.mount) / "f")
    st = cluster.admin("--json", "stat", rel).stdout
    assert '"size":3000' in st and '"stripe":3' in st
    missing = cluster.admin("stat", "no/such/file", check=False)
    assert missing.returncode == 1 and "No such file" in missing.stderr


def test_file_removed_while_open_keeps_its_data_until_closed(cluster, workdir):
    import json
    import time
    from conftest import wait_until
    data = os.urandom(5 * (1 << 20) + 77)
    (workdir / "held").write_bytes(data)
    with open(workdir / "held", "rb") as reader:
        assert run("rm", str(workdir / "held")).returncode == 0
        assert not (workdir / "held").exists()
        assert os.listdir(workdir) == []
        time.sleep(2.5)  # past the collector's pass: chunks would be gone
        assert reader.read() == data, "the reader lost its data"
        meta = json.loads(cluster.admin("--json", "status").stdout)["meta"]
        assert meta["removed_but_open"] >= 1
    assert wait_until(lambda: json.loads(cluster.admin("--json", "status").stdout)
                      ["meta"]["removed_but_open"] == 0, timeout=30), "gone at the last close"
    assert not (cluster.mount / ".kvc-orphans").exists()


def held_after_removal(base):
    """What a process sees of a directory, a fifo and its working directory
    whose names were removed while it held them: (type, nlink) of fstat and
    stat("."), the listings, and bytes through the fifo."""
    seen = {}
    d = base / "held-dir"
    d.mkdir()
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    os.rmdir(d)
    st = os.fstat(fd)
    seen["dir"] = (stat.S_IFMT(st.st_mode), st.st_nlink, os.listdir(fd))
    os.close(fd)
    f = base / "held-fifo"
    os.mkfifo(f, 0o644)
    fd = os.open(f, os.O_RDWR | os.O_NONBLOCK)
    os.chmod(f, 0o600)  # what fstat shows after the removal
    os.unlink(f)
    st = os.fstat(fd)
    os.write(fd, b"still a pipe")
    seen["fifo"] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_nlink,
                    os.read(fd, 100))
    os.close(fd)
    cwd = base / "held-cwd"
    cwd.mkdir()
    back = os.getcwd()
    os.chdir(cwd)
    try:
        os.rmdir(cwd)
        st = os.stat(".")
        seen["cwd"] = (stat.S_IFMT(st.st_mode), st.st_nlink, os.listdir("."))
    finally:
        os.chdir(back)
    return seen


def test_directory_and_fifo_removed_while_held(workdir, local_tmp):
    """fstat of a directory and a fifo held open after their names were
    removed, stat and ls of a removed working directory: their type with
    nlink 0 and empty listings, exactly as on a local directory (they were
    ENOENT: kvc-meta forgets such inodes at once; kvc-fuse answers from the
    last attributes it was given, fuse/known_attrs.h)."""
    local = held_after_removal(local_tmp)
    assert local["dir"] == (stat.S_IFDIR, 0, [])
    assert held_after_removal(workdir) == local


def test_directory_removed_by_another_client_while_held(cluster, workdir):
    """A directory open on one kvc-fuse, removed through another: fstat
    on the first gives nlink 0 and a listing of the open descriptor is
    empty (kvc-meta answers ENOENT for both), as on a local disk; the path
    is gone there too."""
    proc, mount2 = second_mount(cluster)
    relative = workdir.relative_to(cluster.mount)
    try:
        d = workdir / "shared-dir"
        d.mkdir()
        (d / "inside").write_bytes(b"x")
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        os.unlink(os.path.join(mount2, relative, "shared-dir", "inside"))
        os.rmdir(os.path.join(mount2, relative, "shared-dir"))
        assert os.listdir(fd) == []
        # fstat: nlink 0 once kvc-meta's event has dropped the kernel's
        # cached attributes (milliseconds; the cache's ttl at most)
        assert wait_until(lambda: os.fstat(fd).st_nlink == 0, timeout=15)
        assert stat.S_ISDIR(os.fstat(fd).st_mode)
        os.close(fd)
        assert not d.exists()
    finally:
        drop_second_mount(proc, mount2)


CLOSE = 28        # src/core/wire.h KVC_MSG_CLOSE
CLOSE_MANY = 58   # src/core/wire.h KVC_MSG_CLOSE_MANY


def test_a_close_many_that_never_arrived_is_sent_again(cluster, workdir):
    """A kvc-fuse (through a relay) reads 65 files and closes them; the
    relay loses the CLOSE_MANY that ends their sessions and cuts the
    connections. The batch goes back to the close queue and is sent again
    a second later as one CLOSE_MANY (no single CLOSEs): the 64 files
    another client removed meanwhile are released. The 65th, opened again
    right after the loss, takes its CLOSE out of the queue: removed after
    that, it stays readable through the new open."""
    import json
    import threading
    from conftest import client_conf, drop_second_mount, second_mount, wait_until
    from lossy_relay import LossyRelay

    def removed_but_open():
        return json.loads(cluster.admin("--json", "status").stdout)["meta"]["removed_but_open"]

    relay = LossyRelay(cluster.meta_address)
    conf = client_conf(cluster, cluster.dir / "cluster-lossy-close.conf",
                       f"[meta]\naddress = {cluster.meta_address}\n",
                       f"[meta]\naddress = {relay.address}\n")
    proc, mount2 = second_mount(cluster, conf)
    relative = workdir.relative_to(cluster.mount)
    theirs = os.path.join(mount2, relative)
    try:
        names = [f"gone-{i}" for i in range(64)]
        for name in names + ["keep"]:
            (workdir / name).write_bytes(name.encode() * 100)
        assert wait_until(lambda: all(os.path.exists(os.path.join(theirs, n))
                                      for n in names + ["keep"]), timeout=15)
        before = removed_but_open()
        fds = [os.open(os.path.join(theirs, n), os.O_RDONLY) for n in names + ["keep"]]
        for name in names:
            os.unlink(workdir / name)
        assert removed_but_open() >= before + 64
        singles, many = relay.count(CLOSE), relay.count(CLOSE_MANY)
        relay.lose_next_request(CLOSE_MANY)
        for fd in fds:
            os.close(fd)
        # The batch is in flight (the relay cuts the connections 0.5 s after
        # it dropped the request): the open's wait for it ends in the batch's
        # failure, and finds the CLOSE back in the queue.
        assert wait_until(lambda: relay.count(CLOSE_MANY) > many, timeout=15, step=0.02)
        opened = []

        def open_keep():
            try:
                opened.append(os.open(os.path.join(theirs, "keep"), os.O_RDONLY))
            except OSError as e:
                opened.append(e)
        opener = threading.Thread(target=open_keep)
        opener.start()
        assert relay.lost.wait(15), "the CLOSE_MANY was not dropped"
        relay.reopen()
        opener.join(30)
        assert opened and isinstance(opened[0], int), opened
        keep = opened[0]
        try:
            os.unlink(workdir / "keep")
            assert wait_until(lambda: removed_but_open() == before + 1, timeout=30), \
                removed_but_open()
            assert os.pread(keep, 1000, 0) == b"keep" * 100
            assert relay.count(CLOSE_MANY) >= 2 and relay.count(CLOSE) == singles
        finally:
            os.close(keep)
        assert wait_until(lambda: removed_but_open() == before, timeout=30)
    finally:
        drop_second_mount(proc, mount2)
        relay.stop()


def test_file_removed_while_open_on_another_client_keeps_its_data(cluster, workdir):
    """A reader on one kvc-fuse keeps reading a file another kvc-fuse
    removed; its chunks go at the reader's last close, or, when the reader's
    kvc-fuse dies, once kvc-meta's client timeout (3 s here) passes."""
    import json
    from conftest import CHUNK, wait_until

    from conftest import chunk_files_of
    proc, mount2 = second_mount(cluster)
    relative = workdir.relative_to(cluster.mount)
    try:
        data = os.urandom(8 * CHUNK)
        (workdir / "shared").write_bytes(data)
        ino = os.stat(workdir / "shared").st_ino
        before = len(chunk_files_of(cluster, ino))
        assert before == 8
        fd = os.open(os.path.join(mount2, relative, "shared"), os.O_RDONLY | os.O_DIRECT)
        os.unlink(workdir / "shared")  # on the first client
        assert not (workdir / "shared").exists()
        import time
        time.sleep(2.5)  # the collector passes every second
        assert len(chunk_files_of(cluster, ino)) == before, "chunks reclaimed under an open file"
        meta = json.loads(cluster.admin("--json", "status").stdout)["meta"]
        assert meta["removed_but_open"] >= 1 and meta["open_sessions"] >= 1
        import mmap
        buf = mmap.mmap(-1, 8 * CHUNK)
        assert os.preadv(fd, [buf], 0) == 8 * CHUNK
        assert bytes(buf) == data, "the reader sees the file's bytes, not holes"
        os.close(fd)
        assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=30), \
            "reclaimed at close"

        # kvc-meta is down when the reader closes: the CLOSE is retried.
        (workdir / "late").write_bytes(data)
        ino = os.stat(workdir / "late").st_ino
        assert chunk_files_of(cluster, ino)
        fd = os.open(os.path.join(mount2, relative, "late"), os.O_RDONLY)
        os.unlink(workdir / "late")
        subprocess.run(["kill", "-KILL", str(cluster.pid("meta"))], check=True)
        os.close(fd)
        cluster.restart("meta", "KILL")
        assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=30), \
            "reclaimed after retry"

        # The reader's kvc-fuse is frozen past the client timeout: kvc-meta
        # gives its files away; awake again, its read fails, never zeros.
        # (No child process while it is frozen: exec closes our fd on its
        # mount, and that close would wait for the frozen daemon.)
        import sys
        from conftest import BUILD, LIBKVC, ROOT
        sys.path.insert(0, str(ROOT / "tools" / "python"))
        os.environ.setdefault("KVC_LIB", str(LIBKVC))
        import kvcfs
        (workdir / "frozen").write_bytes(data)
        ino = os.stat(workdir / "frozen").st_ino
        assert chunk_files_of(cluster, ino)
        path2 = os.path.join(mount2, relative, "frozen")
        fd = os.open(path2, os.O_RDONLY | os.O_DIRECT)
        kvcfs.register_fd(fd)
        iov = kvcfs.Iov.create(mount2, 8 * CHUNK)
        iov.unlink()  # no name left in /dev/shm
        ring = kvcfs.Ring(mount2, 4, for_read=True)
        proc.send_signal(signal.SIGSTOP)
        try:
            os.unlink(workdir / "frozen")
            assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=30), \
                "given away"
        finally:
            proc.send_signal(signal.SIGCONT)
        ring.prepare(iov, True, fd, 0, 8 * CHUNK)
        ring.submit()
        assert ring.wait(min_results=1)[0].result == -errno.ESTALE, "a ring read of holes"
        with pytest.raises(OSError) as failure:
            os.preadv(fd, [buf], 0)
        # ENOENT when the kernel first asks for the size (the file is gone),
        # ESTALE from kvc-fuse's data path: never the holes.
        assert failure.value.errno in (errno.ESTALE, errno.ENOENT)
        ring.close()
        iov.close()
        kvcfs.deregister_fd(fd)
        os.close(fd)

        # The reader's kvc-fuse dies with the file open: reclaimed after the timeout.
        (workdir / "held").write_bytes(data)
        ino = os.stat(workdir / "held").st_ino
        assert chunk_files_of(cluster, ino)
        fd = os.open(os.path.join(mount2, relative, "held"), os.O_RDONLY)
        os.unlink(workdir / "held")
        proc.kill()
        proc.wait()
        assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=60), \
            "reclaimed after timeout"
        try:
            os.close(fd)
        except OSError:
            pass
    finally:
        drop_second_mount(proc, mount2)


def test_a_file_held_open_across_a_kvc_meta_restart_keeps_its_bytes(cluster, workdir):
    """kvc-meta keeps a plain open's session in memory. After it restarts,
    a file another client holds open and this one removes is kept: through
    the start's hold (client timeout + 2 s), then because the holder opened
    its files again when kvc-meta answered its RENEW with EREMCHG; its
    chunks go at the holder's close."""
    import mmap
    import time
    from conftest import CHUNK, chunk_files_of
    proc, mount2 = second_mount(cluster)
    relative = workdir.relative_to(cluster.mount)
    try:
        data = os.urandom(4 * CHUNK)
        (workdir / "held").write_bytes(data)
        ino = os.stat(workdir / "held").st_ino
        assert len(chunk_files_of(cluster, ino)) == 4
        fd = os.open(os.path.join(mount2, relative, "held"), os.O_RDONLY | os.O_DIRECT)
        cluster.restart("meta", "KILL")
        os.unlink(workdir / "held")  # on the first client, kvc-meta new
        time.sleep(3 + 2 + 2.5)  # past the hold (timeout + 2 s), two collector passes
        assert len(chunk_files_of(cluster, ino)) == 4, "chunks reclaimed under an open file"
        buf = mmap.mmap(-1, 4 * CHUNK)
        assert os.preadv(fd, [buf], 0) == 4 * CHUNK
        assert bytes(buf) == data, "the holder reads the file's bytes, not holes"
        os.close(fd)
        assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=30), \
            "reclaimed at the close"
    finally:
        drop_second_mount(proc, mount2)
