"""A peer that stops stalls only itself: a raw client that asks kvc-storage
for a big read and never reads its socket, or sends half a frame, or never
greets, or idles, must not block writers and readers of the same chunks
through the mount, and its connection is closed after the server's
timeouts (server_io_timeout_ms, server_idle_timeout_ms). Past
server_max_connections a new connection gets a clear refusal.

These run on a private cluster with short server timeouts."""
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading

import pytest

import kvcwire
from conftest import CHUNK, PORT_BASE, Cluster, wait_until

IO_TIMEOUT_MS = 2000
IDLE_TIMEOUT_MS = 4000
MAX_CONNECTIONS = 48
EBUSY = -16


class StallCluster(Cluster):
    """The test cluster with short server timeouts and no HTTP (its ports
    would fall outside this session's range)."""

    def write_config(self):
        super().write_config()
        text = self.conf.read_text()
        text = "".join(line if not line.startswith("http =") else "http = off\n"
                       for line in text.splitlines(keepends=True))
        self.conf.write_text(
            f"server_io_timeout_ms = {IO_TIMEOUT_MS}\n"
            f"server_idle_timeout_ms = {IDLE_TIMEOUT_MS}\n"
            f"server_max_connections = {MAX_CONNECTIONS}\n" + text)

    def log(self, name):
        return (self.dir / "logs" / f"{name}.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def stall_cluster():
    base = tempfile.mkdtemp(prefix="kvc-stall-")
    mount = tempfile.mkdtemp(prefix="kvc-stall-mnt-")
    c = StallCluster(base, mount, PORT_BASE + 200)
    c.stop()
    c.start()
    yield c
    c.stop()
    shutil.rmtree(base, ignore_errors=True)
    try:
        os.rmdir(mount)
    except OSError:
        pass


def layout_of(path):
    """(inode, chunk_size, targets in stripe order) of a file on the mount."""
    def xattr(name):
        return subprocess.run(["getfattr", "-n", name, "--only-values", str(path)],
                              capture_output=True, text=True, check=True).stdout
    fields = dict(f.split("=") for f in xattr("user.kvc.layout").split())
    return (int(xattr("user.kvc.inode")), int(fields["chunk_size"]),
            [int(t) for t in fields["targets"].split(",")])


def pattern(seed, size):
    return bytes((seed + i * 7 + (i >> 12)) & 0xFF for i in range(256)) * (size // 256)


def greeted(address, rcvbuf=None):
    host, port = address.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:  # before connect, so the window stays small
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(30)
    sock.connect((host, int(port)))
    assert kvcwire.handshake(sock, kvcwire.secret_of(address)) == 0
    return sock


def read_body(inode, target, chunks, length):
    body = struct.pack("<II", len(chunks), 0)
    for c in chunks:
        body += kvcwire.piece(inode, target, c, 0, length)
    return body


def write_through_mount(path, offset, data, result):
    try:
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        result["ok"] = True
    except OSError as e:
        result["error"] = e


def closed_by_server(sock, full_size):
    """Read what the server sent; True when it closed before sending it all."""
    got = 0
    try:
        while True:
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            got += len(chunk)
    except ConnectionResetError:
        pass
    return got < full_size


def test_a_reader_that_never_reads_blocks_no_writer(stall_cluster):
    c = stall_cluster
    path = c.mount / "stalled-read"
    size = 48 * CHUNK  # 16 MiB of it on one server: far more than socket buffers hold
    path.write_bytes(pattern(1, size))
    inode, chunk_size, targets = layout_of(path)
    assert chunk_size == CHUNK
    target = targets[0]  # chunks 0, 3, 6, ... live there
    chunks = list(range(0, size // CHUNK, len(targets)))
    full = 32 + 8 * len(chunks) + CHUNK * len(chunks)
    before = c.log(f"s{target + 1}").count("stalled")

    sock = greeted(c.storage_addresses[target], rcvbuf=4096)
    try:
        sock.sendall(kvcwire.frame(kvcwire.CHUNK_READ,
                                   read_body(inode, target, chunks, CHUNK)))
        # The server is now blocked sending to us. Overwrite chunk 0 (one
        # of those it is sending) through the mount: it must go through.
        new = pattern(99, CHUNK)
        result = {}
        writer = threading.Thread(target=write_through_mount, args=(path, 0, new, result))
        writer.start()
        writer.join(60)
        assert not writer.is_alive(), "the mount's write hung behind a stalled reader"
        assert result.get("ok"), f"the mount's write failed: {result.get('error')}"
        with open(path, "rb") as f:
            assert f.read(CHUNK) == new
            f.seek(3 * CHUNK)
            assert f.read(CHUNK) == pattern(1, size)[3 * CHUNK:4 * CHUNK]
        # and the stalled connection is closed once the send timeout passes
        assert wait_until(lambda: c.log(f"s{target + 1}").count("stalled") > before,
                          timeout=60), "the stalled connection was never closed"
        assert closed_by_server(sock, full), "the server sent the whole reply after all"
    finally:
        sock.close()


def test_half_a_frame_is_closed_and_blocks_nobody(stall_cluster):
    c = stall_cluster
    path = c.mount / "half-frame"
    path.write_bytes(pattern(2, 2 * CHUNK))
    inode, _, targets = layout_of(path)
    target = targets[0]
    sock = greeted(c.storage_addresses[target])
    try:
        body = read_body(inode, target, [0], CHUNK)
        frame = kvcwire.frame(kvcwire.CHUNK_READ, body)
        sock.sendall(frame[:32 + len(body) // 2])  # the header and half the body
        # Meanwhile the same chunk is written and read through the mount.
        new = pattern(3, CHUNK)
        with open(path, "r+b") as f:
            f.write(new)
            f.flush()
            os.fsync(f.fileno())
        assert path.read_bytes()[:CHUNK] == new
        # The server gives up on the half frame: end of stream, no answer.
        assert sock.recv(4096) == b""
    finally:
        sock.close()


def test_a_silent_connection_is_closed(stall_cluster):
    c = stall_cluster
    host, port = c.storage_addresses[0].rsplit(":", 1)
    # never greets: closed after the I/O timeout
    sock = socket.create_connection((host, int(port)), timeout=30)
    try:
        assert sock.recv(4096) == b""
    finally:
        sock.close()
    # greets, then idles: closed after the idle timeout
    sock = greeted(c.storage_addresses[0])
    try:
        assert sock.recv(4096) == b""
    finally:
        sock.close()
    # The mount's own pooled connections idled out too; it reconnects.
    path = c.mount / "after-idle"
    path.write_bytes(pattern(4, 3 * CHUNK))
    assert path.read_bytes() == pattern(4, 3 * CHUNK)


def test_past_the_connection_limit_new_ones_are_refused(stall_cluster):
    c = stall_cluster
    address = c.storage_addresses[1]
    host, port = address.rsplit(":", 1)
    held, refused = [], None
    try:
        for _ in range(MAX_CONNECTIONS + 1):
            sock = socket.create_connection((host, int(port)), timeout=30)
            held.append(sock)
            try:
                status = kvcwire.handshake(sock, kvcwire.secret_of(address))
            except (ConnectionError, OSError):
                status = None  # closed before the refusal could be read
            if status != 0:
                refused = status
                break
        assert refused == EBUSY, f"connection {len(held)} was answered {refused}"
        assert wait_until(lambda: "server_max_connections" in c.log("s2"), timeout=30)
    finally:
        for sock in held:
            sock.close()
    # Once ours are gone, the server serves again.
    assert wait_until(lambda: kvcwire.ping(address), timeout=30)
    path = c.mount / "after-limit"
    path.write_bytes(pattern(5, 3 * CHUNK))
    assert path.read_bytes() == pattern(5, 3 * CHUNK)
