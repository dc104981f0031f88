"""Ring keys (issue 11): put, get, exists, remove and wait of keys through
USRBIO rings, with random scatter-gather layouts, against a live cluster:
keys cross between the ring and the FUSE mount both ways, waits are
released by another process's put or time out, permissions are checked
for the ring's uid, and malformed entries fail alone."""
import errno
import os
import pwd
import random
import signal
import subprocess
import time
import sys
import textwrap

import pytest

from conftest import LIBKVC, ROOT

sys.path.insert(0, str(ROOT / "tools" / "python"))
os.environ.setdefault("KVC_LIB", str(LIBKVC))

import kvcfs  # noqa: E402

MiB = 1 << 20


def layout(rng, size, iovs, used):
    """Random segments adding up to size: 1..64 pieces, each placed at a
    free random spot of one of the iovs (used: taken ranges per iov)."""
    count = rng.randint(1, min(64, size))
    cuts = sorted(rng.sample(range(1, size), count - 1)) if count > 1 else []
    bounds = [0] + cuts + [size]
    segs = []
    for a, b in zip(bounds, bounds[1:]):
        n = b - a
        while True:
            iov = rng.choice(iovs)
            at = rng.randrange(0, iov.size - n)
            if all(at + n <= x or y <= at for x, y in used[id(iov)]):
                used[id(iov)].append((at, at + n))
                segs.append((iov, at, n))
                break
    return segs


def fill(segs, data):
    off = 0
    for iov, at, n in segs:
        iov.memoryview()[at:at + n] = data[off:off + n]
        off += n


def collect(segs):
    return b"".join(bytes(iov.memoryview()[at:at + n]) for iov, at, n in segs)


def put_from_random_layouts(rng, ring, keys, names, datas, iovs):
    """Put each key from a random layout of segments over the iovs; every
    put succeeds. Returns the puts (name, segments)."""
    used = {id(i): [] for i in iovs}
    puts = []
    for name, data in zip(names, datas):
        segs = layout(rng, len(data), iovs, used)
        fill(segs, data)
        puts.append((name, segs))
    assert ring.put_keys(keys, puts).wait() == [len(d) for d in datas]
    return puts


@pytest.fixture
def ring(cluster):
    r = kvcfs.Ring(str(cluster.mount), 64, for_read=False)
    yield r
    r.close()


@pytest.fixture
def iovs(cluster):
    made = [kvcfs.Iov.create(str(cluster.mount), 24 * MiB) for _ in range(2)]
    for iov in made:
        iov.unlink()
    yield made
    for iov in made:
        iov.close()


def test_round_trips_with_random_segment_layouts(ring, iovs, workdir):
    rng = random.Random(11)
    keys = kvcfs.KeyDir(workdir)
    for rnd in range(3):
        names = [f"k{rnd}-{i}" for i in range(40)]
        datas = [os.urandom(rng.choice([1, 100, 4096, 65536, 200_001])) for _ in names]
        puts = put_from_random_layouts(rng, ring, keys, names, datas, iovs)
        assert ring.exists_keys(keys, names).wait() == [len(d) for d in datas]
        used = {id(i): [] for i in iovs}
        gets = [(name, layout(rng, len(d), iovs, used)) for name, d in zip(names, datas)]
        assert ring.get_keys(keys, gets).wait() == [len(d) for d in datas]
        for (name, segs), data in zip(gets, datas):
            assert collect(segs) == data, name
        # Again: -EEXIST, or replaced with KEY_REPLACE
        assert ring.put_keys(keys, puts[:3]).wait() == [-errno.EEXIST] * 3
        assert ring.put_keys(keys, puts[:3], replace=True).wait() == [len(d) for d in datas[:3]]
        # A get whose segments do not add up to the size copies nothing
        iov = iovs[0]
        iov.memoryview()[0:8] = b"untouchd"
        bad = [(names[0], [(iov, 0, len(datas[0]) + 1)])]
        assert ring.get_keys(keys, bad).wait() == [-errno.EMSGSIZE]
        assert bytes(iov.memoryview()[0:8]) == b"untouchd"
        assert ring.remove_keys(keys, names[:20]).wait() == [len(d) for d in datas[:20]]
        assert ring.exists_keys(keys, names).wait() == \
            [-errno.ENOENT] * 20 + [len(d) for d in datas[20:]]
        assert ring.get_keys(keys, gets[:1]).wait() == [-errno.ENOENT]
    # No temp files left behind
    assert not [n for n in os.listdir(workdir) if n.startswith(".kvc-key")]
    keys.close()


