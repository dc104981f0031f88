"""Only the cluster's own daemons reach its data (docs/operations.md
"Security model"). A cluster of its own, whose directory every user may
enter, a root-owned 0600 file on its mount, and then, as nobody: raw
frames to every daemon port without or with a wrong secret, every way
through the mount (USRBIO included), the secret files. Also the pool
secret's limits and the HTTP routes' bearer token and destructive rule,
from loopback and from another network namespace (a veth peer).

The probes that run as nobody are this file run as a script:
setpriv --reuid=nobody ... /usr/bin/python3 test_access.py PROBE JSON."""
import errno
import json
import os
import pathlib
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import uuid

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import kvcwire  # noqa: E402

FILE_BYTES = b"only root may read this: " + bytes(range(256)) * 64


def expect_denied(what, call, *args):
    try:
        call(*args)
    except PermissionError:
        return
    except OSError as e:
        assert e.errno in (errno.EACCES, errno.EPERM, errno.EBADF), (what, e)
        return
    raise AssertionError(f"{what}: allowed")


def _closed(sock, request):
    """True when a refused connection answers nothing more."""
    try:
        sock.sendall(request)
        return sock.recv(64) == b""
    except OSError:
        return True


def _first_frame_status(address, request):
    """The status a connection gets for a first frame that is no HELLO;
    None when the server dropped it without a readable answer."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        try:
            sock.sendall(request)
            return kvcwire.recv_frame(sock)[1]
        except (OSError, ConnectionError):
            return None


# ---- probes run as nobody -------------------------------------------------

def probe_files(a):
    """The secrets and the data directories are closed to other users; the
    cluster file is readable (it names the secrets, holds none)."""
    for name in ("secret", "pool.secret", "http.token"):
        expect_denied(name, lambda p: open(p, "rb").read(), os.path.join(a["dir"], name))
    for name in ("meta", "s1", "s2", "s3"):
        expect_denied(name, os.listdir, os.path.join(a["dir"], name))
    return open(os.path.join(a["dir"], "cluster.conf")).read()


def probe_frames(a):
    """Every daemon port refuses frames without the secret, and a refused
    connection answers nothing after the refusal."""
    ino = a["ino"]
    read = kvcwire.frame(kvcwire.CHUNK_READ, struct.pack("<II", 1, 0) +
                         kvcwire.piece(ino, 0, 0, 0, 4096), request_id=7)
    write = kvcwire.frame(kvcwire.CHUNK_WRITE, kvcwire.chunk_write(ino, 0, 0, 1 << 20, 0),
                          b"overwritten by nobody", request_id=8)
    # chown to nobody, mode 0777
    setattr_ = kvcwire.frame(kvcwire.SETATTR, struct.pack(
        "<QIIIIQqq", ino, 1 | 2 | 4, 0o100777, 65534, 65534, 0, 0, 0), request_id=9)
    for address in a["addresses"]:
        requests = [setattr_] if address == a["meta"] else [read, write]
        for secret in (None, b"0" * 64, b"not even 32 bytes"):
            for request in requests:
                sock, status = kvcwire.connect(address, secret)
                with sock:
                    assert status == -kvcwire.EACCES, (address, secret, status)
                    assert _closed(sock, request), (address, "answered after a refusal")
        for request in requests:  # no HELLO at all
            status = _first_frame_status(address, request)
            assert status in (-kvcwire.EACCES, None), (address, status)
        no_data = setattr_ if address == a["meta"] else read
        assert _first_frame_status(address, no_data) == -kvcwire.EACCES, address
    return True


def probe_mount(a):
    """No byte of the root-only file, no change to it, through the mount:
    the kernel's checks, and kvc-fuse's for USRBIO (a file descriptor
    opened without read access, such as O_PATH, is no readable file)."""
    path = a["path"]
    expect_denied("read", lambda: open(path, "rb").read())
    expect_denied("write", lambda: open(path, "r+b"))
    expect_denied("truncate", os.truncate, path, 0)
    expect_denied("chmod", os.chmod, path, 0o666)
    expect_denied("chown", os.chown, path, 65534, 65534)
    expect_denied("utime", os.utime, path, (0, 0))
    expect_denied("setxattr", os.setxattr, path, "user.x", b"1")
    expect_denied("unlink", os.unlink, path)
    expect_denied("rename", os.rename, path, path + ".moved")
    expect_denied("link", os.link, path, path + ".link")
    # USRBIO: libkvc registers only descriptors it can read through, and
    # kvc-fuse, which a client may talk to without libkvc, refuses one
    # opened without read access (O_PATH needs none: only the directory's x).
    sys.path.insert(0, a["python"])
    os.environ["KVC_LIB"] = a["lib"]
    import kvcfs
    fd = os.open(path, os.O_PATH)
    expect_denied("libkvc registers an O_PATH descriptor", kvcfs.register_fd, fd)
    ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with ctl:
        ctl.connect("\0kvc-usrbio:" + a["mount"])
        ctl.sendall(kvcwire.frame(kvcwire.HELLO, kvcwire.hello_body()))
        assert kvcwire.recv_frame(ctl)[1] == 0
        register = kvcwire.frame(kvcwire.FD_REGISTER, struct.pack("<iI", fd, 0))
        socket.send_fds(ctl, [register], [fd])
        _, status, reply, _ = kvcwire.recv_frame(ctl)
        assert status < 0, f"kvc-fuse registered an O_PATH descriptor: {reply.hex()}"
    return True


def probe_pool(a):
    """The pool secret opens kvc-meta's page-pool messages and nothing else."""
    pool = a["pool_secret"].encode()
    sock, status = kvcwire.connect(a["meta"], pool, kvcwire.ROLE_POOL)
    with sock:
        assert status == 0
        head = struct.pack("<IIIIIIQ", 0, 0, 3, 0, 0, 0, 0) + b"acc"
        sock.sendall(kvcwire.frame(kvcwire.POOL_STATS, head))
        assert kvcwire.recv_frame(sock)[1] in (0, -errno.ENOENT)
        namespace = [(kvcwire.GETATTR, struct.pack("<Q", 1)),
                     (kvcwire.LOOKUP, struct.pack("<QII", 1, 3, 0) + b"dir"),
                     (kvcwire.SETATTR, struct.pack("<QIIIIQqq", a["ino"], 2, 0, 65534, 0, 0,
                                                   0, 0)),
                     (kvcwire.STATFS, b""),
                     (kvcwire.POOL_BIND, struct.pack("<IIIIIIQ", 0, 1, 3, 0, 0, 0, 0) + b"acc" +
                      struct.pack("<I", 5) + b"/f/ff" + struct.pack("<q", 4096)),
                     (999, b"")]
        for msg, body in namespace:
            sock.sendall(kvcwire.frame(msg, body))
            assert kvcwire.recv_frame(sock)[1] == -kvcwire.EACCES, msg
        sock.sendall(kvcwire.frame(kvcwire.POOL_STATS, head))
        assert kvcwire.recv_frame(sock)[1] in (0, -errno.ENOENT), "still usable"
    for address in a["storage"]:
        sock, status = kvcwire.connect(address, pool, kvcwire.ROLE_POOL)
        sock.close()
        assert status == -kvcwire.EACCES, address
    sock, status = kvcwire.connect(a["meta"], pool, kvcwire.ROLE_CLUSTER)
    sock.close()
    assert status == -kvcwire.EACCES, "the pool secret is no cluster secret"
    return True


