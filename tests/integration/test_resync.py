"""Resync (src/storage/resync.h): a target catching up with another member
of its chain, started with `kvc-admin resync` (CHUNK_RESYNC) while the
cluster serves. Five storage servers of three targets, three replicas:
five chains. Checked: a wiped target (a new empty disk) ends with the
source's chunks exactly (CHUNK_LIST: inode, chunk, length, crc) and serves
every byte right alone; a target with stale, extra and missing chunks is
repaired; a resync under a writer overwriting files of its chain ends equal
to the source; bad requests get clear errors, a source that is down fails
the resync cleanly and the target stays usable."""
import json
import os
import random
import shutil
import signal
import struct
import threading
import urllib.request

import pytest

import kvcwire
from conftest import CHUNK, PORT_BASE, _drop_caches, wait_until, chained_cluster
from chain_helpers import (CHUNK_LIST, call, chain_table, check_files, listing,
                           server_of_target, sock_for, target_dir, write_files)

SERVERS, TARGETS, REPLICAS = 5, 3, 3
CHUNK_PUNCH, CHUNK_RESYNC, CHUNK_RESYNC_STATUS = 71, 73, 74
SIZES = [1, 4096, 65536, 65537, 300000, CHUNK + 7, 3 * CHUNK + 5]
ENXIO, EINVAL, ESTALE, EBUSY, EAGAIN = -6, -22, -116, -16, -11
FORWARDED = 1


@pytest.fixture(scope="module")
def rc():
    with chained_cluster("resync", PORT_BASE + 700, PORT_BASE + 790, SERVERS, REPLICAS,
                         TARGETS) as c:
        yield c


def resync(c, target, source, check=True):
    out = c.admin("--json", "resync", "--target", str(target), "--from", str(source),
                  check=False)
    if check:
        assert out.returncode == 0, out.stderr + out.stdout
        result = json.loads(out.stdout)
        assert result["state"] == "done"
        return result
    return out


def wipe(c, target):
    """Stop target's server, remove the target's directory (a new, empty
    disk) and start the server again: it makes an empty target."""
    name = server_of_target(target)
    pid = c.pid(name)
    os.kill(pid, signal.SIGKILL)
    assert wait_until(lambda: not os.path.exists(f"/proc/{pid}") or
                      open(f"/proc/{pid}/stat").read().split()[2] == "Z", timeout=10)
    shutil.rmtree(target_dir(c, target))
    c.restart(name)
    assert target_dir(c, target).is_dir()
    assert listing(c, target) == {}


def busiest_chain(c, exclude=()):
    best = None
    for ch in chain_table(c).values():
        if ch["id"] in exclude:
            continue
        n = len(listing(c, ch["targets"][0]))
        if best is None or n > best[0]:
            best = (n, ch)
    return best[1]