def test_a_batch_of_64_keys_is_taken_in_parts(cluster, ring, iovs, workdir):
    """kvc-fuse takes at most 16 key puts, and 32 other key operations, at
    once (fuse/ring_service.c: BATCH_PUTS, BATCH_KEYS): a client's batch of
    64 runs as several batches, on several workers, each with its own round
    trips to kvc-meta; every key's result and bytes are still its own."""
    from test_metrics import scrape, value

    def batches():
        return value(scrape(cluster.fuse_metrics), "kvc_fuse_ring_batches_total", dir="write")

    rng = random.Random(5)
    keys = kvcfs.KeyDir(workdir)
    names = [f"part-{i}" for i in range(64)]
    datas = [os.urandom(4096 + 37 * i) for i in range(64)]
    before = batches()
    put_from_random_layouts(rng, ring, keys, names, datas, iovs)
    assert batches() - before >= 4
    used = {id(i): [] for i in iovs}
    gets = [(name, layout(rng, len(d), iovs, used)) for name, d in zip(names, datas)]
    before = batches()
    assert ring.get_keys(keys, gets).wait() == [len(d) for d in datas]
    assert batches() - before >= 2
    for (name, segs), data in zip(gets, datas):
        assert collect(segs) == data, name
    for name, data in zip(names, datas):
        assert (workdir / name).read_bytes() == data
    keys.close()


def test_gets_scattered_within_one_iov(ring, iovs, workdir):
    """Gets whose segments all lie in one iov go as one storage io cut at
    the segments' edges (fuse/ring_keys.c scatters): 2 to 64 segments at
    odd offsets, keys that cross a chunk's end (1 MiB chunks), and a file
    with a hole (written through FUSE), which reads back zeros."""
    rng = random.Random(5)
    keys = kvcfs.KeyDir(workdir)
    names = [f"s{i}" for i in range(12)]
    datas = [os.urandom(rng.choice([100, 65536, 200_001, 1_500_001])) for _ in names]
    put_from_random_layouts(rng, ring, keys, names, datas, iovs)
    with open(os.path.join(workdir, "holey"), "wb") as f:
        f.write(b"0123456789")
        f.truncate(300_000)
    names.append("holey")
    datas.append(b"0123456789" + bytes(300_000 - 10))
    one = iovs[0]
    at = 0
    gets = []
    for name, data in zip(names, datas):
        count = rng.randint(2, min(64, len(data)))
        cuts = sorted(rng.sample(range(1, len(data)), count - 1))
        bounds = [0] + cuts + [len(data)]
        segs = []
        for a, b in zip(bounds, bounds[1:]):
            at += rng.randrange(0, 64)  # odd gaps between the segments
            segs.append((one, at, b - a))
            at += b - a
        gets.append((name, segs))
    assert at <= one.size
    one.memoryview()[0:at] = b"\xaa" * at
    assert ring.get_keys(keys, gets).wait() == [len(d) for d in datas]
    for (name, segs), data in zip(gets, datas):
        assert collect(segs) == data, name
    keys.close()


def test_a_read_request_carries_up_to_1024_pieces(cluster, ring, iovs, workdir):
    """32 keys of 32 segments of 100 bytes (1,024 pieces) got in one batch:
    each storage server gets the pieces of its keys in one placed request
    (the client's cap on pieces a request was 256 below the wire's 1,024,
    which took 4 or more requests), bytes compared."""
    from test_metrics import scrape, value
    keys = kvcfs.KeyDir(workdir)
    datas = [os.urandom(3200) for _ in range(32)]
    iov = iovs[0]
    puts = [(f"p{i}", [(iov, i * 3200, 3200)]) for i in range(32)]
    for (name, [(_, at, n)]), data in zip(puts, datas):
        iov.memoryview()[at:at + n] = data
    assert ring.put_keys(keys, puts).wait() == [3200] * 32
    gets = [(f"p{i}", [(iovs[1], (i * 32 + j) * 128, 100) for j in range(32)]) for i in range(32)]
    before = value(scrape(cluster.fuse_metrics), "kvc_fuse_transport_requests_total",
                   transport="place")
    assert ring.get_keys(keys, gets).wait() == [3200] * 32
    sent = value(scrape(cluster.fuse_metrics), "kvc_fuse_transport_requests_total",
                 transport="place") - before
    assert 1 <= sent <= 3  # one request per storage server
    for (name, segs), data in zip(gets, datas):
        assert collect(segs) == data, name
    keys.close()


