"""Bad input to the servers: random bytes, truncated frames, lies about
lengths, wrong or missing secrets; bad config files and secret files. Each server answers with an error
or closes that one connection, and keeps serving everyone else."""
import os
import random
import socket
import struct
import subprocess

import pytest

import kvcwire
from conftest import BUILD


def send_raw(address, payload, greet=True):
    """payload after a handshake with the cluster's secret (greet), or as
    the connection's first bytes."""
    if greet:
        sock, status = kvcwire.connect(address, timeout=5)
        assert status == 0
    else:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=5)
    try:
        # The server may close on us mid-send: that is a correct answer.
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:
            pass
    finally:
        sock.close()


def all_addresses(cluster):
    return [cluster.meta_address] + cluster.storage_addresses


def test_random_and_truncated_frames_leave_servers_serving(cluster, workdir):
    rng = random.Random(1234)
    (workdir / "probe").write_bytes(b"still here")
    for address in all_addresses(cluster):
        for i in range(60):
            kind = i % 6
            if kind == 0:
                payload = rng.randbytes(rng.randrange(1, 200))
            elif kind == 1:  # a valid header promising a body that never comes
                payload = kvcwire.frame(kvcwire.LOOKUP, body_len=5000)[:32] + b"abc"
            elif kind == 2:  # wrong magic
                payload = kvcwire.frame(kvcwire.GETATTR, struct.pack("<Q", 1), magic=0x1234)
            elif kind == 3:  # oversized lengths
                payload = kvcwire.frame(kvcwire.CHUNK_WRITE, body_len=1 << 30, data_len=1 << 40)
            elif kind == 4:  # bodies too short for their message
                payload = b"".join(kvcwire.frame(t, b"\x01\x02") for t in (16, 17, 18, 64, 65, 66))
            else:  # a chunk read asking for absurd pieces
                body = struct.pack("<II", 1000000, 0) + rng.randbytes(48)
                payload = kvcwire.frame(kvcwire.CHUNK_READ, body)
            send_raw(address, payload, greet=(i % 2 == 0))
        assert kvcwire.ping(address), f"{address} stopped serving"
    assert (workdir / "probe").read_bytes() == b"still here"


def test_bad_requests_get_clear_errors(cluster):
    sock, status = kvcwire.connect(cluster.storage_addresses[0])
    assert status == 0
    # write past the chunk end: -EINVAL, connection stays usable
    body = kvcwire.chunk_write(99, 0, 0, 1 << 20, (1 << 20) - 2)
    sock.sendall(kvcwire.frame(kvcwire.CHUNK_WRITE, body, b"12345"))
    _, status, _, _ = kvcwire.recv_frame(sock)
    assert status == -22
    # a target this server does not have: -ENXIO
    body = kvcwire.chunk_write(99, 2, 0, 1 << 20, 0)
    sock.sendall(kvcwire.frame(kvcwire.CHUNK_WRITE, body, b"12345"))
    _, status, _, _ = kvcwire.recv_frame(sock)
    assert status == -6
    sock.sendall(kvcwire.frame(kvcwire.SPACE))
    _, status, _, _ = kvcwire.recv_frame(sock)
    assert status == 0
    sock.close()
    meta, status = kvcwire.connect(cluster.meta_address)
    # lookup with a name containing '/': -EINVAL
    body = struct.pack("<QII", 1, 3, 0) + b"a/b"
    meta.sendall(kvcwire.frame(kvcwire.LOOKUP, body))
    _, status, _, _ = kvcwire.recv_frame(meta)
    assert status == -22
    # name length beyond the body: -EINVAL
    body = struct.pack("<QII", 1, 200, 0) + b"ab"
    meta.sendall(kvcwire.frame(kvcwire.LOOKUP, body))
    _, status, _, _ = kvcwire.recv_frame(meta)
    assert status == -22
    meta.close()