def metric(c, server_index, name, target):
    text = urllib.request.urlopen(f"http://{c.storage_metrics[server_index]}/metrics",
                                  timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{target="{target}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"{name} for target {target} not in the metrics")


def test_a_wiped_target_catches_up_and_serves_alone(rc):
    d = rc.mount / "wiped"
    d.mkdir()
    files = write_files(d, 40, seed=11, sizes=SIZES)
    chain = busiest_chain(rc)
    members = chain["targets"]
    t, p = members[1], members[0]
    want = listing(rc, p)
    assert len(want) > 5
    assert listing(rc, members[2]) == want
    wipe(rc, t)
    result = resync(rc, t, p)
    assert listing(rc, t) == want
    assert result["copied"] == len(want) and result["dropped"] == 0
    assert result["bytes"] == sum(length for length, _ in want.values())
    assert result["chain"] == chain["id"] and result["source"] == p
    # the summary a person reads, and the status of the last one
    text = rc.admin("resync", "--target", str(t), "--status").stdout
    assert f"resync of target {t} from target {p}" in text and "done" in text
    assert metric(rc, t // TARGETS, "kvc_storage_resync_chunks_copied_total", t) >= len(want)
    assert metric(rc, t // TARGETS, "kvc_storage_resync_running", t) == 0
    # t alone serves its chain: every byte of every file must come back
    others = [server_of_target(m) for m in members if m != t]
    for name in others:
        os.kill(rc.pid(name), signal.SIGKILL)
    try:
        check_files(files)
    finally:
        for name in others:
            rc.restart(name)
    # an equal target: a resync compares and copies nothing
    again = resync(rc, t, members[2])
    assert again["copied"] == 0 and again["dropped"] == 0
    assert again["compared"] == len(want)


def test_stale_extra_and_missing_chunks_are_repaired(rc):
    d = rc.mount / "stale"
    d.mkdir()
    write_files(d, 30, seed=12, sizes=[5000, 200000, CHUNK, 2 * CHUNK + 3])
    chain = busiest_chain(rc)
    head, tail = chain["targets"][0], chain["targets"][-1]
    want = listing(rc, head)
    keys = sorted(want)
    assert len(keys) >= 3
    (inode_a, chunk_a), (inode_b, chunk_b) = keys[0], keys[-1]
    with sock_for(rc, tail) as sock:
        # a chunk of the tail alone gets other bytes (a write that reached
        # only it), another one it never had, and one goes missing
        st, _ = call(sock, kvcwire.CHUNK_WRITE,
                     kvcwire.chunk_write(inode_a, tail, chunk_a, CHUNK, 10, chain["id"],
                                         chain["version"], FORWARDED), b"stale bytes")
        assert st == 0
        st, _ = call(sock, kvcwire.CHUNK_WRITE,
                     kvcwire.chunk_write(0x7FFF1234, tail, 3, CHUNK, 0, chain["id"],
                                         chain["version"], FORWARDED), b"x" * 70000)
        assert st == 0
        st, _ = call(sock, CHUNK_PUNCH, struct.pack("<QIIIIII", inode_b, tail, chunk_b, 1,
                                                    chain["id"], chain["version"], FORWARDED))
        assert st == 0
    stale = listing(rc, tail)
    assert stale != want
    assert (0x7FFF1234, 3) in stale and (inode_b, chunk_b) not in stale
    assert stale[(inode_a, chunk_a)] != want[(inode_a, chunk_a)]
    result = resync(rc, tail, head)
    assert listing(rc, tail) == want
    assert result["copied"] == 2 and result["dropped"] == 1


def test_resync_under_a_writer_ends_equal(rc):
    d = rc.mount / "busy"
    d.mkdir()
    files = write_files(d, 24, seed=13, sizes=[3 * CHUNK + 5, 2 * CHUNK, 100000])
    chain = busiest_chain(rc)
    members = chain["targets"]
    t, p = members[-1], members[0]  # the tail: writes hold chunks there only while syncing
    wipe(rc, t)
    stop = threading.Event()
    errors, writes = [], [0]
    sizes = {path: path.stat().st_size for path in files}

    def writer():
        rng = random.Random(14)
        paths = sorted(sizes)
        while not stop.is_set():
            path = rng.choice(paths)
            size = sizes[path]
            offset = rng.randrange(size)
            length = min(size - offset, rng.randrange(1, 2 * CHUNK))
            try:
                with open(path, "r+b") as f:
                    f.seek(offset)
                    f.write(rng.randbytes(length))
                    os.fsync(f.fileno())
                writes[0] += 1
            except OSError as e:
                errors.append(e)
                return

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert wait_until(lambda: writes[0] >= 5 or errors, timeout=60)
        before = writes[0]
        result = resync(rc, t, p)
        # and again, from the other members, while the writes go on: each
        # compares everything and copies what a write in flight left
        # different for a moment
        for source in (members[1], p):
            resync(rc, t, source)
        done = writes[0]
        print(f"writes before the resyncs {before}, during {done - before}")
        assert wait_until(lambda: writes[0] >= done + 5 or errors, timeout=60)
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not errors, errors
    assert result["copied"] > 0
    want = listing(rc, p)
    assert listing(rc, t) == want
    assert listing(rc, members[1]) == want


def test_bad_requests_and_a_source_that_is_down(rc):
    table = chain_table(rc)
    chain = table[0]
    t, p = chain["targets"][1], chain["targets"][0]
    other = next(ch for ch in table.values() if t not in ch["targets"])
    not_here = next(x for x in range(SERVERS * TARGETS)
                    if server_of_target(x) != server_of_target(t) and x != p)
    with sock_for(rc, t) as sock:
        def resync_frame(target, source, ch, version, flags=0):
            return call(sock, CHUNK_RESYNC,
                        struct.pack("<IIIIII", target, source, ch, version, flags, 0))[0]
        def list_frame(target, max_entries=10, flags=0, ch=0, version=0):
            return call(sock, CHUNK_LIST, struct.pack("<QIIIIII", 0, 0, target, max_entries,
                                                      flags, ch, version))[0]
        assert list_frame(not_here) == ENXIO
        assert list_frame(t, max_entries=0) == EINVAL
        assert list_frame(t, max_entries=16385) == EINVAL
        assert list_frame(t, flags=4) == EINVAL
        assert list_frame(t, ch=chain["id"], version=chain["version"]) == EINVAL  # no flag
        assert call(sock, CHUNK_LIST, struct.pack("<QIIII", 0, 0, t, 10, 0))[0] == EINVAL  # short
        # a resync's source listing names the chain at its version (2)
        assert list_frame(t, flags=2, ch=chain["id"], version=chain["version"]) == 0
        assert list_frame(t, flags=3, ch=chain["id"], version=chain["version"]) == 0
        assert list_frame(t, flags=2, ch=chain["id"], version=chain["version"] + 1) == ESTALE
        assert list_frame(t, flags=2, ch=other["id"], version=other["version"]) == ESTALE
        assert resync_frame(not_here, p, chain["id"], chain["version"]) == ENXIO
        assert resync_frame(t, t, chain["id"], chain["version"]) == EINVAL
        assert resync_frame(t, p, other["id"], other["version"]) == ESTALE
        assert resync_frame(t, other["targets"][0], chain["id"], chain["version"]) == ESTALE
        assert resync_frame(t, p, chain["id"], chain["version"] + 1) == ESTALE
        assert resync_frame(t, p, 999, 1) == ENXIO
        assert resync_frame(t, p, chain["id"], chain["version"], flags=1) == EINVAL
        assert call(sock, CHUNK_RESYNC_STATUS, struct.pack("<II", not_here, 0))[0] == ENXIO
        # a second resync of a target while one runs: EBUSY (the source is
        # stopped, so the first waits for it for the I/O timeout)
        os.kill(rc.pid(server_of_target(p)), signal.SIGSTOP)
        try:
            assert resync_frame(t, p, chain["id"], chain["version"]) == 0
            assert resync_frame(t, p, chain["id"], chain["version"]) == EBUSY
        finally:
            os.kill(rc.pid(server_of_target(p)), signal.SIGCONT)

        def state():
            st, reply = call(sock, CHUNK_RESYNC_STATUS, struct.pack("<II", t, 0))
            assert st == 0 and len(reply) == 72
            return struct.unpack_from("<Ii", reply)
        assert wait_until(lambda: state()[0] in (2, 3), timeout=60)
    # kvc-admin says what is wrong
    out = rc.admin("resync", "--target", str(t), "--from", str(t), check=False)
    assert out.returncode == 2 and "another target" in out.stderr
    out = rc.admin("resync", "--target", str(t), "--from", str(other["targets"][0]), check=False)
    assert out.returncode == 1 and "stale" in out.stderr
    out = rc.admin("resync", "--target", "99", "--from", str(p), check=False)
    assert out.returncode == 1
    # a source that is down: the resync fails clearly, the target serves on
    path = rc.mount / "down-source"
    path.write_bytes(b"d" * 100)
    os.kill(rc.pid(server_of_target(p)), signal.SIGKILL)
    try:
        out = resync(rc, t, p, check=False)
        assert out.returncode == 1
        result = json.loads(out.stdout)
        assert result["state"] == "failed" and result["result"] < 0 and result["error"]
        text = rc.admin("resync", "--target", str(t), "--status", check=False).stdout
        assert "FAILED" in text
        assert metric(rc, t // TARGETS, "kvc_storage_resync_failures_total", t) >= 1
        _drop_caches()
        assert path.read_bytes() == b"d" * 100
        with sock_for(rc, t) as sock:  # reads at t are served again
            assert call(sock, CHUNK_LIST, struct.pack("<QIIIIII", 0, 0, t, 10, 0, 0, 0))[0] == 0
    finally:
        rc.restart(server_of_target(p))
    for i, address in enumerate(rc.storage_addresses):
        assert kvcwire.ping(address), i
    resync(rc, t, p)
    assert listing(rc, t) == listing(rc, p)