def test_keys_cross_between_the_ring_and_fuse(ring, iovs, workdir):
    keys = kvcfs.KeyDir(workdir)
    data = os.urandom(3 * MiB + 17)
    # The kernel has looked the name up (a negative dentry) before the put
    assert not (workdir / "from-ring").exists()
    segs = [(iovs[0], 0, MiB), (iovs[1], 5 * MiB, len(data) - MiB)]
    fill(segs, data)
    assert ring.put_keys(keys, [("from-ring", segs)]).wait() == [len(data)]
    assert (workdir / "from-ring").read_bytes() == data
    other = os.urandom(777_777)
    (workdir / "from-fuse").write_bytes(other)
    segs = [(iovs[1], 0, 1000), (iovs[0], 100, len(other) - 1000)]
    assert ring.get_keys(keys, [("from-fuse", segs)]).wait() == [len(other)]
    assert collect(segs) == other
    # Removed through the ring: gone from the mount too
    assert ring.remove_keys(keys, ["from-ring"]).wait() == [len(data)]
    assert not (workdir / "from-ring").exists()
    os.unlink(workdir / "from-fuse")
    assert ring.exists_keys(keys, ["from-fuse"]).wait() == [-errno.ENOENT]
    keys.close()


def test_blocks_gather_and_scatter_a_block_across_layers(cluster, ring, iovs, workdir):
    """kvcfs.Blocks: a cache of 6 layers (memoryviews of two iovs, K and V
    of a layer in different iovs, pages of different sizes per layer) of
    16 blocks; key b is page b of every layer in order, put from one cache
    and got into another (blocks in reverse), byte for byte; the FUSE file
    is the layers' pages back to back. A Segments reused for two keys;
    bad geometry, a block out of range and a closed iov are refused in
    Python, before anything reaches the ring."""
    keys = kvcfs.KeyDir(workdir)
    blocks_n, pages = 16, [4096, 4096, 1000, 1000, 65536, 3]
    def cache(base):
        layers, at = [], {id(i): base for i in iovs}
        for n, page in enumerate(pages):
            iov = iovs[n % 2]
            view = iov.memoryview()[at[id(iov)]:at[id(iov)] + page * blocks_n]
            at[id(iov)] += page * blocks_n + 17  # gaps between the layers
            layers.append(view)
        return layers
    src, dst = cache(0), cache(8 * MiB)
    for layer in src:
        layer[:] = os.urandom(len(layer))
    put = kvcfs.Blocks(src, blocks_n)
    got = kvcfs.Blocks(dst, blocks_n)
    assert put.key_bytes == sum(pages) and len(put) == blocks_n
    assert ring.put_keys(keys, [(f"b{b}", put[b]) for b in range(blocks_n)]).wait() == \
        [sum(pages)] * blocks_n
    assert ring.get_keys(keys, [(f"b{b}", got[blocks_n - 1 - b])
                                for b in range(blocks_n)]).wait() == [sum(pages)] * blocks_n
    for layer_src, layer_dst, page in zip(src, dst, pages):
        for b in range(blocks_n):
            assert bytes(layer_dst[(blocks_n - 1 - b) * page:(blocks_n - b) * page]) == \
                bytes(layer_src[b * page:(b + 1) * page])
    whole = b"".join(bytes(layer[5 * page:6 * page]) for layer, page in zip(src, pages))
    assert (workdir / "b5").read_bytes() == whole
    # Negative blocks count from the end; layers given as tuples
    last = b"".join(bytes(layer[(blocks_n - 1) * page:]) for layer, page in zip(src, pages))
    assert ring.put_keys(keys, [("last", put[-1])]).wait() == [sum(pages)]
    assert (workdir / "last").read_bytes() == last
    tuples = kvcfs.Blocks([(iovs[1], 20 * MiB, 4 * 1000), (iovs[0], 20 * MiB + 7, 4 * 10)], 4)
    iovs[1].memoryview()[20 * MiB:20 * MiB + 4000] = os.urandom(4000)
    iovs[0].memoryview()[20 * MiB + 7:20 * MiB + 47] = os.urandom(40)
    assert ring.put_keys(keys, [("t2", tuples[2])]).wait() == [1010]
    assert (workdir / "t2").read_bytes() == \
        bytes(iovs[1].memoryview()[20 * MiB + 2000:20 * MiB + 3000]) + \
        bytes(iovs[0].memoryview()[20 * MiB + 27:20 * MiB + 37])
    # One Segments, resolved once, serves two keys
    segs = kvcfs.Segments([(iovs[0], 21 * MiB, 5000), src[1][0:300]])
    expect = bytes(iovs[0].memoryview()[21 * MiB:21 * MiB + 5000]) + bytes(src[1][0:300])
    assert ring.put_keys(keys, [("seg1", segs), ("seg2", segs)]).wait() == [5300, 5300]
    assert (workdir / "seg1").read_bytes() == expect
    assert (workdir / "seg2").read_bytes() == expect
    # Refused in Python, before anything reaches the ring
    with pytest.raises(ValueError):
        kvcfs.Blocks([src[0][:4097]], blocks_n)  # not 16 equal pages
    with pytest.raises(ValueError):
        kvcfs.Blocks([], blocks_n)
    with pytest.raises(ValueError):  # more segments than a key may have
        kvcfs.Blocks([src[0]] * (kvcfs.KEY_MAX_SEGS + 1), blocks_n)
    with pytest.raises(ValueError):  # [2, blocks, page]: K and V are not blocks
        kvcfs.Blocks([iovs[0].memoryview()[0:2 * blocks_n * 64].cast("B", [2, blocks_n * 64])],
                     blocks_n)
    with pytest.raises(ValueError):  # not 64-bit (ctypes would wrap it)
        kvcfs.Segments([(iovs[0], -1, 10)])
    with pytest.raises(ValueError):
        kvcfs.Segments([(iovs[0], (1 << 64) + 5, 10)])
    with pytest.raises(IndexError):
        put[blocks_n]
    lone = kvcfs.Iov.create(str(cluster.mount), MiB)
    lone.unlink()
    held = kvcfs.Blocks([(lone, 0, MiB)], 4)[1]
    lone.close()
    with pytest.raises(ValueError):
        ring.put_keys(keys, [("after-close", held)])
    with pytest.raises(ValueError):
        kvcfs.Segments([(lone, 0, 10)])
    with pytest.raises(ValueError):  # a file read into a closed iov
        ring.prepare(lone, True, keys.fd, 0, 10)
    assert ring.exists_keys(keys, ["after-close"]).wait() == [-errno.ENOENT]
    keys.close()