PROBES = {"files": probe_files, "frames": probe_frames, "mount": probe_mount,
          "pool": probe_pool}

if __name__ == "__main__":
    print(json.dumps(PROBES[sys.argv[1]](json.loads(sys.argv[2]))))
    sys.exit(0)


# ---- the tests (as root) ----------------------------------------------------

import pwd  # noqa: E402

import pytest  # noqa: E402

from conftest import BUILD, LIBKVC, PORT_BASE, ROOT, Cluster, wait_until  # noqa: E402

PORTS = PORT_BASE + 200
HTTP_PORT = PORT_BASE + 8650
NOBODY = pwd.getpwnam("nobody")


def as_nobody(probe, **args):
    out = subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}",
                          "--clear-groups", "/usr/bin/python3", str(HERE / "test_access.py"),
                          probe, json.dumps(args)],
                         capture_output=True, text=True, timeout=120, cwd="/")
    assert out.returncode == 0, f"probe {probe} as nobody:\n{out.stdout}{out.stderr}"
    return json.loads(out.stdout.splitlines()[-1])


class Netns:
    """A peer on another host: a network namespace behind a veth pair."""

    def __init__(self):
        tag = uuid.uuid4().hex[:4]
        self.name, self.link = f"kvcacc{tag}", f"kvcacc{tag}v"
        self.host_ip, self.peer_ip = "10.79.0.1", "10.79.0.2"

    def sh(self, *args, check=True):
        return subprocess.run(args, check=check, capture_output=True, text=True, timeout=30)

    def up(self):
        self.sh("ip", "netns", "add", self.name)
        self.sh("ip", "link", "add", self.link, "type", "veth", "peer", "name", "eth0",
                "netns", self.name)
        self.sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.link)
        self.sh("ip", "link", "set", self.link, "up")
        self.sh("ip", "-n", self.name, "addr", "add", f"{self.peer_ip}/30", "dev", "eth0")
        self.sh("ip", "-n", self.name, "link", "set", "eth0", "up")

    def down(self):
        self.sh("ip", "link", "del", self.link, check=False)
        self.sh("ip", "netns", "del", self.name, check=False)


@pytest.fixture(scope="module")
def secured():
    if os.geteuid() != 0:
        pytest.skip("needs root (setpriv, network namespaces)")
    base = pathlib.Path(tempfile.mkdtemp(prefix="kvc-acc-"))
    base.chmod(0o755)  # every user may enter: only the files' own modes protect them
    mount = pathlib.Path(tempfile.mkdtemp(prefix="kvc-acc-mnt-"))
    c = Cluster(base, mount, PORTS, http=f"0.0.0.0:{HTTP_PORT}",
                meta_extra=f"http_token_file = {base}/http.token\n")
    net = Netns()
    try:
        net.up()
        c.stop()
        c.start()
        c.net = net
        c.token = (base / "http.token").read_text().strip()
        yield c
    finally:
        c.stop()
        net.down()
        shutil.rmtree(base, ignore_errors=True)
        try:
            os.rmdir(mount)
        except OSError:
            pass


