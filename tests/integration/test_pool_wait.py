"""Waiting for complete keys (issue 11, the decode side of vLLM's NIXL push
pattern): a decoder waits until every rank confirmed its keys, over HTTP
(POST /pools/{ns}/wait) and over the binary protocol (POOL_WAIT, raw
frames and libkvc's kvc_meta_wait). The cluster's world size is 2, so a
key is complete once ranks 0 and 1 confirmed it.

No assertion depends on timing: the waits that must wake have minutes to
spare; "still pending" is checked after a pause, which a wrong server
could only pass by luck, never fail by noise."""
import ctypes
import json
import struct
import threading
import time
import urllib.error
import urllib.request

import kvcwire
from conftest import LIBKVC

POOL_WAIT, POOL_EXISTS = 47, 36
LONG = 120000  # ms: a wait that must be woken, not timed out


def post(cluster, path, body=None, raw=None, timeout=30):
    data = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
    req = urllib.request.Request(cluster.http + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else None


def setup_namespace(cluster, ns, pages=64):
    for rank in (0, 1):
        assert post(cluster, f"/{rank}/initialize", {"num_pages": pages, "namespace": ns})[0] \
            == 204
        assert post(cluster, f"/{rank}/clear", {"namespace": ns})[0] == 204


def write(cluster, ns, rank, keys):
    """Allocate and confirm keys on rank (SGLang's routes)."""
    status, body = post(cluster, f"/{rank}/reserve_and_allocate_page_indices",
                        {"namespace": ns, "keys": [[k, ""] for k in keys]})
    assert status == 200
    pages = [page for _, page in body["indices"]]
    assert all(p >= 0 for p in pages)
    assert post(cluster, f"/{rank}/confirm_write",
                {"namespace": ns, "written_keys_to_confirm": [[k, p] for k, p in zip(keys, pages)],
                 "pages_to_release": []})[0] == 204


class Waiter(threading.Thread):
    """Runs fn() on a thread; result holds what it returned."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn = fn
        self.result = None

    def run(self):
        self.result = self.fn()


def http_wait(cluster, ns, keys, timeout_ms):
    return post(cluster, f"/pools/{ns}/wait", {"keys": keys, "timeout_ms": timeout_ms},
                timeout=timeout_ms / 1000 + 30)


def test_http_decoder_waits_until_the_last_rank_confirms(cluster):
    ns = "wait-http"
    setup_namespace(cluster, ns)
    keys = ["blk0", "blk1", "blk2"]
    decoder = Waiter(lambda: http_wait(cluster, ns, keys, LONG))
    decoder.start()
    write(cluster, ns, 0, keys)
    decoder.join(0.5)
    assert decoder.is_alive(), "answered before rank 1 confirmed"
    write(cluster, ns, 1, keys[:2])
    decoder.join(0.3)
    assert decoder.is_alive(), "answered with blk2 incomplete"
    start = time.monotonic()
    write(cluster, ns, 1, keys[2:])
    decoder.join(60)
    assert not decoder.is_alive()
    assert decoder.result == (200, {"complete": [True, True, True], "timed_out": False})
    assert time.monotonic() - start < 60, "woken by the confirm, not by the timeout"
    # Complete keys answer at once.
    assert http_wait(cluster, ns, keys, 0) == \
        (200, {"complete": [True, True, True], "timed_out": False})


def test_http_wait_timeout_names_the_incomplete_keys(cluster):
    ns = "wait-timeout"
    setup_namespace(cluster, ns)
    write(cluster, ns, 0, ["a", "b"])
    write(cluster, ns, 1, ["a"])
    status, body = http_wait(cluster, ns, ["a", "b", "never"], 200)
    assert status == 200
    assert body == {"complete": [True, False, False], "timed_out": True}


def test_http_requests_are_served_while_waits_are_pending(cluster):
    """More waits than libmicrohttpd has threads (http_threads = 4): other
    requests still answer, because a wait holds no server thread."""
    ns = "wait-many"
    setup_namespace(cluster, ns)
    waiters = [Waiter(lambda i=i: http_wait(cluster, ns, [f"k{i}"], LONG)) for i in range(12)]
    for w in waiters:
        w.start()
    time.sleep(0.5)  # let them reach the server (not needed for correctness)
    assert all(w.is_alive() for w in waiters)
    with urllib.request.urlopen(cluster.http + "/health", timeout=30) as resp:
        assert resp.status == 200
    assert post(cluster, "/0/exists", {"namespace": ns, "keys": ["k0"]}) == \
        (200, {"exists": [False]})
    for rank in (0, 1):
        write(cluster, ns, rank, [f"k{i}" for i in range(12)])
    for w in waiters:
        w.join(60)
        assert w.result == (200, {"complete": [True], "timed_out": False})


def test_http_wait_bad_input_gets_clear_errors(cluster):
    ns = "wait-bad"
    setup_namespace(cluster, ns)
    path = f"/pools/{ns}/wait"
    too_many = {"keys": [f"k{i}" for i in range(4097)], "timeout_ms": 1}
    for body, raw in [(too_many, None), ({"keys": ["a"]}, None),
                      ({"keys": ["a"], "timeout_ms": -1}, None),
                      ({"keys": ["a"], "timeout_ms": 600001}, None),
                      ({"keys": ["a"], "timeout_ms": "5"}, None),
                      ({"keys": "a", "timeout_ms": 5}, None),
                      ({"keys": [""], "timeout_ms": 5}, None),
                      ({"keys": ["x" * 401], "timeout_ms": 5}, None),
                      (None, b'{"keys": ['), (None, b'[1, 2]')]:
        status, answer = post(cluster, path, body, raw=raw)
        assert status == 400 and answer["detail"], (body, raw, answer)
    status, answer = post(cluster, "/pools/never-made/wait", {"keys": ["a"], "timeout_ms": 5})
    assert status == 404 and "never-made" in answer["detail"]
    assert post(cluster, "/pools/" + "n" * 65 + "/wait", {"keys": [], "timeout_ms": 5})[0] == 404
    with urllib.request.urlopen(cluster.http + "/health", timeout=30) as resp:
        assert resp.status == 200


def test_http_wait_ends_when_its_namespace_is_cleared(cluster):
    ns = "wait-clear"
    setup_namespace(cluster, ns)
    decoder = Waiter(lambda: http_wait(cluster, ns, ["gone"], LONG))
    decoder.start()
    write(cluster, ns, 0, ["gone"])
    # A clear before the wait reached kvc-meta has nothing to end: repeat.
    deadline = time.monotonic() + 60
    while decoder.is_alive() and time.monotonic() < deadline:
        assert post(cluster, "/0/clear", {"namespace": ns})[0] == 204
        decoder.join(0.2)
    status, body = decoder.result
    assert status == 409 and "cleared" in body["detail"]


def wait_frame(ns, keys, timeout_ms):
    head = struct.pack("<IIIIIIQ", 0, len(keys), len(ns), timeout_ms, 0, 0, 0)
    return head + ns + b"".join(struct.pack("<I", len(k)) + k for k in keys)


def test_binary_decoder_waits_until_the_last_rank_confirms(cluster):
    """POOL_WAIT as raw frames: EXISTS' reply (a flag per key), sent when
    the last rank confirms; at the timeout the same shape names the
    missing keys; bad frames are EINVAL and the connection goes on."""
    ns = "wait-bin"
    setup_namespace(cluster, ns)
    sock, status = kvcwire.connect(cluster.meta_address)
    assert status == 0

    def ask(payload):
        sock.sendall(kvcwire.frame(POOL_WAIT, payload))
        _, status, body, _ = kvcwire.recv_frame(sock)
        return status, body
    try:
        decoder = Waiter(lambda: ask(wait_frame(ns.encode(), [b"b0", b"b1"], LONG)))
        decoder.start()
        write(cluster, ns, 0, ["b0", "b1"])
        write(cluster, ns, 1, ["b0"])
        decoder.join(0.5)
        assert decoder.is_alive(), "answered with b1 incomplete"
        write(cluster, ns, 1, ["b1"])
        decoder.join(60)
        assert decoder.result == (0, b"\x01\x01")
        assert ask(wait_frame(ns.encode(), [b"b1", b"none", b"b0"], 100)) == (0, b"\x01\x00\x01")
        assert ask(wait_frame(ns.encode(), [b"b0"], 600001))[0] == -22  # over the cap
        assert ask(wait_frame(ns.encode(), [b"b0"], 0)[:-1])[0] == -22  # truncated key
        assert ask(wait_frame(b"nowhere", [b"b0"], 0))[0] == -2         # ENOENT
        assert ask(wait_frame(ns.encode(), [b"b0"], 0)) == (0, b"\x01")
    finally:
        sock.close()
    # The pool secret opens POOL_WAIT, as the other pool messages.
    sock, status = kvcwire.connect(cluster.meta_address, secret=cluster.pool_secret(),
                                   role=kvcwire.ROLE_POOL)
    assert status == 0
    sock.sendall(kvcwire.frame(POOL_WAIT, wait_frame(ns.encode(), [b"b0"], 0)))
    assert kvcwire.recv_frame(sock)[1:3] == (0, b"\x01")
    sock.close()


def test_binary_wait_of_a_peer_that_hangs_up_ends(cluster):
    """A decoder that goes away mid-wait frees its wait (no thread held
    for the timeout): the waits' limit is never reached by leavers."""
    ns = "wait-hangup"
    setup_namespace(cluster, ns)
    for _ in range(300):  # more than the 256 waits kvc-meta allows at once
        sock, status = kvcwire.connect(cluster.meta_address)
        assert status == 0
        sock.sendall(kvcwire.frame(POOL_WAIT, wait_frame(ns.encode(), [b"x"], LONG)))
        sock.close()
    # Some hangups may still be on their way: a refused wait (EBUSY) is
    # retried; every leaver's wait ends, so one succeeds.
    deadline = time.monotonic() + 60
    while True:
        sock, _ = kvcwire.connect(cluster.meta_address)
        sock.sendall(kvcwire.frame(POOL_WAIT, wait_frame(ns.encode(), [b"x"], 0)))
        status = kvcwire.recv_frame(sock)[1]
        sock.close()
        if status != -16 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert status == 0


def one_flag():
    return (ctypes.c_bool * 1)()


def test_libkvc_wait(cluster):
    """kvc_meta_wait: the count of complete keys (all of them once the last
    rank confirms; fewer at the timeout, with the flags), -ECANCELED after
    a clear, -EINVAL past the limits. Its connection waits past the
    handle's 10 s I/O bound when the wait's timeout is longer."""
    lib = ctypes.CDLL(str(LIBKVC))

    class Key(ctypes.Structure):
        _fields_ = [("bytes", ctypes.c_char_p), ("length", ctypes.c_uint32)]

    ns = "wait-lib"
    setup_namespace(cluster, ns)
    handle = ctypes.c_void_p()
    assert lib.kvc_meta_open(ctypes.byref(handle), cluster.meta_address.encode(),
                             cluster.pool_secret_file.read_bytes()) == 0
    names = [b"L0", b"L1"]
    keys = (Key * 2)(*[Key(n, len(n)) for n in names])
    complete = (ctypes.c_bool * 2)()
    try:
        assert lib.kvc_meta_wait(handle, ns.encode(), keys, 2, 50, complete) == 0
        assert list(complete) == [False, False]
        decoder = Waiter(lambda: lib.kvc_meta_wait(handle, ns.encode(), keys, 2, LONG,
                                                   complete))
        decoder.start()
        write(cluster, ns, 0, ["L0", "L1"])
        write(cluster, ns, 1, ["L0"])
        decoder.join(0.5)
        assert decoder.is_alive()
        write(cluster, ns, 1, ["L1"])
        decoder.join(60)
        assert decoder.result == 2 and list(complete) == [True, True]
        assert lib.kvc_meta_wait(handle, ns.encode(), keys, 2, 600001, complete) == -22
        missing = (Key * 1)(Key(b"L8", 2))
        assert lib.kvc_meta_wait(handle, ns.encode(), missing, 1, 11000, one_flag()) == 0, \
            "a timeout past the handle's I/O bound is an answer, not a broken connection"
        assert lib.kvc_meta_wait(handle, b"nowhere", keys, 2, 0, complete) == -2
        # Cleared during the wait: -ECANCELED.
        other = (Key * 1)(Key(b"L9", 2))
        one = (ctypes.c_bool * 1)()
        decoder = Waiter(lambda: lib.kvc_meta_wait(handle, ns.encode(), other, 1, LONG, one))
        decoder.start()
        deadline = time.monotonic() + 60
        while decoder.is_alive() and time.monotonic() < deadline:
            assert post(cluster, "/0/clear", {"namespace": ns})[0] == 204
            decoder.join(0.2)
        assert decoder.result == -125  # ECANCELED
    finally:
        lib.kvc_meta_close(handle)