CLOSE_RACE = textwrap.dedent("""
    import sys, threading, time
    sys.path.insert(0, {path!r})
    import kvcfs
    mount, directory = sys.argv[1], sys.argv[2]
    keys = kvcfs.KeyDir(directory)
    ring = kvcfs.Ring(mount, 4, for_read=False)
    iov = kvcfs.Iov.create(mount, 1 << 20)
    iov.unlink()
    blocks = kvcfs.Blocks([(iov, 0, 1 << 20)], 256)
    # libkvc's prepare, slowed down: the close below comes while it runs
    real, inside, events = kvcfs._ring_prep_key, threading.Event(), []
    def slow(*args):
        inside.set()
        time.sleep(0.3)
        rc = real(*args)
        events.append("prepared")
        return rc
    kvcfs._ring_prep_key = slow
    t = threading.Thread(target=lambda: ring.prepare_key(kvcfs.KEY_PUT, keys, "during", blocks[3]))
    t.start()
    inside.wait()
    iov.close()
    events.append("closed")
    t.join()
    kvcfs._ring_prep_key = real
    ring.submit()
    result = ring.wait(min_results=1)[0].result
    try:
        ring.prepare_key(kvcfs.KEY_PUT, keys, "after", blocks[4])
        events.append("prepared after close")
    except ValueError:
        events.append("refused")
    print(",".join(events), result)
""")