@pytest.fixture(scope="module")
def private_file(secured):
    d = secured.mount / "shared"
    d.mkdir(mode=0o755, exist_ok=True)
    path = d / "root-only"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, FILE_BYTES)
    os.fsync(fd)
    os.close(fd)
    return path


def check_unchanged(path):
    st = os.stat(path)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o600)
    with open(path, "rb", buffering=0) as f:
        assert f.read() == FILE_BYTES


def test_secret_files_are_closed_to_other_users(secured):
    modes = {name: os.stat(secured.dir / name) for name in ("secret", "pool.secret",
                                                             "http.token")}
    assert modes["secret"].st_mode & 0o777 == 0o600 and modes["secret"].st_uid == 0
    assert modes["pool.secret"].st_mode & 0o777 == 0o640
    assert modes["http.token"].st_mode & 0o777 == 0o640
    conf = as_nobody("files", dir=str(secured.dir))
    for name in ("secret", "pool.secret", "http.token"):
        secret = (secured.dir / name).read_text().strip()
        assert len(secret) == 64 and secret not in conf, name


def test_raw_frames_without_the_secret_are_refused(secured, private_file):
    addresses = [secured.meta_address] + secured.storage_addresses
    assert as_nobody("frames", addresses=addresses, meta=secured.meta_address,
                     ino=os.stat(private_file).st_ino)
    check_unchanged(private_file)
    for address in addresses:
        assert kvcwire.ping(address), f"{address} stopped serving"
    log = (secured.dir / "logs" / "meta.log").read_text()
    assert "connection from 127.0.0.1:" in log and "refused: no credentials" in log
    assert "refused: wrong proof of the cluster secret" in log
    assert "refused: first frame is setattr, not HELLO" in log
    assert "connection from 127.0.0.1:" in (secured.dir / "logs" / "s1.log").read_text()


def test_a_root_only_file_is_closed_to_nobody_through_the_mount(secured, private_file):
    assert as_nobody("mount", path=str(private_file), mount=str(secured.mount),
                     python=str(ROOT / "tools" / "python"), lib=str(LIBKVC))
    check_unchanged(private_file)


def test_the_pool_secret_opens_page_pools_only(secured, private_file):
    assert as_nobody("pool", meta=secured.meta_address, storage=secured.storage_addresses,
                     pool_secret=secured.pool_secret().decode(),
                     ino=os.stat(private_file).st_ino)
    check_unchanged(private_file)
    # What a member of the pool secret's group gets from the tools: the page
    # pools, not the namespace.
    os.chown(secured.pool_secret_file, 0, NOBODY.pw_gid)
    try:
        def admin(*args):
            return subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}",
                                   f"--regid={NOBODY.pw_gid}", "--init-groups",
                                   str(BUILD / "kvc-admin"), "--config", str(secured.conf),
                                   *args], capture_output=True, text=True, timeout=60)
        assert admin("pool", "list").returncode == 0
        out = admin("stat", "shared/root-only")
        assert out.returncode != 0 and "Permission denied" in out.stderr, out.stderr
    finally:
        os.chown(secured.pool_secret_file, 0, 0)


def http(secured, path, method="POST", token=None, netns=None, body="{}"):
    """The status of one request, with curl, from here or from the netns."""
    host = secured.net.host_ip if netns else "127.0.0.1"
    cmd = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", method,
           "-H", "Content-Type: application/json", "--max-time", "20",
           f"http://{host}:{HTTP_PORT}{path}"]
    if method == "POST":
        cmd += ["--data", body]
    if token:
        cmd += ["-H", f"Authorization: Bearer {token}"]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return int(out.stdout or 0)


def test_http_needs_the_token_and_takes_destructive_routes_from_loopback(secured):
    ns, token = secured.net.name, secured.token
    assert http(secured, "/health", "GET") == 200
    assert http(secured, "/health", "GET", netns=ns) == 200
    assert http(secured, "/metrics", "GET") == 401
    assert http(secured, "/keys/batch_exists", body='{"keys": []}') == 401
    assert http(secured, "/keys/batch_exists", token="f" * 64, body='{"keys": []}') == 401
    assert http(secured, "/keys/batch_exists", token=token, body='{"keys": []}') == 200
    assert http(secured, "/0/initialize", token=token, body='{"num_pages": 8}', netns=ns) == 204
    assert http(secured, "/0/exists", token=token, body='{"keys": ["k"]}', netns=ns) == 200
    for route in ("/clear", "/0/clear", "/0/delete_keys"):
        assert http(secured, route, body='{"keys": ["k"]}', netns=ns) == 401, route
        assert http(secured, route, token=token, body='{"keys": ["k"]}', netns=ns) == 403, route
        assert http(secured, route, token=token, body='{"keys": ["k"]}') == 204, route
