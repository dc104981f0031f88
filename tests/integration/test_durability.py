"""Nothing acknowledged is lost: a client kvc-meta gave up hears of it
across restarts; fsync reaches kvc-meta; kill -9 under load loses nothing
committed; a shrinking truncate racing writers never brings old bytes
back."""
import errno
import os
import signal
import subprocess
import sys
import tempfile
import textwrap

from conftest import BUILD, CHUNK, ROOT, wait_until


def second_mount(cluster):
    """Another kvc-fuse (another client) of the same cluster."""
    mount = tempfile.mkdtemp(prefix="kvc-mnt2-")
    log = open(cluster.dir / "fuse2.log", "ab")
    proc = subprocess.Popen([str(BUILD / "kvc-fuse"), "--config", str(cluster.conf),
                             "--mountpoint", mount], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    assert wait_until(lambda: os.path.ismount(mount), timeout=20)
    return proc, mount


def drop_second_mount(proc, mount):
    proc.kill()
    proc.wait()
    subprocess.run(["fusermount3", "-uz", mount], capture_output=True)
    os.rmdir(mount)


# A reader in a process of its own: this test's process must hold no file
# of a frozen kvc-fuse, or the children it starts (kvc-cluster, kvc-admin)
# would close that file when they exec and wait on the frozen daemon.
READER = textwrap.dedent("""
    import mmap, os, sys
    import kvcfs
    path, mount, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    kvcfs.register_fd(fd)
    iov = kvcfs.Iov.create(mount, size)
    ring = kvcfs.Ring(mount, 4, for_read=True)
    ring.prepare(iov, True, fd, 0, size)
    ring.submit()
    assert ring.wait(min_results=1)[0].result == size
    print("ready", flush=True)
    sys.stdin.readline()
    # Through the ring: kvc-fuse's data path, no size check by the kernel.
    ring.prepare(iov, True, fd, 0, size)
    ring.submit()
    result = ring.wait(min_results=1)[0].result
    if result < 0:
        print("error", -result, flush=True)
    else:
        print("read", result, flush=True)
""")


def test_dropped_client_hears_of_it_after_a_meta_restart(cluster, workdir):
    """A kvc-fuse frozen past the client timeout loses its open file (the
    file was removed meanwhile and its chunks reclaimed); kvc-meta restarts
    before the client wakes up. Awake, its ring read fails with ESTALE: it
    never reads the holes where the bytes were, although the restart
    emptied kvc-meta's memory."""
    proc, mount2 = second_mount(cluster)
    relative = workdir.relative_to(cluster.mount)
    reader = None
    try:
        data = os.urandom(8 * CHUNK)
        (workdir / "frozen").write_bytes(data)
        before = cluster.chunks()
        env = dict(os.environ, KVC_LIB=str(BUILD / "libkvc.so"),
                   PYTHONPATH=str(ROOT / "tools" / "python"))
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, os.path.join(mount2, relative, "frozen"), mount2,
             str(len(data))], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        assert reader.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGSTOP)
        try:
            os.unlink(workdir / "frozen")
            assert wait_until(lambda: cluster.chunks() <= before - 8, timeout=30), \
                "kvc-meta gives the frozen client's file away"
            cluster.restart("meta", "KILL")
        finally:
            proc.send_signal(signal.SIGCONT)
        reader.stdin.write("go\n")
        reader.stdin.flush()
        answer = reader.stdout.readline().split()
        assert answer == ["error", str(errno.ESTALE)], f"read after the drop: {answer}"
        reader.wait(timeout=30)
        # The client rejoined: it works again.
        (workdir / "after").write_bytes(b"x" * 4096)
        assert open(os.path.join(mount2, relative, "after"), "rb").read() == b"x" * 4096
    finally:
        if reader and reader.poll() is None:
            reader.kill()
        drop_second_mount(proc, mount2)
