"""A minimal speaker of the kvcfs wire protocol (docs/protocol.md), for
tests that send frames the C clients never would: bad magic, truncated
bodies, lies about lengths, wrong tokens."""
import socket
import struct

MAGIC = 0x3143564B
VERSION = 2
HEADER = struct.Struct("<IHHQiIQ")  # magic version type id status body_len data_len

HELLO, LOOKUP, GETATTR, CREATE, STATFS = 1, 16, 17, 18, 26
CHUNK_WRITE, CHUNK_READ, SPACE = 64, 65, 69


def frame(msg_type, body=b"", data=b"", request_id=1, magic=MAGIC, version=VERSION,
          body_len=None, data_len=None):
    return HEADER.pack(magic, version, msg_type, request_id, 0,
                       len(body) if body_len is None else body_len,
                       len(data) if data_len is None else data_len) + body + data


def hello_body(token=b""):
    return struct.pack("<II", VERSION, len(token)) + token


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


def connect(address, token=b"", timeout=10):
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=timeout)
    sock.sendall(frame(HELLO, hello_body(token)))
    _, status, _, _ = recv_frame(sock)
    return sock, status


def ping(address, token=b""):
    """True when the server greets us and answers a request."""
    sock, status = connect(address, token)
    try:
        if status != 0:
            return False
        msg = GETATTR if address_is_meta(address) else SPACE
        body = struct.pack("<Q", 1) if msg == GETATTR else b""
        sock.sendall(frame(msg, body, request_id=2))
        _, status, _, _ = recv_frame(sock)
        return status == 0
    finally:
        sock.close()


_META = set()


def address_is_meta(address):
    return address in _META


def mark_meta(address):
    _META.add(address)
