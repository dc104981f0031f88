"""Prometheus metrics of every daemon (docs/operations.md "Metrics"):
file I/O through the mount and through USRBIO rings, then each daemon's
GET /metrics parsed strictly (the text exposition format 0.0.4) and the
counters that I/O touched checked to have moved; bad requests to a
metrics port get errors and the daemon keeps serving."""
import http.client
import math
import os
import re
import socket
import subprocess
import time

import pytest

from conftest import BUILD, _drop_caches, drop_second_mount, second_mount, wait_until

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({NAME})(?:\{{((?:{LABEL})(?:,{LABEL})*)?\}})? (\S+)$")
LABEL_ONE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}


def unescape(value):
    return re.sub(r'\\([\\"n])', lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse(text):
    """Strictly parse an exposition: {(name, frozenset(labels)): value},
    with every histogram checked (monotone buckets, +Inf last and equal
    to _count, a _sum)."""
    assert text.endswith("\n"), "the exposition ends with a newline"
    types, samples, order = {}, {}, []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            assert len(parts) >= 3 and parts[1] in ("HELP", "TYPE"), line
            assert re.fullmatch(NAME, parts[2]), line
            if parts[1] == "TYPE":
                assert len(parts) == 4 and parts[3] in TYPES, line
                assert parts[2] not in types, f"second TYPE for {parts[2]}"
                assert not any(n == parts[2] for n, _ in samples), f"TYPE after samples: {line}"
                types[parts[2]] = parts[3]
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        pairs = [(k, unescape(v)) for k, v in LABEL_ONE.findall(labels)]
        assert len({k for k, _ in pairs}) == len(pairs), f"a label twice: {line}"
        v = float(value)  # +Inf, -Inf and NaN included
        key = (name, frozenset(pairs))
        assert key not in samples, f"a series twice: {line}"
        samples[key] = v
        order.append(key)
    for family, kind in types.items():
        if kind == "histogram":
            check_histogram(family, samples, order)
    return samples


def check_histogram(family, samples, order):
    groups = {}
    for name, labels in order:
        if name == family + "_bucket":
            le = dict(labels)["le"]
            rest = frozenset((k, v) for k, v in labels if k != "le")
            groups.setdefault(rest, []).append((le, samples[(name, labels)]))
    assert groups, f"histogram {family} has no buckets"
    for rest, buckets in groups.items():
        bounds = [float(le) for le, _ in buckets]
        assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds), family
        assert buckets[-1][0] == "+Inf", f"{family}: last bucket is not +Inf"
        counts = [c for _, c in buckets]
        assert all(a <= b for a, b in zip(counts, counts[1:])), f"{family}: not monotone"
        assert samples[(family + "_count", rest)] == counts[-1], f"{family}: +Inf != _count"
        assert math.isfinite(samples[(family + "_sum", rest)])


def scrape(address):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/metrics")
        r = conn.getresponse()
        body = r.read().decode()
        assert r.status == 200, body
        assert r.getheader("Content-Type").startswith("text/plain; version=0.0.4")
        return parse(body)
    finally:
        conn.close()


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def total(samples_list, name, **labels):
    return sum(value(s, name, **labels) for s in samples_list)


def scrape_all(cluster):
    return {"storage": [scrape(a) for a in cluster.storage_metrics],
            "fuse": scrape(cluster.fuse_metrics), "meta": scrape(cluster.http[7:])}