def test_watch_dir_checks_its_directory_and_its_client(cluster, workdir):
    """WATCH_DIR (59): only for a connection acting for a client
    (CLIENT_HELLO), on a directory that exists, with an exact body."""
    WATCH_DIR, CLIENT_HELLO = 59, 55
    (workdir / "plain").write_bytes(b"x")
    dir_ino = os.stat(workdir).st_ino
    file_ino = os.stat(workdir / "plain").st_ino
    meta, status = kvcwire.connect(cluster.meta_address)
    assert status == 0

    def ask(body):
        meta.sendall(kvcwire.frame(WATCH_DIR, body))
        return kvcwire.recv_frame(meta)[1]
    assert ask(struct.pack("<Q", dir_ino)) == -22  # acts for no client yet
    meta.sendall(kvcwire.frame(CLIENT_HELLO, os.urandom(16) + struct.pack("<II", 10000, 0)))
    assert kvcwire.recv_frame(meta)[1] == 0
    assert ask(struct.pack("<Q", dir_ino)) == 0
    assert ask(struct.pack("<Q", file_ino)) == -20  # ENOTDIR
    assert ask(struct.pack("<Q", 1 << 60)) == -2   # ENOENT
    assert ask(struct.pack("<I", 1)) == -22        # short body
    assert ask(struct.pack("<QQ", dir_ino, 0)) == -22  # long body
    assert ask(struct.pack("<Q", dir_ino)) == 0    # still serving
    meta.close()


def test_grants_from_a_hostile_client(cluster, workdir):
    """INO_GRANT (60) and INO_RETURN (63) sent by hand: malformed bodies
    get EINVAL, a client's return touches only its own grants (another
    id's return of them changes nothing), and kvc-meta keeps serving."""
    INO_GRANT, INO_RETURN = 60, 63
    import json
    meta, status = kvcwire.connect(cluster.meta_address)
    assert status == 0

    def ask(msg_type, body):
        meta.sendall(kvcwire.frame(msg_type, body))
        _, st, reply, _ = kvcwire.recv_frame(meta)
        return st, reply

    def grants():
        return json.loads(cluster.admin("--json", "status").stdout)["meta"]["grants"]

    a, c = os.urandom(16), os.urandom(16)
    assert ask(INO_GRANT, struct.pack("<II", 4, 0))[0] == -22      # the old 8 bytes
    assert ask(INO_GRANT, a + struct.pack("<II", 0, 0))[0] == -22  # count 0
    assert ask(INO_GRANT, a + struct.pack("<II", 4097, 0))[0] == -22
    assert ask(INO_GRANT, a + struct.pack("<II", 4, 1))[0] == -22  # reserved word
    held = grants()
    st, reply = ask(INO_GRANT, a + struct.pack("<II", 4, 0))
    assert st == 0
    first, count, chains = struct.unpack("<QII", reply)
    assert count == 4 and first > 1 and chains >= 1
    assert grants() == held + 1

    def ret(client, *ranges):
        body = client
        for r in list(ranges) + [(0, 0, 0)] * (2 - len(ranges)):
            body += struct.pack("<QII", *r)
        return ask(INO_RETURN, body)
    assert ask(INO_RETURN, a + b"\0" * 31)[0] == -22              # short
    assert ret(a, (first, 4, 1))[0] == -22                          # reserved word
    assert ret(a, (first, 5000, 0))[0] == -22                       # over any grant
    assert ret(a, (first + 1, 1, 0))[0] == -22                      # not its grant's end
    assert grants() == held + 1, "a refused return changes nothing"
    st, reply = ret(c, (first, 4, 0))                               # another id
    assert st == 0 and struct.unpack("<Q", reply)[0] == 0
    assert grants() == held + 1, "another client's return leaves a's grant"
    st, reply = ret(a, (first, 4, 0))
    assert st == 0 and struct.unpack("<Q", reply)[0] == 0, "never used: nothing reclaimed"
    assert grants() == held
    st, reply = ret(a)                                              # again: nothing held
    assert st == 0 and struct.unpack("<Q", reply)[0] == 0
    meta.close()
    (workdir / "after").write_bytes(b"served")
    assert (workdir / "after").read_bytes() == b"served"


def test_version_mismatch_is_refused(cluster):
    host, port = cluster.meta_address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    body = struct.pack("<II", 99, 0)
    sock.sendall(kvcwire.frame(kvcwire.HELLO, body))
    _, status, _, _ = kvcwire.recv_frame(sock)
    assert status == -71  # EPROTO
    sock.close()