def test_closing_an_iov_under_a_prepare_in_another_thread(cluster, workdir):
    """kvcfs: an iov closed by one thread while another thread's prepare
    passes its handle to libkvc (slowed down to 0.3 s) is freed only after
    that prepare returned; the entry, submitted after the close, completes
    with -EFAULT (kvc-fuse no longer knows the iov); a prepare after the
    close is refused (ValueError) instead of handing libkvc a freed
    handle."""
    script = CLOSE_RACE.format(path=str(ROOT / "tools" / "python"))
    out = subprocess.run([sys.executable, "-c", script, str(cluster.mount), str(workdir)],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, KVC_LIB=str(LIBKVC)))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["prepared,closed,refused", str(-errno.EFAULT)]


PUT_SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {path!r})
    import kvcfs
    mount, directory, name, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ring = kvcfs.Ring(mount, 4, for_read=False)
    iov = kvcfs.Iov.create(mount, size)
    iov.unlink()
    iov.memoryview()[:] = bytes([7]) * size
    keys = kvcfs.KeyDir(directory)
    print(ring.put_keys(keys, [(name, [(iov, 0, size)])]).wait()[0])
""")


def put_from_another_process(cluster, workdir, name, size, user=None):
    script = PUT_SCRIPT.format(path=str(ROOT / "tools" / "python"))
    cmd = [sys.executable, "-c", script, str(cluster.mount), str(workdir), name, str(size)]
    if user:
        cmd = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
               "--clear-groups"] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, KVC_LIB=str(LIBKVC)))


def test_wait_is_released_by_a_put_from_another_process(cluster, ring, workdir):
    keys = kvcfs.KeyDir(workdir)
    batch = ring.wait_keys(keys, ["handoff", "handoff2"], timeout=60)
    out = put_from_another_process(cluster, workdir, "handoff", 65536)
    assert out.stdout.strip() == "65536", out.stderr
    out = put_from_another_process(cluster, workdir, "handoff2", 100)
    assert out.stdout.strip() == "100", out.stderr
    assert batch.wait(timeout=30) == [65536, 100]
    # A key that is there already completes at once
    assert ring.wait_keys(keys, ["handoff"], timeout=60).wait(timeout=30) == [65536]
    keys.close()


def test_a_parked_wait_keeps_its_index_while_later_entries_complete(cluster, ring, workdir):
    """Completions come in any order (a parked wait ends long after later
    entries; batches of one ring run at once): the index prep gives an
    entry is never given to another while it is outstanding (3FS's binding
    finds an entry's buffer by its completion's index), and each
    completion carries its own entry's index."""
    keys = kvcfs.KeyDir(workdir)
    wait_index = ring.prepare_key(kvcfs.KEY_WAIT, keys, "late", timeout_ms=60000,
                                  userdata="wait")
    ring.submit()
    for rnd in range(4):  # 160 entries through a ring of 64, one of them parked
        given = {}
        for i in range(40):
            name = f"none-{rnd}-{i}"
            given[name] = ring.prepare_key(kvcfs.KEY_EXISTS, keys, name, userdata=name)
        ring.submit()
        done = []
        while len(done) < 40:
            done += ring.wait(min_results=1, timeout=30)
        assert sorted(c.userdata for c in done) == sorted(given)
        for c in done:
            assert c.index == given[c.userdata] and c.index != wait_index, (c, wait_index)
            assert c.result == -errno.ENOENT
    out = put_from_another_process(cluster, workdir, "late", 100)
    assert out.stdout.strip() == "100", out.stderr
    (c,) = ring.wait(min_results=1, timeout=30)
    assert (c.userdata, c.index, c.result) == ("wait", wait_index, 100)
    keys.close()


