"""kvc-meta's page pools over HTTP: the exact call sequences of vLLM's and
SGLang's hf3fs connectors (Python's standard library as the client), bad
input, and kill -9 under a write load."""
import json
import os
import re
import subprocess
import threading
import urllib.error
import urllib.request

import pytest

from conftest import BUILD, LIBKVC, chunk_files_of, wait_until


def post(cluster, path, body=None, raw=None):
    data = raw if raw is not None else json.dumps(body if body is not None else {}).encode()
    req = urllib.request.Request(cluster.http + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else None


def get(cluster, path):
    with urllib.request.urlopen(cluster.http + path, timeout=30) as resp:
        return resp.status, resp.read().decode()


def metric(cluster, name, **labels):
    _, text = get(cluster, "/metrics")
    want = name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(want + " "):
            return float(line.split()[-1])
    return None


def test_vllm_connector_sequence(cluster):
    """world_size = 2 in the cluster file: a key is complete after both ranks."""
    assert post(cluster, "/clear")[0] == 204
    assert post(cluster, "/rank/0/initialize", {"num_pages": 0, "role": "scheduler"})[0] == 200
    for rank in (0, 1):
        status, body = post(cluster, f"/rank/{rank}/initialize",
                            {"num_pages": 64, "role": "worker"})
        assert status == 200 and "message" in body
    keys = [[f"blk{i}", f"blk{i - 1}" if i else ""] for i in range(8)]
    pages = {}
    for rank in (0, 1):
        status, body = post(cluster, "/keys/batch_allocate", {"rank": rank, "keys": keys})
        assert status == 200 and body["rank"] == rank
        assert [k for k, _ in body["results"]] == [k for k, _ in keys]
        pages[rank] = dict(body["results"])
        assert all(p >= 0 for p in pages[rank].values())
        assert len(set(pages[rank].values())) == 8, "one page per key"
        status, _ = post(cluster, "/keys/confirm_write",
                         {"rank": rank, "confirmations": [[k, pages[rank][k]] for k, _ in keys],
                          "pages_to_release": []})
        assert status == 204
        exists = post(cluster, "/keys/batch_exists", {"keys": [k for k, _ in keys]})[1]["exists"]
        assert exists == [rank == 1] * 8, "complete only once both ranks confirmed"
    for rank in (0, 1):
        status, body = post(cluster, "/keys/get_locations",
                            {"rank": rank, "keys": ["blk3", "missing", "blk0"]})
        assert status == 200
        assert body["locations"] == [pages[rank]["blk3"], None, pages[rank]["blk0"]]
    # A complete key allocated again keeps its page and consumes nothing.
    free_before = metric(cluster, "kvc_pool_pages_free", namespace="vllm", rank="0")
    status, body = post(cluster, "/keys/batch_allocate", {"rank": 0, "keys": keys[:2]})
    assert dict(body["results"]) == {k: pages[0][k] for k, _ in keys[:2]}
    assert metric(cluster, "kvc_pool_pages_free", namespace="vllm", rank="0") == free_before
    # A failed write releases its page; confirmed pages are never released.
    _, body = post(cluster, "/keys/batch_allocate", {"rank": 0, "keys": [["failed", ""]]})
    failed_page = body["results"][0][1]
    assert post(cluster, "/keys/confirm_write",
                {"rank": 0, "confirmations": [],
                 "pages_to_release": [failed_page, pages[0]["blk0"]]})[0] == 204
    assert metric(cluster, "kvc_pool_pages_free", namespace="vllm", rank="0") == free_before
    assert post(cluster, "/keys/batch_exists", {"keys": ["blk0"]})[1]["exists"] == [True]
    assert post(cluster, "/clear")[0] == 204
    assert post(cluster, "/keys/batch_exists", {"keys": ["blk0"]})[1]["exists"] == [False]


def test_sglang_connector_sequence(cluster):
    for ns in ("kv", "mamba"):
        for rank in (0, 1):
            assert post(cluster, f"/{rank}/initialize",
                        {"num_pages": 16, "namespace": ns})[0] == 204
    keys = [[f"h{i}", ""] for i in range(4)]
    for rank in (0, 1):
        status, body = post(cluster, f"/{rank}/reserve_and_allocate_page_indices",
                            {"keys": keys, "namespace": "kv"})
        assert status == 200
        assert all(not already and page >= 0 for already, page in body["indices"])
        confirm = [[k, page] for (k, _), (_, page) in zip(keys, body["indices"])]
        assert post(cluster, f"/{rank}/confirm_write",
                    {"written_keys_to_confirm": confirm, "pages_to_release": [],
                     "namespace": "kv"})[0] == 204
    status, body = post(cluster, "/0/exists", {"keys": ["h0", "h9"], "namespace": "kv"})
    assert body["exists"] == [True, False]
    assert post(cluster, "/0/exists", {"keys": ["h0"], "namespace": "mamba"})[1]["exists"] == [False]
    # Asking again says "already written" and gives the same page.
    _, again = post(cluster, "/1/reserve_and_allocate_page_indices",
                    {"keys": keys[:1], "namespace": "kv"})
    _, where = post(cluster, "/1/get_page_indices", {"keys": ["h0", "nope"], "namespace": "kv"})
    assert again["indices"][0] == [True, where["indices"][0]]
    assert where["indices"][1] is None
    assert post(cluster, "/0/delete_keys", {"keys": ["h1"], "namespace": "kv"})[0] == 204
    assert post(cluster, "/0/exists", {"keys": ["h1"], "namespace": "kv"})[1]["exists"] == [False]
    assert post(cluster, "/0/clear", {"namespace": "kv"})[0] == 204
    assert post(cluster, "/0/exists", {"keys": ["h0"], "namespace": "kv"})[1]["exists"] == [False]


@pytest.mark.parametrize("path,body,status", [
    ("/keys/batch_allocate", b"{not json", 400),
    ("/keys/batch_allocate", b'{"keys": [["a", ""]]}', 400),        # no rank
    ("/keys/batch_allocate", b'{"rank": 0, "keys": "abc"}', 400),    # keys not a list
    ("/keys/confirm_write", b'{"rank": 0, "confirmations": [["a"]]}', 400),
    # releases that are not pages (found by fuzz_http: freed twice before)
    ("/keys/confirm_write", b'{"rank": 0, "pages_to_release": [["a", 0]]}', 400),
    ("/keys/batch_exists", b'[1, 2]', 400),                          # not an object
    ("/keys/get_locations", b'{"rank": 7, "keys": ["a"]}', 404),     # unknown rank
    ("/9/exists", b'{"keys": ["a"]}', 404),                          # SGLang unknown rank
    ("/0/exists", b'{"keys": ["a"], "namespace": "never"}', 404),    # unknown namespace
    ("/rank/0/initialize", b'{"num_pages": -3}', 400),
    ("/no/such/route", b'{}', 404),
])
def test_bad_requests_get_clear_errors(cluster, path, body, status):
    post(cluster, "/rank/0/initialize", {"num_pages": 64, "role": "worker"})
    got, reply = post(cluster, path, raw=body)
    assert got == status, reply
    assert reply and "detail" in reply
    assert get(cluster, "/health")[0] == 200


def test_huge_body_is_refused_with_413(cluster):
    keys = [[f"k{i:08d}" * 4, ""] for i in range(3000)]
    status, reply = post(cluster, "/keys/batch_allocate", {"rank": 0, "keys": keys})
    assert status == 413 and "detail" in reply
    assert get(cluster, "/health")[0] == 200


def test_kill9_under_write_load_loses_no_confirmed_key(cluster):
    for rank in (0, 1):
        post(cluster, f"/{rank}/initialize", {"num_pages": 4096, "namespace": "crash"})
    confirmed, stop = [], threading.Event()

    def writer(rank_keys):
        n = 0
        while not stop.is_set():
            batch = [[f"c{rank_keys}-{n + i}", ""] for i in range(8)]
            n += 8
            try:
                ok = True
                for rank in (0, 1):
                    status, body = post(cluster, f"/{rank}/reserve_and_allocate_page_indices",
                                        {"keys": batch, "namespace": "crash"})
                    if status != 200:
                        ok = False
                        break
                    confirm = [[k, p] for (k, _), (_, p) in zip(batch, body["indices"])]
                    status, _ = post(cluster, f"/{rank}/confirm_write",
                                     {"written_keys_to_confirm": confirm, "namespace": "crash"})
                    ok = ok and status == 204
                if ok:
                    confirmed.extend(k for k, _ in batch)
            except OSError:
                pass  # the server is down for a moment

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    assert wait_until(lambda: len(confirmed) >= 200, timeout=60)
    subprocess.run(["kill", "-KILL", str(cluster.pid("meta"))], check=True)
    stop.set()
    for t in threads:
        t.join()
    # Offline check of the page accounting of what kill -9 left.
    out = subprocess.run([str(BUILD / "kvc-meta"), "--config", str(cluster.conf), "--fsck"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    cluster.restart("meta", "KILL")
    assert wait_until(lambda: get(cluster, "/health")[0] == 200)
    for i in range(0, len(confirmed), 500):
        chunk = confirmed[i:i + 500]
        _, body = post(cluster, "/0/exists", {"keys": chunk, "namespace": "crash"})
        assert all(body["exists"]), "a confirmed key was lost"
    for rank in (0, 1):
        free = metric(cluster, "kvc_pool_pages_free", namespace="crash", rank=str(rank))
        used = metric(cluster, "kvc_pool_pages_used", namespace="crash", rank=str(rank))
        assert free + used == 4096
        assert used >= len(confirmed)


def admin(cluster, *args, check=True):
    out = cluster.admin(*args, check=False)
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_admin_over_the_binary_protocol(cluster):
    for rank in (0, 1):
        post(cluster, f"/{rank}/initialize", {"num_pages": 32, "namespace": "adm"})
    for rank in (0, 1):
        _, body = post(cluster, f"/{rank}/reserve_and_allocate_page_indices",
                       {"keys": [["x", ""], ["y", ""]], "namespace": "adm"})
        confirm = [[k, p] for k, (_, p) in zip(["x", "y"], body["indices"])]
        post(cluster, f"/{rank}/confirm_write",
             {"written_keys_to_confirm": confirm, "namespace": "adm"})
    listed = json.loads(admin(cluster, "--json", "pool", "list").stdout)
    mine = [p for p in listed if p["namespace"] == "adm"]
    assert sorted(p["rank"] for p in mine) == [0, 1]
    assert all(p["pages"] == 32 and p["free"] == 30 for p in mine)
    show = json.loads(admin(cluster, "--json", "pool", "show", "adm", "1").stdout)
    assert show["world_size"] == 2 and show["complete"] == 2 and show["free"] == 30
    assert "complete" in admin(cluster, "key", "stat", "adm", "x").stdout
    listed_keys = json.loads(admin(cluster, "--json", "key", "ls", "adm").stdout)
    assert [k["key"] for k in listed_keys] == ["x", "y"]
    assert all(k["complete"] and k["confirmed"] == 2 for k in listed_keys)
    assert json.loads(admin(cluster, "--json", "key", "delete", "adm", "x", "nope").stdout) == \
        {"deleted": 1}
    assert "absent" in admin(cluster, "key", "stat", "adm", "x").stdout
    assert admin(cluster, "fsck").stdout.startswith("page pools: 0 problem")
    admin(cluster, "clear", "adm")
    assert json.loads(admin(cluster, "--json", "pool", "show", "adm", "0").stdout)["keys"] == 0
    missing = admin(cluster, "pool", "show", "never-made", "0", check=False)
    assert missing.returncode == 1 and "no page pool" in missing.stderr
    status = json.loads(admin(cluster, "--json", "status").stdout)
    assert any(p["namespace"] == "adm" for p in status["pools"])


def test_bad_pool_frames_leave_kvc_meta_serving(cluster):
    import struct
    import kvcwire
    sock, status = kvcwire.connect(cluster.meta_address)
    assert status == 0
    head = struct.pack("<IIIIIIQ", 0, 3, 3, 0, 0, 0, 0)  # 3 keys announced
    cases = [
        head + b"adm" + struct.pack("<I", 5) + b"ab",               # key shorter than said
        head + b"adm" + struct.pack("<I", 100000) + b"x" * 8,        # key longer than the limit
        struct.pack("<IIIIIIQ", 0, 100000, 3, 0, 0, 0, 0) + b"adm",  # too many keys
        struct.pack("<IIIIIIQ", 0, 0, 999, 0, 0, 0, 0) + b"adm",     # namespace past the body
        b"\x01\x02",                                                  # shorter than the header
    ]
    for body in cases:
        for msg in (34, 35, 36, 37, 39):  # allocate confirm exists locations delete
            sock.sendall(kvcwire.frame(msg, body))
            _, status, _, _ = kvcwire.recv_frame(sock)
            assert status == -22, (msg, body)
    # RELEASE_LEASES (38) takes an i64 lease number a key after its keys:
    # one short, one over, or a number where a key should be
    one = struct.pack("<IIIIIIQ", 0, 1, 3, 0, 0, 0, 0) + b"adm" + struct.pack("<I", 1) + b"x"
    for body in (one, one + b"\0" * 7, one + b"\0" * 9, one[:-5] + struct.pack("<q", 7)):
        sock.sendall(kvcwire.frame(38, body))
        _, status, _, _ = kvcwire.recv_frame(sock)
        assert status == -22, body
    sock.sendall(kvcwire.frame(38, one + struct.pack("<q", 12345)))
    _, status, reply, _ = kvcwire.recv_frame(sock)
    assert status in (0, -2) and (status or reply == b"\0"), "not held: nothing leased"
    sock.close()
    assert kvcwire.ping(cluster.meta_address)
    assert get(cluster, "/health")[0] == 200


def test_native_api_through_libkvc(cluster):
    """include/kvc/meta.h from Python (ctypes over libkvc.so): allocate,
    confirm, exists, locations with a lease, lease release, world size."""
    import ctypes
    lib = ctypes.CDLL(str(LIBKVC))

    class Key(ctypes.Structure):
        _fields_ = [("bytes", ctypes.c_char_p), ("length", ctypes.c_uint32)]

    handle = ctypes.c_void_p()
    # The pool secret, as a connector holds it (the file's text).
    assert lib.kvc_meta_open(ctypes.byref(handle), cluster.meta_address.encode(),
                             cluster.pool_secret_file.read_bytes()) == 0
    ns = b"native"
    assert lib.kvc_meta_pool_init(handle, ns, 0, 2, 2) == 0
    assert lib.kvc_meta_pool_init(handle, ns, 1, 2, 2) == 0
    names = [b"n0", b"n1"]
    keys = (Key * 2)(*[Key(n, len(n)) for n in names])
    pages = (ctypes.c_int64 * 2)()
    already = (ctypes.c_bool * 2)()
    statuses = (ctypes.c_int * 2)()
    for rank in (0, 1):
        assert lib.kvc_meta_allocate(handle, ns, rank, keys, 2, pages, already) == 0
        assert sorted(pages) == [0, 1] and not any(already)
        assert lib.kvc_meta_confirm(handle, ns, rank, keys, pages, 2, None, 0, statuses) == 0
        assert list(statuses) == [0, 0]
    found = (ctypes.c_bool * 2)()
    assert lib.kvc_meta_exists(handle, ns, keys, 2, found) == 0 and all(found)
    assert lib.kvc_meta_pool_set_world(handle, ns, 3) == -16, "no world change under keys"
    assert lib.kvc_meta_pool_set_world(handle, ns, 2) == 0
    # Rank 0's and rank 1's readers lease n0 and n1: a full pool then
    # cannot evict either, until both readers are done with them.
    leases0 = (ctypes.c_uint32 * 2)()
    leases1 = (ctypes.c_uint32 * 2)()
    held = (ctypes.c_bool * 2)()
    assert lib.kvc_meta_lease_locations(handle, ns, 0, keys, 2, 60000, pages, leases0) == 0
    assert all(p >= 0 for p in pages)
    assert lib.kvc_meta_lease_locations(handle, ns, 1, keys, 2, 60000, pages, leases1) == 0
    assert all(leases0) and list(leases0) == list(leases1), "one lease a key, shared"
    extra = (Key * 1)(Key(b"n2", 2))
    one = (ctypes.c_int64 * 1)()
    assert lib.kvc_meta_allocate(handle, ns, 0, extra, 1, one, None) == 0
    assert one[0] == -1, "leased keys are never evicted"
    assert lib.kvc_meta_leases_release(handle, ns, keys, leases0, 2, held) == 2
    assert all(held), "rank 0's reads held their pages throughout"
    assert lib.kvc_meta_allocate(handle, ns, 0, extra, 1, one, None) == 0
    assert one[0] == -1, "rank 1 still reads them"
    assert lib.kvc_meta_leases_release(handle, ns, keys, leases1, 2, held) == 2
    assert lib.kvc_meta_allocate(handle, ns, 0, extra, 1, one, None) == 0
    assert one[0] >= 0, "after the last release the LRU key goes"
    assert lib.kvc_meta_leases_release(handle, ns, keys, leases1, 2, held) == 0
    assert not any(held), "released already (one key evicted since)"
    # a lease number that was never given
    bogus = (ctypes.c_uint32 * 2)(0, 0xFFFFFFFF)
    assert lib.kvc_meta_leases_release(handle, ns, keys, bogus, 2, held) == 0
    assert not any(held)
    assert lib.kvc_meta_leases_release(handle, ns, keys, None, 2, held) == -22  # EINVAL
    # a count past the batch limit is refused before anything is touched
    # (count * 8 wrapped: a small buffer, then 2^29 entries copied into it)
    for call in (lambda n: lib.kvc_meta_leases_release(handle, ns, keys, leases0, n, held),
                 lambda n: lib.kvc_meta_lease_locations(handle, ns, 0, keys, n, 1, pages,
                                                        leases0),
                 lambda n: lib.kvc_meta_release_leases(handle, ns, keys, n)):
        assert call(1 << 29) == -22 and call(4097) == -22
    # the call of before lease numbers releases nothing: leases end by time
    n2 = one[0]
    assert lib.kvc_meta_allocate(handle, ns, 1, extra, 1, one, None) == 0 and one[0] >= 0
    assert lib.kvc_meta_confirm(handle, ns, 1, extra, one, 1, None, 0, statuses) == 0
    one[0] = n2
    assert lib.kvc_meta_confirm(handle, ns, 0, extra, one, 1, None, 0, statuses) == 0
    assert lib.kvc_meta_lease_locations(handle, ns, 0, extra, 1, 60000, one, leases0) == 0
    assert one[0] == n2 and leases0[0]
    assert lib.kvc_meta_release_leases(handle, ns, extra, 1) == 0
    assert lib.kvc_meta_leases_release(handle, ns, extra, leases0, 1, held) == 1 and held[0]
    assert lib.kvc_meta_allocate(handle, b"nowhere", 0, extra, 1, one, None) == -2  # ENOENT
    lib.kvc_meta_close(handle)
    # The cluster file's pool secret, read by libkvc; a wrong secret or none
    # gets EACCES from the first call.
    assert lib.kvc_meta_open_config(ctypes.byref(handle), str(cluster.conf).encode()) == 0
    assert lib.kvc_meta_pool_set_world(handle, ns, 2) == 0
    lib.kvc_meta_close(handle)
    for wrong in (b"f" * 64, None):
        assert lib.kvc_meta_open(ctypes.byref(handle), cluster.meta_address.encode(), wrong) == 0
        assert lib.kvc_meta_pool_set_world(handle, ns, 2) == -13
        lib.kvc_meta_close(handle)
    assert lib.kvc_meta_open(ctypes.byref(handle), cluster.meta_address.encode(), b"short") \
        == -22


def test_bound_pool_punches_freed_pages_out_of_its_file(cluster, workdir):
    """A pool bound to its file (kvc-admin pool bind): pages freed by
    delete are punched out of the file by kvc-meta (zeros, chunks gone from
    the storage servers); pages still held keep their bytes."""
    page = 1 << 20  # one chunk per page
    pool_file = workdir / "rank-0"
    data = os.urandom(8 * page)
    pool_file.write_bytes(data)
    in_namespace = "/" + str(pool_file.relative_to(cluster.mount))
    for rank in (0, 1):
        assert post(cluster, f"/{rank}/initialize",
                    {"num_pages": 8, "namespace": "bound"})[0] == 204
    out = admin(cluster, "pool", "bind", "bound", "0", in_namespace + "-nope", "1M", check=False)
    assert out.returncode != 0 and "no file" in out.stderr
    out = admin(cluster, "pool", "bind", "bound", "0", "/" + str(workdir.relative_to(cluster.mount)),
                "1M", check=False)
    assert out.returncode != 0 and "directory" in out.stderr.lower()
    admin(cluster, "pool", "bind", "bound", "0", in_namespace, "1M")
    shown = json.loads(admin(cluster, "--json", "pool", "show", "bound", "0").stdout)
    assert shown["file"] == in_namespace and shown["page_size"] == page

    keys = [[f"p{i}", ""] for i in range(8)]
    pages = {}
    for rank in (0, 1):
        _, body = post(cluster, f"/{rank}/reserve_and_allocate_page_indices",
                       {"keys": keys, "namespace": "bound"})
        pages[rank] = [p for _, p in body["indices"]]
        assert post(cluster, f"/{rank}/confirm_write",
                    {"written_keys_to_confirm": [[k, p] for (k, _), p in zip(keys, pages[rank])],
                     "pages_to_release": [], "namespace": "bound"})[0] == 204

    ino = os.stat(pool_file).st_ino
    def chunks():
        return len(chunk_files_of(cluster, ino))
    before = chunks()
    assert post(cluster, "/0/delete_keys", {"keys": ["p1", "p4", "p6"],
                                            "namespace": "bound"})[0] == 204
    assert wait_until(lambda: chunks() <= before - 3, timeout=30), "3 pages' chunks punched"
    assert wait_until(lambda: json.loads(admin(cluster, "--json", "pool", "show", "bound",
                                               "0").stdout)["punch_pending"] == 0, timeout=30)
    freed = {pages[0][i] for i in (1, 4, 6)}
    back = pool_file.read_bytes()
    assert len(back) == 8 * page
    for p in range(8):
        got = back[p * page:(p + 1) * page]
        assert got == (bytes(page) if p in freed else data[p * page:(p + 1) * page]), p
    # The punched pages are free for new keys; accounting holds.
    _, body = post(cluster, "/0/reserve_and_allocate_page_indices",
                   {"keys": [["n1", ""], ["n2", ""], ["n3", ""]], "namespace": "bound"})
    assert {p for _, p in body["indices"]} == freed
    assert "0 problem" in admin(cluster, "fsck").stdout
    admin(cluster, "pool", "unbind", "bound", "0")
    assert "not bound" in admin(cluster, "pool", "show", "bound", "0").stdout


def test_hostile_names_are_escaped_in_json_and_metrics(cluster, workdir):
    """Namespaces, keys and file names are bytes a client chose: kvc-admin's
    --json output and the Prometheus labels stay well-formed with quotes,
    backslashes and newlines in them."""
    ns = 'we"ird\\ns\n'
    status, _ = post(cluster, "/0/initialize", {"namespace": ns, "num_pages": 4})
    assert status in (200, 204)
    listed = json.loads(admin(cluster, "--json", "pool", "list").stdout)
    assert ns in [e["namespace"] for e in listed]
    shown = json.loads(admin(cluster, "--json", "pool", "show", ns).stdout)
    assert shown["namespace"] == ns
    (workdir / 'a"b\\c').write_bytes(b"x")
    out = admin(cluster, "--json", "ls", "/" + workdir.name).stdout
    assert [json.loads(line)["name"] for line in out.splitlines()] == ['a"b\\c']
    text = get(cluster, "/metrics")[1]
    escaped = 'we\\"ird\\\\ns\\n'
    assert f'kvc_pool_pages{{namespace="{escaped}",rank="0"}} 4' in text
    for line in text.splitlines():  # every label value closes on its line
        assert re.sub(r'\\.', "", line).count('"') % 2 == 0, line


def test_pool_frames_must_end_where_their_parts_do(cluster):
    """The pool table's body rule: kvc_msg_pool, the namespace, the keys,
    then exactly what the message takes (CONFIRM's pages, BIND's page
    size). A byte more or less is EINVAL before anything runs, and the
    connection goes on."""
    import struct
    import kvcwire

    def body(count=0, value=0, ns=b"framecheck", keys=(), tail=b""):
        head = struct.pack("<IIIIIIQ", 0, count, len(ns), value, 0, 0, 0)
        return head + ns + b"".join(struct.pack("<I", len(k)) + k for k in keys) + tail

    sock, status = kvcwire.connect(cluster.meta_address)
    assert status == 0
    try:
        def ask(msg_type, payload):
            sock.sendall(kvcwire.frame(msg_type, payload))
            return kvcwire.recv_frame(sock)[1]
        assert ask(kvcwire.POOL_INIT, body(value=8)) == 0
        assert ask(kvcwire.POOL_STATS, body() + b"\0") == -22
        assert ask(kvcwire.POOL_STATS, body()) == 0
        confirm = 35
        one_page = struct.pack("<q", 0)
        assert ask(confirm, body(count=1, keys=[b"k"], tail=one_page + b"\0")) == -22
        assert ask(confirm, body(count=1, keys=[b"k"], tail=one_page[:-1])) == -22
        assert ask(confirm, body(count=1, value=1, keys=[b"k"], tail=one_page)) == -22
        assert ask(100, b"\0" * 8) == -95  # no such message
        assert ask(kvcwire.POOL_STATS, body()) == 0
    finally:
        sock.close()