@pytest.mark.parametrize("text,needle", [
    ("[meta]\naddress = 127.0.0.1:1\nbogus = 2\n", "unknown key 'bogus'"),
    ("chunk_size = 12345\n", "chunk_size must be"),
    ("[meta]\naddress = 127.0.0.1:1\n", "no [storage NAME] section"),
    ("token = s3cret\n", "'token' is gone: name a secret file"),
])
def test_bad_config_is_refused_by_every_daemon(tmp_path, text, needle):
    conf = tmp_path / "bad.conf"
    conf.write_text(text)
    for cmd in (["kvc-meta", "--config", str(conf)],
                ["kvc-storage", "--config", str(conf), "--name", "s1"],
                ["kvc-fuse", "--config", str(conf)],
                ["kvc-admin", "--config", str(conf), "status"]):
        out = subprocess.run([str(BUILD / cmd[0]), *cmd[1:]], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode != 0, cmd
        assert needle in out.stderr, (cmd, out.stderr)


def test_missing_config_file(tmp_path):
    out = subprocess.run([str(BUILD / "kvc-meta"), "--config", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "cannot read" in out.stderr


def test_cluster_secret_is_enforced(cluster):
    """Every daemon refuses a wrong secret, no credentials, and the pool
    secret where it does not open anything; the right one gets in."""
    wrong = b"0" * 64
    for address in [cluster.meta_address] + cluster.storage_addresses:
        for secret, role in ((wrong, kvcwire.ROLE_CLUSTER), (None, kvcwire.ROLE_NONE),
                             (cluster.secret(), kvcwire.ROLE_POOL)):
            sock, status = kvcwire.connect(address, secret, role)
            sock.close()
            assert status == -13, (address, role)  # EACCES
        assert kvcwire.ping(address)
    sock, status = kvcwire.connect(cluster.storage_addresses[0], cluster.pool_secret(),
                                   kvcwire.ROLE_POOL)
    sock.close()
    assert status == -13, "the pool secret opens no storage server"


def test_daemons_refuse_missing_or_loose_secrets(tmp_path):
    base = ("[meta]\naddress = 127.0.0.1:1\ndata = {d}/meta\n"
            "[storage s1]\naddress = 127.0.0.1:2\ntarget = {d}/t\n").format(d=tmp_path)
    loose = tmp_path / "loose.secret"
    loose.write_text("a" * 64 + "\n")
    loose.chmod(0o644)
    short = tmp_path / "short.secret"
    short.write_text("s3cret\n")
    short.chmod(0o600)
    cases = [("", "names no secret_file"),
             (f"secret_file = {loose}\n", "lets others at the secret"),
             (f"secret_file = {short}\n", "32 to 256 printable bytes"),
             (f"secret_file = {tmp_path}/none\n", "cannot read")]
    for head, needle in cases:
        conf = tmp_path / "cluster.conf"
        conf.write_text(head + base)
        for cmd in (["kvc-meta", "--config", str(conf)],
                    ["kvc-storage", "--config", str(conf), "--name", "s1"],
                    ["kvc-fuse", "--config", str(conf)]):
            out = subprocess.run([str(BUILD / cmd[0]), *cmd[1:]], capture_output=True,
                                 text=True, timeout=30)
            assert out.returncode != 0, (cmd, head)
            assert needle in out.stderr, (cmd, out.stderr)
    assert not (tmp_path / "meta").exists(), "kvc-meta refused before touching its data"


def chunk_zero_of(path):
    """(inode, target of chunk 0) of a file on the mount."""
    def xattr(name):
        return subprocess.run(["getfattr", "-n", name, "--only-values", str(path)],
                              capture_output=True, text=True, check=True).stdout
    targets = dict(f.split("=") for f in xattr("user.kvc.layout").split())["targets"]
    return int(xattr("user.kvc.inode")), int(targets.split(",")[0])


def test_a_chunk_read_of_the_most_pieces_is_answered(cluster, workdir):
    # 1,024 pieces, the protocol's limit: with the reply's header and body
    # that is more iovecs than one sendmsg takes.
    data = bytes(random.Random(7).randbytes(1 << 20))
    path = workdir / "pieces"
    path.write_bytes(data)
    inode, target = chunk_zero_of(path)

    def read_body(count):
        return struct.pack("<II", count, 0) + b"".join(
            kvcwire.piece(inode, target, 0, (i % 1024) * 1024, 1024)
            for i in range(count))

    sock, status = kvcwire.connect(cluster.storage_addresses[target])
    assert status == 0
    try:
        sock.sendall(kvcwire.frame(kvcwire.CHUNK_READ, read_body(1024)))
        _, status, reply, got = kvcwire.recv_frame(sock)
        assert status == 0
        assert [struct.unpack_from("<iI", reply, 8 * i) for i in range(1024)] == \
            [(0, 1024)] * 1024
        assert got == data
        # one more is past the limit: refused, and the connection goes on
        sock.sendall(kvcwire.frame(kvcwire.CHUNK_READ, read_body(1025)))
        _, status, _, _ = kvcwire.recv_frame(sock)
        assert status == -22
        sock.sendall(kvcwire.frame(kvcwire.SPACE))
        _, status, _, _ = kvcwire.recv_frame(sock)
        assert status == 0
    finally:
        sock.close()


# Every kvc-storage message with a body of the right size, for target 0
# (the first server's); an inode no file has.
STRAY = 0x7FFF0001
STORAGE_BODIES = {
    64: (kvcwire.chunk_write(STRAY, 0, 0, 1 << 20, 0), b"x"),             # CHUNK_WRITE
    65: (struct.pack("<II", 1, 0) + kvcwire.piece(STRAY, 0, 0, 0, 10), b""),  # READ
    66: (struct.pack("<QIIII", STRAY, 0, 0, 1, 0), b""),                  # CHUNK_REMOVE
    67: (struct.pack("<QQIIIIII", STRAY, 0, 0, 1 << 20, 0, 1, 0, 0), b""),  # CHUNK_TRUNCATE
    68: (struct.pack("<QII", STRAY, 0, 0), b""),                          # CHUNK_LAST
    69: (b"", b""),                                                       # SPACE
    70: (b"", b""),                                                       # SYNC
    71: (struct.pack("<QIIIIII", STRAY, 0, 0, 1, 0, 1, 0), b""),          # CHUNK_PUNCH
    72: (struct.pack("<QIIIIII", 0, 0, 0, 10, 0, 0, 0), b""),             # CHUNK_LIST
    74: (struct.pack("<II", 0, 0), b""),                                  # RESYNC_STATUS
}


def exchange(sock, msg_type, body, data=b""):
    sock.sendall(kvcwire.frame(msg_type, body, data))
    _, status, _, _ = kvcwire.recv_frame(sock)
    return status


def test_each_storage_message_needs_its_exact_body(cluster):
    """The dispatch table's rule: a body one byte short or one byte long
    is answered EINVAL, an unlisted type EOPNOTSUPP, and the connection
    goes on; the right size is served."""
    sock, status = kvcwire.connect(cluster.storage_addresses[0])
    assert status == 0
    try:
        for msg_type, (body, data) in STORAGE_BODIES.items():
            variants = [("long", body + b"\0")]
            if body:
                variants.append(("short", body[:-1]))
            for name, bad in variants:
                assert exchange(sock, msg_type, bad, data) == -22, (msg_type, name)
                assert exchange(sock, kvcwire.SPACE, b"") == 0, (msg_type, name)
        # a CHUNK_READ too short for its fixed part, and one whose pieces
        # do not fill what its count announces
        assert exchange(sock, 65, b"\1\0\0") == -22
        assert exchange(sock, 65, struct.pack("<II", 2, 0) + STORAGE_BODIES[65][0][8:]) == -22
        # data on a message that takes none: dropped, EINVAL, in frame
        assert exchange(sock, 69, b"", b"junk") == -22
        # CHUNK_RESYNC's body is exact too (test_resync.py runs real ones)
        resync = struct.pack("<IIIIII", 0, 1, 0, 1, 0, 0)
        assert exchange(sock, 73, resync + b"\0") == -22
        assert exchange(sock, 73, resync[:-1]) == -22
        # types that are not storage messages
        for msg_type in (0, 16, 63, 90, 96, 65535):
            assert exchange(sock, msg_type, b"\0" * 8) == -95, msg_type
        # same-host placement only on the Unix socket (test_placement.py)
        assert exchange(sock, 75, b"") == -95
        assert exchange(sock, 77, b"\0" * 8) == -95
        assert exchange(sock, 78, struct.pack("<QII", 1, 1, 0) + b"\0" * 40) == -95
        # a target's directory and counters (local reads): the Unix socket only
        assert exchange(sock, 84, struct.pack("<II", 0, 0)) == -95
        assert exchange(sock, 84, b"\0" * 9) == -22
        assert exchange(sock, 90, b"", b"some data") == -95
        # and every message of the right size is served
        for msg_type, (body, data) in STORAGE_BODIES.items():
            assert exchange(sock, msg_type, body, data) == 0, msg_type
    finally:
        sock.close()
    assert kvcwire.ping(cluster.storage_addresses[0])