def test_wait_times_out(ring, workdir):
    keys = kvcfs.KeyDir(workdir)
    assert ring.wait_keys(keys, ["never"], timeout=0.3).wait(timeout=30) == [-errno.ETIMEDOUT]
    keys.close()


def test_a_remove_during_a_wait_keeps_it_waiting(cluster, ring, iovs, workdir):
    keys = kvcfs.KeyDir(workdir)
    waiting = ring.wait_keys(keys, ["later"], timeout=60)
    short = ring.wait_keys(keys, ["gone"], timeout=0.5)
    assert ring.remove_keys(keys, ["later", "gone"]).wait() == [-errno.ENOENT] * 2
    assert short.wait(timeout=30) == [-errno.ETIMEDOUT]
    iovs[0].memoryview()[0:10] = b"0123456789"
    assert ring.put_keys(keys, [("later", [(iovs[0], 0, 10)])]).wait() == [10]
    assert waiting.wait(timeout=30) == [10]
    keys.close()


def test_malformed_entries_fail_alone(ring, iovs, workdir):
    keys = kvcfs.KeyDir(workdir)
    iov = iovs[0]
    iov.memoryview()[0:4096] = os.urandom(4096)
    ok = [(iov, 0, 4096)]
    many = [(iov, i * 10, 10) for i in range(65)]
    overlap = [(iov, 0, 100), (iov, 50, 100)]
    outside = [(iov, iov.size - 10, 20)]
    batch = ring._keys(kvcfs.KEY_PUT, keys, [
        ("good1", ok), ("many", many), ("overlap", overlap), ("..", ok), ("a/b", ok),
        ("x" * 256, ok), ("outside", outside), ("", ok), ("good2", ok)])
    assert batch.wait() == [4096, -errno.E2BIG, -errno.EINVAL, -errno.EINVAL, -errno.EINVAL,
                            -errno.ENAMETOOLONG, -errno.EFAULT, -errno.EINVAL, 4096]
    # Sizes that do not add up, next to a good get
    got = [(iovs[1], 0, 4096)]
    assert ring.get_keys(keys, [("good1", [(iovs[1], 0, 4000)]), ("good2", got)]).wait() == \
        [-errno.EMSGSIZE, 4096]
    assert bytes(iovs[1].memoryview()[0:4096]) == bytes(iov.memoryview()[0:4096])
    assert sorted(os.listdir(workdir)) == ["good1", "good2"]
    keys.close()


def test_key_directories_are_confined_and_permission_checked(cluster, workdir, local_tmp):
    # Only directories of the mount register as key directories
    outside = os.open(local_tmp, os.O_PATH | os.O_DIRECTORY)
    with pytest.raises(OSError) as e:
        kvcfs.register_fd(outside)
    assert e.value.errno == errno.EBADF
    os.close(outside)
    nobody = pwd.getpwnam("nobody")
    locked = workdir / "locked"
    locked.mkdir()
    os.chmod(workdir, 0o755)
    os.chmod(locked, 0o755)  # root's: nobody may search, not write
    out = put_from_another_process(cluster, locked, "k", 10, user=nobody)
    assert out.stdout.strip() == str(-errno.EACCES), out.stderr
    open_dir = workdir / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    out = put_from_another_process(cluster, open_dir, "k", 10, user=nobody)
    assert out.stdout.strip() == "10", out.stderr
    st = os.stat(open_dir / "k")
    assert (st.st_uid, st.st_size) == (nobody.pw_uid, 10)
    assert not os.listdir(locked)


def test_wait_on_another_client_is_woken_by_kvc_meta(cluster, workdir):
    """A decoder's wait on a second kvc-fuse client, released by a put on
    the first: kvc-meta's change event wakes it (without events the wait
    would find the key at its next look, up to 1 s later)."""
    import time
    from conftest import drop_second_mount, second_mount
    proc, mount2 = second_mount(cluster)
    try:
        there = os.path.join(mount2, workdir.relative_to(cluster.mount))
        ring2 = kvcfs.Ring(mount2, 16, for_read=False)
        keys2 = kvcfs.KeyDir(there)
        batch = ring2.wait_keys(keys2, ["pushed"], timeout=60)
        time.sleep(2.5)  # the wait's lookups back off to their longest
        out = put_from_another_process(cluster, workdir, "pushed", 4096)
        put_done = time.monotonic()
        assert out.stdout.strip() == "4096", out.stderr
        assert batch.wait(timeout=30) == [4096]
        took = time.monotonic() - put_done
        print(f"wait on the other client released {took * 1000:.1f} ms after the put returned")
        assert took < 0.5
        keys2.close()
        ring2.close()
    finally:
        drop_second_mount(proc, mount2)