def test_every_daemon_counts_the_io_it_served(cluster, workdir):
    before = scrape_all(cluster)
    size = 3 * (1 << 20) + 4321
    data = os.urandom(size)
    (workdir / "f").write_bytes(data)
    _drop_caches()
    with open(workdir / "f", "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        assert f.read() == data
    ring_size = 2 * (1 << 20) + 17
    out = subprocess.run([str(BUILD / "tests" / "usrbio" / "ring_roundtrip"), "write",
                          str(workdir / "ring"), str(workdir.parent / ".ref-metrics"),
                          str(ring_size), "7", "2"], capture_output=True, text=True, timeout=120)
    os.unlink(workdir.parent / ".ref-metrics")
    assert out.returncode == 0, out.stderr
    after = scrape_all(cluster)

    st0, st1 = before["storage"], after["storage"]
    # The writes: received over TCP, or placed (a same-host server takes
    # the bytes from kvc-fuse's staging memory or the ring's iov).
    def writes(st):
        return total(st, "kvc_storage_requests_total", type="chunk_write") + \
            total(st, "kvc_storage_place_writes_total")

    def written(st):
        return total(st, "kvc_storage_request_data_bytes_total", type="chunk_write") + \
            total(st, "kvc_storage_place_write_bytes_total")
    assert writes(st1) > writes(st0)
    assert written(st1) - written(st0) >= size + ring_size
    # The FUSE read: sent back over TCP, or placed (a same-host server
    # copies into kvc-fuse's read buffer: fuse/read_buffer.h), or, what
    # the page cache of a same-host single-copy target holds, read by
    # kvc-fuse itself (src/client/transport_local.h).
    read = total(st1, "kvc_storage_reply_data_bytes_total", type="chunk_read") - \
        total(st0, "kvc_storage_reply_data_bytes_total", type="chunk_read") + \
        total(st1, "kvc_storage_place_read_bytes_total") - \
        total(st0, "kvc_storage_place_read_bytes_total") + \
        value(after["fuse"], "kvc_fuse_transport_local_bytes_total") - \
        value(before["fuse"], "kvc_fuse_transport_local_bytes_total")
    assert read >= size
    assert total(st1, "kvc_storage_request_seconds_count", type="chunk_write") == \
        total(st1, "kvc_storage_requests_total", type="chunk_write")
    # Placed writes come as requests on the placement socket, counted and
    # timed as kvc_storage_placement_* (this host's servers place).
    placed = total(st1, "kvc_storage_place_writes_total") - \
        total(st0, "kvc_storage_place_writes_total")
    requests = total(st1, "kvc_storage_placement_requests_total", type="place_write") - \
        total(st0, "kvc_storage_placement_requests_total", type="place_write")
    assert placed > 0 and requests > 0, (placed, requests)
    for t in ("place_write", "place_read"):
        assert total(st1, "kvc_storage_placement_request_seconds_count", type=t) == \
            total(st1, "kvc_storage_placement_requests_total", type=t), t
    for i, s in enumerate(st1):
        assert value(s, "kvc_storage_target_total_bytes", target=str(i)) > 0
        assert value(s, "kvc_storage_target_chunks", target=str(i)) > 0
        assert value(s, "kvc_storage_target_refusing", target=str(i)) == 0
        assert value(s, "kvc_storage_connections") >= 1

    f0, f1 = before["fuse"], after["fuse"]
    for op in ("create", "write", "read", "flush", "release", "lookup"):
        assert value(f1, "kvc_fuse_ops_total", op=op) > value(f0, "kvc_fuse_ops_total", op=op), op
        assert value(f1, "kvc_fuse_op_seconds_count", op=op) == \
            value(f1, "kvc_fuse_ops_total", op=op), op
    assert value(f1, "kvc_fuse_bytes_total", dir="write") - \
        value(f0, "kvc_fuse_bytes_total", dir="write") >= size
    assert value(f1, "kvc_fuse_bytes_total", dir="read") - \
        value(f0, "kvc_fuse_bytes_total", dir="read") >= size
    assert value(f1, "kvc_fuse_ring_entries_submitted_total", dir="write") > \
        value(f0, "kvc_fuse_ring_entries_submitted_total", dir="write")
    assert value(f1, "kvc_fuse_ring_entries_completed_total") > \
        value(f0, "kvc_fuse_ring_entries_completed_total")
    assert value(f1, "kvc_fuse_ring_bytes_total", dir="write") - \
        value(f0, "kvc_fuse_ring_bytes_total", dir="write") >= ring_size
    assert value(f1, "kvc_fuse_ring_queue_depth") >= 0
    assert value(f1, "kvc_fuse_meta_events_connected") == 1

    m0, m1 = before["meta"], after["meta"]
    assert value(m1, "kvc_meta_requests_total", type="create") > \
        value(m0, "kvc_meta_requests_total", type="create")
    assert value(m1, "kvc_meta_request_seconds_count", type="create") == \
        value(m1, "kvc_meta_requests_total", type="create")
    assert ("kvc_pool_exists_hits_total", frozenset()) in m1  # the pools' own still there


def piece_reads(cluster, path):
    """kvc_storage_target_piece_reads_total{path} over every target."""
    return sum(v for a in cluster.storage_metrics for (name, labels), v in scrape(a).items()
               if name == "kvc_storage_target_piece_reads_total" and ("path", path) in labels)


@pytest.fixture(scope="module")
def served(cluster):
    """The cluster through a kvc-fuse with `local_reads = off`: every read
    goes to a server."""
    from conftest import PORT_BASE, server_placement
    with server_placement(cluster, PORT_BASE + 37) as c:
        yield c


def test_storage_counts_piece_reads_from_the_page_cache_and_the_io_uring(served, workdir):
    """A file's chunks just written are in the servers' page cache: their
    pieces are read at once (path="cached"); once the page cache dropped
    them, through the io_uring: whole 4 KiB-aligned pieces with O_DIRECT
    (path="direct": `storage_direct_reads = on` on the shared cluster), the last
    chunk's short tail through the page cache (path="io_uring"). Direct
    reads leave the page cache alone: read again, they are direct again.
    (Read through a kvc-fuse that sends every read to its server.)"""
    from conftest import CHUNK, chunk_files_of
    cluster = served
    data = os.urandom(2 * CHUNK + 200_000)  # the last chunk past the inline limit too
    path = served.mount / workdir.name / "pieces"
    path.write_bytes(data)
    files = chunk_files_of(cluster, os.stat(path).st_ino)
    assert len(files) == 3

    def read_back():
        with open(path, "rb") as f:  # from the servers, not this kernel's cache
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            assert f.read() == data

    def counts():
        return {p: piece_reads(cluster, p) for p in ("cached", "io_uring", "direct")}

    before = counts()
    read_back()
    after = counts()
    assert after["cached"] >= before["cached"] + 3
    assert after["io_uring"] == before["io_uring"] and after["direct"] == before["direct"]
    os.sync()  # clean pages, which the hint drops
    for name in files:
        fd = os.open(name, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES"] +
                         [str(f) for f in files], capture_output=True, text=True, check=True)
    if any(int(x) for x in out.stdout.split()):
        pytest.skip(f"the chunk files stay in memory here (tmpfs?): {out.stdout.split()}")
    before = counts()
    read_back()
    after = counts()
    assert after["direct"] >= before["direct"] + 2, (before, after)  # the whole chunks
    assert after["io_uring"] >= before["io_uring"] + 1  # the short tail
    assert after["cached"] == before["cached"]
    before = counts()
    read_back()  # the tail is in the page cache now, the rest is not
    after = counts()
    assert after["direct"] >= before["direct"] + 2, (before, after)


def test_a_burst_of_reads_ends_its_sessions_in_few_close_manys(cluster, workdir):
    """Reading 64 keys one after another (open, read, close each) opens
    64 sessions in kvc-meta; their CLOSEs wait in kvc-fuse's close queue
    for 5 ms after the first of a batch, so they reach kvc-meta in a few
    CLOSE_MANYs. Sent as soon as queued, nearly one a file went (a read
    takes longer than a CLOSE_MANY's round trip): the bound is half."""
    files = 64
    for i in range(files):
        (workdir / f"k{i}").write_bytes(b"v" * 4096)
    time.sleep(1)  # the writes' own closes sent
    m0 = scrape(cluster.http[7:])
    for i in range(files):
        with open(workdir / f"k{i}", "rb") as f:
            assert f.read() == b"v" * 4096
    assert wait_until(lambda: value(scrape(cluster.http[7:]), "kvc_meta_requests_total",
                                    type="open") - value(m0, "kvc_meta_requests_total",
                                                         type="open") >= files)
    time.sleep(0.5)  # the last batch's linger
    m1 = scrape(cluster.http[7:])
    batches = value(m1, "kvc_meta_requests_total", type="close_many") - \
        value(m0, "kvc_meta_requests_total", type="close_many")
    assert 1 <= batches <= files // 2, batches


def test_meta_events_are_counted(cluster, workdir):
    """Another client's change reaches this kvc-fuse as an event."""
    (workdir / "seen").write_bytes(b"x")
    os.stat(workdir / "seen")  # this client now watches it
    before = value(scrape(cluster.fuse_metrics), "kvc_fuse_meta_events_total")
    proc, mount = second_mount(cluster)
    try:
        other = os.path.join(mount, workdir.name, "seen")
        with open(other, "wb") as f:
            f.write(b"changed elsewhere")
        os.unlink(other)
        assert wait_until(lambda: value(scrape(cluster.fuse_metrics),
                                        "kvc_fuse_meta_events_total") > before, timeout=10)
    finally:
        drop_second_mount(proc, mount)


def raw(address, payload, read=True):
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        try:
            s.sendall(payload)
        except OSError:
            return b""
        if not read:
            return b""
        chunks = []
        try:
            while True:
                got = s.recv(65536)
                if not got:
                    break
                chunks.append(got)
        except OSError:
            pass
        return b"".join(chunks)


def status_of(reply):
    m = re.match(rb"HTTP/1\.[01] (\d{3})", reply)
    return int(m.group(1)) if m else None


@pytest.mark.parametrize("which", ["storage", "fuse"])
def test_bad_requests_get_errors_and_the_daemon_stays_up(cluster, workdir, which):
    address = cluster.storage_metrics[0] if which == "storage" else cluster.fuse_metrics
    assert status_of(raw(address, b"GET /other HTTP/1.0\r\n\r\n")) == 404
    assert status_of(raw(address, b"GET /metricsx HTTP/1.0\r\n\r\n")) == 404
    assert status_of(raw(address, b"POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n")) == 405
    assert status_of(raw(address, b"DELETE /metrics HTTP/1.0\r\n\r\n")) == 405
    assert status_of(raw(address, b"POST /metrics HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello")) \
        in (405, 413)
    # Headers past the connection's memory: an error status or a closed connection.
    huge = b"GET /metrics HTTP/1.0\r\nX-Big: " + b"a" * (256 << 10) + b"\r\n\r\n"
    reply = raw(address, huge)
    assert reply == b"" or status_of(reply) >= 400, reply[:200]
    assert status_of(raw(address, b"\x00\xff garbage\r\n\r\n")) in (None, 400)
    # More idle connections than the listener takes at once, then closed.
    host, port = address.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=5) for _ in range(24)]
    for s in idle:
        s.close()
    assert wait_until(lambda: status_of(raw(address, b"GET /metrics HTTP/1.0\r\n\r\n")) == 200,
                      timeout=30)
    scrape(address)
    # The daemon still does its work.
    data = os.urandom(1 << 20)
    (workdir / "after").write_bytes(data)
    assert (workdir / "after").read_bytes() == data
    assert cluster.cli("status", check=False).returncode == 0


def test_status_lists_the_metrics_urls(cluster):
    out = cluster.cli("status").stdout
    assert f"http://{cluster.fuse_metrics}/metrics" in out
    for address in cluster.storage_metrics:
        assert f"http://{address}/metrics" in out
    assert f"{cluster.http}/metrics" in out
