"""A minimal speaker of the kvcfs wire protocol (docs/protocol.md), for
tests that send frames the C clients never would: bad magic, truncated
bodies, lies about lengths, wrong or missing secrets. It speaks the
handshake (HELLO, AUTH: HMAC-SHA256 proofs both ways) with the secret of
the cluster an address belongs to (mark_secret), or with whatever a test
passes instead."""
import hashlib
import hmac
import os
import socket
import struct

MAGIC = 0x3143564B
VERSION = 20
HEADER = struct.Struct("<IHHQiIQ")  # magic version type id status body_len data_len

HELLO, AUTH, LOOKUP, GETATTR, CREATE, SETATTR, STATFS = 1, 2, 16, 17, 18, 24, 26
POOL_INIT, POOL_STATS, POOL_BIND = 32, 41, 45
CHUNK_WRITE, CHUNK_READ, SPACE = 64, 65, 69
CHUNK_REMOVE, CHUNK_TRUNCATE, CHUNK_PUNCH = 66, 67, 71
FORWARDED = 1
FD_REGISTER = 98
ROLE_NONE, ROLE_CLUSTER, ROLE_POOL = 0, 1, 2
EACCES, EPROTO = 13, 71

# connect()'s default: the secret mark_secret recorded for the address.
CLUSTER_SECRET = object()


def chunk_write(inode, target, chunk, chunk_size, offset, chain=None, version=1, flags=0):
    """A CHUNK_WRITE body (40 bytes): with one replica, chain i is target i."""
    return struct.pack("<QIIIIIIII", inode, target, chunk, chunk_size, offset,
                       target if chain is None else chain, version, flags, 0)


def chunk_remove(inode, target, chain, version, flags=0):
    """A CHUNK_REMOVE body (24 bytes)."""
    return struct.pack("<QIIII", inode, target, chain, version, flags)


def chunk_truncate(inode, size, target, chunk_size, chain, version, flags=0):
    """A CHUNK_TRUNCATE body (40 bytes)."""
    return struct.pack("<QQIIIIII", inode, size, target, chunk_size, chain, version, flags, 0)


def chunk_punch(inode, target, first, count, chain, version, flags=0):
    """A CHUNK_PUNCH body (32 bytes)."""
    return struct.pack("<QIIIIII", inode, target, first, count, chain, version, flags)


def piece(inode, target, chunk, offset, length, chain=None, version=1):
    """One CHUNK_READ piece (32 bytes)."""
    return struct.pack("<QIIIIII", inode, target, chunk, offset, length,
                       target if chain is None else chain, version)


def frame(msg_type, body=b"", data=b"", request_id=1, magic=MAGIC, version=VERSION,
          body_len=None, data_len=None):
    return HEADER.pack(magic, version, msg_type, request_id, 0,
                       len(body) if body_len is None else body_len,
                       len(data) if data_len is None else data_len) + body + data


def hello_body(role=ROLE_NONE, nonce=b"", version=VERSION):
    return struct.pack("<II", version, role) + nonce


def proof(secret, server, role, client_nonce, server_nonce):
    """HMAC-SHA256 over the 88-byte transcript of src/core/auth.h."""
    label = (b"kvcfs server" if server else b"kvcfs client").ljust(16, b"\0")
    transcript = label + struct.pack("<II", VERSION, role) + client_nonce + server_nonce
    return hmac.new(secret, transcript, hashlib.sha256).digest()


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise ConnectionError("closed")
        out += got
    return out


def recv_frame(sock):
    magic, version, msg_type, rid, status, body_len, data_len = HEADER.unpack(
        recv_exact(sock, HEADER.size))
    assert magic == MAGIC
    body = recv_exact(sock, body_len)
    data = recv_exact(sock, data_len)
    return msg_type, status, body, data


def handshake(sock, secret, role=ROLE_CLUSTER):
    """HELLO and AUTH over sock; secret None: a HELLO without credentials.
    Returns the status the server answered (0: in), and checks that an
    accepting server proved the same secret."""
    if secret is None:
        sock.sendall(frame(HELLO, hello_body(ROLE_NONE)))
        return recv_frame(sock)[1]
    client_nonce = os.urandom(32)
    sock.sendall(frame(HELLO, hello_body(role, client_nonce)))
    _, status, server_nonce, _ = recv_frame(sock)
    if status:
        return status
    sock.sendall(frame(AUTH, proof(secret, False, role, client_nonce, server_nonce),
                       request_id=2))
    _, status, server_proof, _ = recv_frame(sock)
    if status == 0:
        assert hmac.compare_digest(
            server_proof, proof(secret, True, role, client_nonce, server_nonce)), \
            "the server did not prove the secret"
    return status


def connect(address, secret=CLUSTER_SECRET, role=ROLE_CLUSTER, timeout=10):
    """A socket after the handshake, and the server's status for it."""
    if secret is CLUSTER_SECRET:
        secret = secret_of(address)
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    return sock, handshake(sock, secret, role)


def ping(address, secret=CLUSTER_SECRET):
    """True when the server lets us in and answers a request."""
    sock, status = connect(address, secret)
    try:
        if status != 0:
            return False
        msg = GETATTR if address_is_meta(address) else SPACE
        body = struct.pack("<Q", 1) if msg == GETATTR else b""
        sock.sendall(frame(msg, body, request_id=3))
        _, status, _, _ = recv_frame(sock)
        return status == 0
    finally:
        sock.close()


_META = set()
_SECRETS = {}


def address_is_meta(address):
    return address in _META


def mark_meta(address):
    _META.add(address)


def mark_secret(address, path):
    """The secret file of the cluster that serves address."""
    _SECRETS[address] = path


def read_secret(path):
    with open(path, "rb") as f:
        return f.read().rstrip(b"\n")


def secret_of(address):
    return read_secret(_SECRETS[address])