@pytest.fixture(scope="module")
def served(cluster):
    """The cluster through a kvc-fuse that reads every chunk through its
    server (local_reads = off): a frozen server then holds a read up."""
    from conftest import PORT_BASE, server_placement
    with server_placement(cluster, PORT_BASE + 36) as c:
        yield c


@pytest.mark.parametrize("change", ["remove", "replace"])
def test_a_get_racing_a_remove_or_replace_never_passes_holes_for_bytes(
        served, workdir, change):
    """A get reads the chunks of the inode its lookup named; once the key
    is removed (or replaced: the old inode loses its name), kvc-meta's
    collector removes those chunks, and a read after that finds holes,
    which read as zeros. kvc-fuse looks the gets' keys up again after
    their reads (fuse/ring_keys.c confirm_gets): a key removed meanwhile
    is -ENOENT, one replaced meanwhile -EAGAIN, never a success over bytes
    that may be zeros. Here the read of the key's first chunk waits on a
    frozen storage server while the key is removed, or replaced by a
    rename over it."""
    from conftest import CHUNK, chunk_name, freeze
    cluster = served
    workdir = served.mount / workdir.name
    ring = kvcfs.Ring(str(cluster.mount), 64, for_read=False)
    iovs = [kvcfs.Iov.create(str(cluster.mount), 24 * MiB) for _ in range(2)]
    for iov in iovs:
        iov.unlink()
    keys = kvcfs.KeyDir(workdir)
    data = os.urandom(2 * CHUNK)
    iov = iovs[0]
    iov.memoryview()[0:2 * CHUNK] = data
    assert ring.put_keys(keys, [("racing", [(iov, 0, 2 * CHUNK)]),
                                ("other", [(iov, 0, 2 * CHUNK)])]).wait() == [2 * CHUNK] * 2
    inode = os.stat(workdir / "racing").st_ino

    def server_of(chunk):
        found = list(cluster.dir.glob(f"s*/t*/{chunk_name(inode, chunk)}"))
        assert len(found) == 1
        return found[0].relative_to(cluster.dir).parts[0]

    assert server_of(0) != server_of(1)
    out = iovs[1]
    # both servers know the iov (registered on a first read)
    assert ring.get_keys(keys, [("racing", [(out, 0, 2 * CHUNK)])]).wait() == [2 * CHUNK]
    out.memoryview()[0:2 * CHUNK] = bytes(2 * CHUNK)
    pid = cluster.pid(server_of(0))
    frozen = time.monotonic()
    freeze(pid)
    try:
        get = ring.get_keys(keys, [("racing", [(out, 0, 2 * CHUNK)])])
        # its lookup answered and its reads sent: the second chunk lands
        deadline = time.monotonic() + 20
        while bytes(out.memoryview()[CHUNK:2 * CHUNK]) != data[CHUNK:]:
            assert time.monotonic() < deadline, "the second chunk never landed"
            time.sleep(0.01)
        if change == "remove":
            assert ring.remove_keys(keys, ["racing"]).wait() == [2 * CHUNK]
        else:  # a metadata change only: a put could need the frozen server
            os.rename(workdir / "other", workdir / "racing")
    finally:
        os.kill(pid, signal.SIGCONT)
        frozen = time.monotonic() - frozen
    expected = [-errno.ENOENT if change == "remove" else -errno.EAGAIN]
    # The storage client's timeout is 2 s (conftest): a server frozen
    # longer may fail the read first, which proves nothing either way.
    assert get.wait(timeout=60) in ([expected, [-errno.EIO]] if frozen > 1.5 else [expected])
    keys.close()
    for iov in iovs:
        iov.close()
    ring.close()


