"""USRBIO against hostile local clients (docs/usrbio.md, "What a client may
and may not do"): a client that shrinks its shared memory, hands over
memory that lives on the mount, abuses its doorbells, squats the control
socket's name, or is killed at random while its rings are served, hurts
only itself: kvc-fuse stays up and keeps serving every other client."""
import errno
import os
import pwd
import random
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from conftest import BUILD, LIBKVC, ROOT, wait_until

TOOLS = BUILD / "tests" / "usrbio"
PYTHON_PATH = str(ROOT / "tools" / "python")


def run(*args, timeout=120, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, **kw)


def registrations(cluster):
    out = run("getfattr", "-n", "user.kvc.usrbio", "--only-values", cluster.mount).stdout
    return dict(kv.split("=") for kv in out.split())


def assert_serving(cluster, fuse_pid, workdir, local_tmp, name="after"):
    """kvc-fuse is the same process and still runs rings for others."""
    assert os.path.exists(f"/proc/{fuse_pid}"), "kvc-fuse died"
    assert cluster.pid("fuse") == fuse_pid
    out = run(TOOLS / "ring_roundtrip", "write", workdir / name, local_tmp / f"{name}.ref",
              3_000_017, 5, 2, timeout=60)
    assert out.returncode == 0, out.stderr
    out = run(TOOLS / "ring_roundtrip", "read", workdir / name, local_tmp / f"{name}.ref", 6, 2,
              timeout=60)
    assert out.returncode == 0, out.stderr