def meta_orphans(cluster):
    """kvc-meta's count of nameless files kept open (STATFS)."""
    import struct
    import kvcwire
    sock, status = kvcwire.connect(cluster.meta_address)
    with sock:
        assert status == 0
        sock.sendall(kvcwire.frame(kvcwire.STATFS, b""))
        _, status, body, _ = kvcwire.recv_frame(sock)
    assert status == 0
    return struct.unpack_from("<Q", body, 24)[0]


def ready_put(cluster, directory, name):
    """A child process whose ring, iov and key directory are ready (so
    registered with the servers); it puts a 64 KiB key when told."""
    script = PUT_SCRIPT.format(path=str(ROOT / "tools" / "python")).replace(
        "print(ring.put_keys", "print('ready', flush=True); sys.stdin.readline()\nprint(ring.put_keys")
    child = subprocess.Popen([sys.executable, "-c", script, str(cluster.mount), str(directory),
                              name, str(65536)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, KVC_LIB=str(LIBKVC)))
    assert child.stdout.readline().strip() == "ready"
    return child


def freeze_under_a_put(cluster, child, before):
    """Freeze every storage server, let the ready put go, and wait until
    its temp is made (kvc-meta's orphan count above `before`): the put's
    write then waits on the frozen servers. Returns their pids (the caller
    thaws them)."""
    from conftest import freeze
    servers = [cluster.pid(f"s{i}") for i in (1, 2, 3)]
    try:
        for pid in servers:
            freeze(pid)
        child.stdin.write("go\n")
        child.stdin.flush()
        deadline = time.monotonic() + 20
        while meta_orphans(cluster) == before:
            assert time.monotonic() < deadline, "the put never made its temp"
            time.sleep(0.02)
    except BaseException:
        for pid in servers:
            os.kill(pid, signal.SIGCONT)
        raise
    return servers


def test_a_put_whose_directory_goes_leaves_no_temp_behind(cluster, workdir):
    """A temp has no name, so the key directory is empty while a put
    writes and an rmdir takes it; the publish then fails as a whole
    (-ENOENT) and kvc-fuse closes the temp, which kvc-meta reclaims: no
    nameless file stays open for the life of the kvc-fuse."""
    keys = workdir / "going"
    keys.mkdir()
    before = meta_orphans(cluster)
    child = ready_put(cluster, keys, "k")
    servers = freeze_under_a_put(cluster, child, before)
    try:
        os.rmdir(keys)  # empty: the temp has no name
    finally:
        for pid in servers:
            os.kill(pid, signal.SIGCONT)
    out, _ = child.communicate(timeout=60)
    assert int(out.split()[-1]) < 0, out  # -ENOENT, or -EIO had the write timed out
    deadline = time.monotonic() + 10
    while meta_orphans(cluster) != before:
        assert time.monotonic() < deadline, "the temp stayed open"
        time.sleep(0.1)


def test_a_kvc_fuse_killed_mid_put_leaves_no_file_behind(cluster, workdir):
    """A put's temp is a nameless file kvc-fuse has open in kvc-meta (an
    orphan), not a hidden name: while the put's write waits (every storage
    server frozen), the key directory lists nothing, and when kvc-fuse is
    killed then, kvc-meta reclaims the temp once it drops the dead client
    (client_timeout_ms, 3 s here): nothing is left in the directory or in
    kvc-meta (this left a `.kvc-key.*` file for good before)."""
    before = meta_orphans(cluster)
    fuse = cluster.pid("fuse")
    child = ready_put(cluster, workdir, "cut-short")
    servers = []
    try:
        # the temp is made, its write waits: kill kvc-fuse before the write
        # times out (io_timeout_ms 2 s) and closes the temp itself
        servers = freeze_under_a_put(cluster, child, before)
        listed = os.listdir(workdir)
        os.kill(fuse, signal.SIGKILL)
        assert listed == [], listed
    finally:
        for pid in servers:
            os.kill(pid, signal.SIGCONT)
        child.kill()
        child.wait()
        cluster.restart("fuse", "KILL")
    deadline = time.monotonic() + 30
    while meta_orphans(cluster) != before:
        assert time.monotonic() < deadline, "the dead client's temp was never reclaimed"
        time.sleep(0.2)
    assert os.listdir(workdir) == []