def test_shrinking_ring_or_iov_memory_hurts_only_that_client(cluster, workdir, local_tmp):
    fuse = cluster.pid("fuse")
    out = run(TOOLS / "hostile_client", "shrink", workdir, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert_serving(cluster, fuse, workdir, local_tmp)


def test_memory_on_the_mount_is_refused(cluster, workdir, local_tmp):
    fuse = cluster.pid("fuse")
    out = run(TOOLS / "hostile_client", "on-mount", workdir, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert_serving(cluster, fuse, workdir, local_tmp)


def test_hostile_doorbells_stall_no_other_ring(cluster, workdir, local_tmp):
    """Doorbells full and blocking (one on a ring whose io_depth timeout
    passed, so kvc-fuse's timer comes to it), closed, shut down: other
    clients' rings, and new registrations, go on."""
    fuse = cluster.pid("fuse")
    hostile = subprocess.Popen([str(TOOLS / "hostile_client"), "doorbell", str(workdir)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        while True:
            line = hostile.stdout.readline()
            assert line, "".join(lines)
            lines.append(line)
            if line.strip() == "ready":
                break
        assert not any(x.startswith("not ok") for x in lines), "".join(lines)
        assert_serving(cluster, fuse, workdir, local_tmp)
        hostile.stdin.write("done\n")
        hostile.stdin.flush()
        out, _ = hostile.communicate(timeout=30)
        assert hostile.returncode == 0, "".join(lines) + out
    finally:
        hostile.kill()
        hostile.wait()


FAKE_SERVER = r"""
import socket, struct, sys
HEADER = struct.Struct("<IHHQiIQ")
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(b"\0" + sys.argv[1].encode())
s.listen(8)
print("listening", flush=True)
fds = frames = 0
conn, _ = s.accept()
conn.settimeout(20)
try:
    while True:
        msg, anc, _, _ = conn.recvmsg(4096, socket.CMSG_SPACE(16 * 4))
        if not msg:
            break
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += len(data) // 4
        frames += 1
        magic, version, kind, rid = HEADER.unpack_from(msg)[:4]
        body = b"" if kind == 1 else bytes(8)   # HELLO: no body; else a handle
        conn.sendall(HEADER.pack(magic, version, kind, rid, 0, len(body), 0) + body)
except (OSError, struct.error):
    pass
print(f"frames={frames} fds={fds}", flush=True)
"""

CLIENT = r"""
import errno, os, sys
sys.path.insert(0, sys.argv[2])
import kvcfs
try:
    kvcfs.Iov.create(sys.argv[1], 1 << 20)
    print("registered")
except OSError as e:
    print(errno.errorcode[e.errno])
"""


def test_client_refuses_a_control_socket_of_another_user(cluster, local_tmp):
    """Another user binds the control socket's (predictable) name first: a
    client finds it, sees a peer that is neither root nor the mount's owner
    and refuses before sending a byte, let alone a file descriptor."""
    bind = tempfile.mkdtemp(prefix="kvc-bind-")
    nobody = pwd.getpwnam("nobody")
    assert run("mount", "--bind", cluster.mount, bind).returncode == 0
    fake = None
    try:
        fake = subprocess.Popen(["setpriv", f"--reuid={nobody.pw_uid}",
                                 f"--regid={nobody.pw_gid}", "--clear-groups", sys.executable,
                                 "-c", FAKE_SERVER, f"kvc-usrbio:{os.path.realpath(bind)}"],
                                stdout=subprocess.PIPE, text=True)
        assert fake.stdout.readline().strip() == "listening"
        out = run(sys.executable, "-c", CLIENT, bind, PYTHON_PATH,
                  env=dict(os.environ, KVC_LIB=str(LIBKVC)), timeout=60)
        assert out.stdout.strip() == "EACCES", out.stdout + out.stderr
        fake.send_signal(signal.SIGINT)
        seen, _ = fake.communicate(timeout=30)
        assert "fds=0" in seen and "frames=0" in seen, seen
    finally:
        if fake:
            fake.kill()
            fake.wait()
        run("umount", "-l", bind)
        os.rmdir(bind)


def test_clients_killed_at_random_while_served(cluster, workdir, local_tmp):
    """Clients whose rings are busy with small batches, killed at random
    moments (while registering rings and while they run): kvc-fuse frees each
    client only once no batch of it runs (run under the ASan build of
    kvc-fuse in CI's sanitizer pass, where a use after free aborts it)."""
    fuse = cluster.pid("fuse")
    before = registrations(cluster)
    rng = random.Random(1234)
    for _ in range(20):
        procs = [subprocess.Popen([str(TOOLS / "hostile_client"), "churn", str(workdir), "6"],
                                  stdout=subprocess.PIPE, text=True) for _ in range(3)]
        for p in procs:  # past the iov's name: a kill leaves nothing in /dev/shm
            assert p.stdout.readline().strip() == "churning"
        time.sleep(rng.uniform(0.0, 0.5))
        for p in procs:
            p.send_signal(signal.SIGKILL)
            time.sleep(rng.uniform(0.0, 0.02))
        for p in procs:
            p.wait()
    assert wait_until(lambda: registrations(cluster) == before, timeout=30), \
        (before, registrations(cluster))
    assert_serving(cluster, fuse, workdir, local_tmp)


HOLDER = r"""
import errno, os, sys
sys.path.insert(0, sys.argv[2])
import kvcfs
mount, path = sys.argv[1], sys.argv[3]
held, results = [], []
for what in sys.argv[4:]:
    try:
        if what.startswith("iov"):
            iov = kvcfs.Iov.create(mount, int(what[3:]) << 20)
            iov.unlink()
            held.append(iov)
        elif what == "ring":
            held.append(kvcfs.Ring(mount, 4, for_read=True))
        else:
            fd = os.open(path, os.O_RDONLY)
            kvcfs.register_fd(fd)
        results.append("ok")
    except OSError as e:
        results.append(errno.errorcode[e.errno])
print(" ".join(results), flush=True)
sys.stdin.readline()
"""


class Holder:
    """A process (of uid, if given) that registers `what` in order, says
    how each went, and holds what it got until closed."""

    def __init__(self, cluster, path, *what, uid=None):
        prefix = []
        if uid is not None:
            pw = pwd.getpwuid(uid)
            prefix = ["setpriv", f"--reuid={uid}", f"--regid={pw.pw_gid}", "--clear-groups"]
        self.proc = subprocess.Popen(prefix + [sys.executable, "-c", HOLDER, str(cluster.mount),
                                               PYTHON_PATH, str(path), *what],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env=dict(os.environ, KVC_LIB=str(LIBKVC)))
        self.results = self.proc.stdout.readline().split()

    def close(self):
        self.proc.stdin.write("\n")
        self.proc.communicate(timeout=30)


@pytest.fixture
def limited(cluster):
    """kvc-fuse with small per-uid USRBIO limits, restored afterwards."""
    text = cluster.conf.read_text()
    assert text.rstrip().splitlines()[-1].startswith("receive_threads")  # in [fuse]
    cluster.conf.write_text(text + "usrbio_uid_iov_mb = 8\nusrbio_uid_rings = 3\n"
                            "usrbio_uid_registrations = 4\n")
    cluster.restart("fuse", "TERM")
    yield cluster
    cluster.conf.write_text(text)
    cluster.restart("fuse", "TERM")


def test_per_uid_limits(limited, workdir):
    """Past each [fuse] usrbio_uid_* limit a registration fails with EDQUOT,
    counted over every process of the uid; another uid is unaffected; what
    a process held comes back when it exits."""
    path = workdir / "limited"
    path.write_bytes(b"x" * 4096)
    os.chmod(workdir, 0o755)
    nobody = pwd.getpwnam("nobody").pw_uid
    a = Holder(limited, path, "iov2", "iov2", "iov2")
    b = c = other = None
    try:
        assert a.results == ["ok", "ok", "ok"]
        # Another process of the same uid shares the uid's budget.
        b = Holder(limited, path, "iov4", "iov2", "fd")
        assert b.results == ["EDQUOT", "ok", "EDQUOT"]  # bytes, then registrations
        c = Holder(limited, path, "ring", "ring", "ring", "ring")
        assert c.results == ["ok", "ok", "ok", "EDQUOT"]
        # Another uid has a budget of its own.
        other = Holder(limited, path, "iov8", "ring", "ring", "ring", "fd", uid=nobody)
        assert other.results == ["ok", "ok", "ok", "ok", "ok"]
    finally:
        for holder in (a, b, c, other):
            if holder:
                holder.close()
    again = Holder(limited, path, "iov8", "ring", "ring", "ring", "fd")
    again.close()
    assert again.results == ["ok"] * 5


HOG = r"""
import socket, struct, sys
HEADER = struct.Struct("<IHHQiIQ")  # the wire header: status at index 4
held = []
for i in range(int(sys.argv[2])):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(b"\0" + sys.argv[1].encode())
    held.append(s)
def answer(s):
    s.settimeout(1)
    try:
        data = s.recv(HEADER.size)
    except socket.timeout:
        return "waiting"  # admitted: the server waits for our HELLO
    return str(HEADER.unpack(data)[4]) if len(data) == HEADER.size else "closed"
print(answer(held[0]), answer(held[-1]), flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def few_connections(cluster):
    """kvc-fuse taking at most 4 control connections per uid."""
    text = cluster.conf.read_text()
    assert text.rstrip().splitlines()[-1].startswith("receive_threads")  # in [fuse]
    cluster.conf.write_text(text + "usrbio_uid_connections = 4\n")
    cluster.restart("fuse", "TERM")
    yield cluster
    cluster.conf.write_text(text)
    cluster.restart("fuse", "TERM")


def test_a_user_holding_connections_runs_out_of_its_own_only(few_connections, workdir):
    """A user who opens control connections and sends nothing (each would
    hold a kvc-fuse thread) is refused past [fuse] usrbio_uid_connections
    with EUSERS at accept; another user still connects and registers, and
    the user's budget comes back when its connections close."""
    c = few_connections
    path = workdir / "conns"
    path.write_bytes(b"x" * 4096)
    os.chmod(workdir, 0o755)
    nobody = pwd.getpwnam("nobody")
    name = f"kvc-usrbio:{os.path.realpath(c.mount)}"

    def hog(count):
        return subprocess.Popen(["setpriv", f"--reuid={nobody.pw_uid}",
                                 f"--regid={nobody.pw_gid}", "--clear-groups", sys.executable,
                                 "-c", HOG, name, str(count)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    held = hog(5)
    try:
        assert held.stdout.readline().split() == ["waiting", str(-errno.EUSERS)]
        root = Holder(c, path, "iov2", "ring")
        root.close()
        assert root.results == ["ok", "ok"], "another uid is not held up"
    finally:
        held.communicate("\n", timeout=30)
    # Closed: the uid may connect again (once kvc-fuse saw them go).
    assert wait_until(lambda: (lambda p: p.communicate("\n", timeout=30)[0].split())(hog(4))
                      == ["waiting", "waiting"], timeout=20)
