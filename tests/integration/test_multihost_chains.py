"""Chains and the cluster manager across hosts (issue 12's failure tests).

Every daemon in a network namespace of its own behind one bridge (subnet
10.78.N.0/24, N from the port base, so two checkouts do not collide):
five storage hosts (s1..s5: one kvc-storage of three targets each,
replicas 3: five chains), three control hosts x1..x3 each with an etcd
member (a 3-member etcd cluster), kvc-mgmt m1 on x1 and m2 on x2, kvc-meta
on x3, and a client host `cl` for a second kvc-fuse. The first kvc-fuse
runs in the root namespace and reaches everyone through the bridge.
Daemons are started with nsenter --net (the network namespace only, so a
kvc-fuse mounted from `cl` is visible here); a host's link is cut with
`ip link set <veth> down`.

Each failure runs under a mixed load through the mount (writers rewriting
files with fsync, readers, O_DIRECT readers and USRBIO ring readers of
files that do not change): reads never fail, writes stall at most about
the detection time, every acknowledged byte is there afterwards, and the
host that returns rejoins, catches up (its server resyncs it on its own)
and holds what the other members hold. Every test leaves the cluster
whole (heal(): everything restarted or continued, links up, chains full).
The last test adds three storage hosts (j1..j3, kvc-storage --join and
kvc-admin add-host): the cluster keeps them, with eight chains.
"""
import errno
import hashlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time

import pytest

from chain_helpers import chunk_files, layout_of, listing, ring_read_all, scrape
from conftest import BUILD, CHUNK, _drop_caches
from multihost_harness import (CHAINS, DETECT, ETCDS, FULL, JOINERS, MANAGERS, PORT, REPLICAS,
                               STORAGE, TARGETS,
                               Load, MultiHost, Net, check_load, http_json,
                               read_direct, server_of, sh, stable_files, targets_of,
                               wait_until, write_file, writer_dirs)


@pytest.fixture(scope="module")
def mh():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    net = Net()
    base = tempfile.mkdtemp(prefix="kvc-mhc-")
    mount = tempfile.mkdtemp(prefix="kvc-mhc-mnt-")
    cluster = MultiHost(net, base, mount)
    try:
        net.up()
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()
        net.down()
        keep = os.environ.get("KVC_MHC_LOGS")  # a directory to keep the logs in
        if keep:
            os.makedirs(keep, exist_ok=True)
            for name in os.listdir(base):
                if name.endswith(".log"):
                    shutil.copy(os.path.join(base, name), keep)
        shutil.rmtree(base, ignore_errors=True)
        os.rmdir(mount)


@pytest.fixture
def workdir(mh, request):
    """A directory of the mount for one test; the cluster healed after it."""
    path = os.path.join(mh.mount, request.node.name.replace("[", "-").replace("]", ""))
    os.mkdir(path)
    try:
        yield path
    finally:
        try:
            mh.heal()
        finally:
            shutil.rmtree(path, ignore_errors=True)


def chunk_reads(mh, server):
    m = scrape(mh.storage_metrics[mh.hosts.index(server)])
    return sum(v for k, v in m.items()
               if k.startswith("kvc_storage_reply_data_bytes_total") and "chunk_read" in k)


def differences(mh, server, rounds=5):
    """((target, chunk), (other member, ours, theirs)) for each chunk of
    server's targets that another member holds otherwise, in every one of
    `rounds` comparisons 0.5 s apart. The two listings are taken one after
    the other, so a change coming down the chain between them (the
    collector removing the files of earlier tests, whose orphans it
    releases once a minute) shows as a difference for a moment: a
    divergence is one that stays."""
    out = None
    for i in range(rounds):
        now = {}
        lost = mh.targets_of(server)
        for ch in mh.chains():
            for t in lost & set(ch["targets"]):
                other = next(m for m in ch["targets"] if m not in lost)
                mine, theirs = listing(mh, t), listing(mh, other)
                for k in set(mine) | set(theirs):
                    if mine.get(k) != theirs.get(k):
                        now[(t, k)] = (other, mine.get(k), theirs.get(k))
        out = now if out is None else {k: v for k, v in now.items() if k in out}
        if not out:
            return []
        if i + 1 < rounds:
            time.sleep(0.5)
    return sorted(out.items())


# Found by the "cut" case (about one run in three) and reproduced by
# test_a_range_operation_delayed_by_a_partition_lands_after_resync: a
# CHUNK_TRUNCATE/REMOVE sent to a partitioned host stayed in TCP
# retransmission after its sender gave up, and landed after the host's
# targets rejoined and resynced. Range operations now carry the chain
# version, so such a request is -ESTALE there and changes nothing.


def file_read_from(mh, server, directory):
    """A one-chunk file of directory whose reads go to server's member of
    its chain (src/client/storage_read.c: pick_replica starts at (inode +
    chunk) % 251). The files tried before it stay: removing them would
    leave the collector's removals in flight while members are compared."""
    mine = mh.targets_of(server)
    chains = {c["id"]: c["targets"] for c in mh.chains()}
    for i in range(400):
        path = os.path.join(directory, f"on-{server}-{i}")
        with open(path, "wb") as f:
            f.write(os.urandom(4096))
        ino, on = layout_of(path)
        members = chains.get(on[0], [])
        if members and members[(ino % 251) % len(members)] in mine:
            return path
    raise AssertionError(f"no file read from {server}")


def check_rejoined(mh, server, stable):
    """server's targets serve in full chains again, hold exactly what the
    other members of their chains hold, and serve reads."""
    assert wait_until(mh.whole, timeout=FULL), mh.status()
    assert differences(mh, server) == []
    before = chunk_reads(mh, server)
    # Reads reach server only for a chunk on one of its chains whose
    # replica (picked by inode + chunk among the chain's members) is its
    # member: the stable files may have none (placement is the client's or
    # kvc-meta's and the table may have grown), so one such file is made.
    paths = list(stable) + [file_read_from(mh, server, os.path.dirname(next(iter(stable))))]

    def read_all():
        for path in paths:
            read_direct(path)
        return chunk_reads(mh, server) > before
    assert wait_until(read_all, timeout=60, step=0.5), f"{server} serves no reads"


# -- the tests -----------------------------------------------------------

def test_the_cluster_is_whole(mh):
    st = mh.status()
    assert len(st["chains"]) == CHAINS and st["routing_version"] >= 1
    assert {server_of(t) for ch in st["chains"] for t in ch["targets"]} == set(STORAGE)
    assert mh.leaders() == 1
    assert mh.etcd_leader() in ETCDS
    for url in mh.etcd.values():
        assert http_json(url + "/health")["health"] == "true"


@pytest.mark.parametrize("how,victim", [("kill", "s3"), ("cut", "s2"), ("freeze", "s4")])
def test_a_lost_storage_host_leaves_its_chains_and_returns(mh, workdir, how, victim):
    stable = stable_files(workdir, 8, seed=1)
    lost = targets_of(victim)
    before = mh.status()["routing_version"]
    with Load(writer_dirs(workdir), stable) as load:
        assert load.wait_writes(4)
        if how == "kill":
            mh.kill(victim)
        elif how == "cut":
            mh.net.cut(victim, False)
        else:
            mh.kill(victim, signal.SIGSTOP)
        assert wait_until(lambda: not (lost & set(mh.members())), timeout=DETECT), \
            "the manager did not take the lost host's targets out"
        assert load.wait_writes(6), "writes did not go on after the host left its chains"
        if how == "kill":
            mh.start(victim)
        elif how == "cut":
            mh.net.cut(victim, True)
        else:
            mh.kill(victim, signal.SIGCONT)
        # back at the tails of their chains (catching up) while writes go on
        assert wait_until(lambda: lost <= set(mh.members()), timeout=DETECT)
        assert load.wait_writes(4)
    check_load(load)
    assert mh.status()["routing_version"] > before
    check_rejoined(mh, victim, stable)


def test_a_range_operation_delayed_by_a_partition_lands_after_resync(mh, workdir):
    """The cut case's rare failure, made likely: the connection to the
    host is warm (kvc-meta's when the host's target is its chain's head,
    the member before it's otherwise: range operations come down the
    chain), a truncate to 0 is sent while the host is cut off (the sender
    times out, the manager takes the host out, the truncate is done on
    the other members), the file is written again, and the link comes
    back about when the truncate's next TCP retransmission is due after
    resync is over. The host's target must keep the new chunk."""
    victim = "s5"
    target = min(targets_of(victim))
    chain = next(ch for ch in mh.chains() if target in ch["targets"])
    path = files_on_chain(workdir, chain["id"], 1, "late")[0]
    data = os.urandom(100000)
    write_file(path, data)
    os.truncate(path, 50000)  # warms the connections down the chain
    write_file(path, data)
    mh.net.cut(victim, False)
    cut = time.monotonic()
    os.truncate(path, 0)  # stuck on its way to the host, done elsewhere
    assert target not in mh.members()
    write_file(path, data)
    time.sleep(max(0, cut + 4 - time.monotonic()))
    mh.net.cut(victim, True)
    assert wait_until(mh.whole, timeout=FULL), mh.status()
    # the stale truncate's retransmissions come within ~13 s of the cut
    wait_until(lambda: differences(mh, victim), timeout=20, step=1)
    _drop_caches()
    for _ in range(6):  # reads may be served by any member
        got = read_direct(path)
        assert got == data, f"{len(got)} bytes, {got.count(0)} zero"
    assert differences(mh, victim) == []


def files_on_chain(directory, chain, count, prefix):
    """count empty files whose first chunk lives on chain."""
    found = []
    for i in range(200):
        path = os.path.join(directory, f"{prefix}{i}")
        open(path, "wb").close()
        if layout_of(path)[1][0] == chain:
            found.append(path)
            if len(found) == count:
                return found
        else:
            os.unlink(path)
    raise AssertionError(f"no {count} files on chain {chain}")


@pytest.mark.parametrize("end", ["head", "tail"])
def test_losing_the_head_or_tail_of_a_busy_chain(mh, workdir, end):
    chain = mh.chains()[1]
    target = chain["targets"][0 if end == "head" else -1]
    victim = server_of(target)
    # two writers whose files' first chunks (all of a small one) are on it
    paths = files_on_chain(workdir, chain["id"], 6, "busy")
    stable = stable_files(workdir, 6, seed=2)
    with Load([paths[:3], paths[3:]], stable, sizes=(4096, 70000, CHUNK)) as load:
        assert load.wait_writes(4)
        mh.kill(victim)
        assert wait_until(lambda: target not in mh.members(), timeout=DETECT)
        now = next(ch for ch in mh.chains() if ch["id"] == chain["id"])
        assert len(now["targets"]) == REPLICAS - 1 and now["version"] > chain["version"]
        assert load.wait_writes(6), "writes to the chain did not go on"
        mh.start(victim)
        assert wait_until(lambda: target in mh.members(), timeout=DETECT)
        assert load.wait_writes(4)
    check_load(load)
    check_rejoined(mh, victim, stable)


def test_two_of_three_replicas_lost(mh, workdir):
    chain = mh.chains()[2]
    gone = [server_of(t) for t in chain["targets"][:2]]  # the head and the middle
    survivor = chain["targets"][2]
    gone_targets = targets_of(gone[0]) | targets_of(gone[1])
    # a chain that keeps two members or more
    other = next(ch for ch in mh.chains()
                 if len(set(ch["targets"]) & gone_targets) <= 1)
    on_chain = files_on_chain(workdir, chain["id"], 4, "x")
    on_other = files_on_chain(workdir, other["id"], 2, "y")
    acked = {}
    for path in on_chain[:2]:
        data = os.urandom(CHUNK - 99)
        write_file(path, data)
        acked[path] = hashlib.sha256(data).hexdigest()
    stable = {p: (d, CHUNK - 99) for p, d in acked.items()}
    for name in gone:
        mh.kill(name)
    assert wait_until(lambda: next(ch for ch in mh.chains() if ch["id"] == chain["id"])
                      ["targets"] == [survivor], timeout=DETECT), mh.chains()
    # reads of what was acknowledged: from the survivor, no error
    _drop_caches()
    for path, digest in acked.items():
        assert hashlib.sha256(read_direct(path)).hexdigest() == digest
    assert ring_read_all([[p, s] for p, (_, s) in stable.items()]) == acked
    # writes to a chain that kept two members go on
    data = os.urandom(5000)
    write_file(on_other[0], data)
    assert read_direct(on_other[0]) == data
    # writes to the chain left with one member (below min_write_replicas,
    # 2 of 3 by default): a clear error, at once
    with pytest.raises(OSError) as refused:
        write_file(on_chain[2], os.urandom(6000))
    assert refused.value.errno == errno.EROFS, refused.value
    # one returns: writes work again (once the chain has enough members)
    mh.start(gone[0])

    def writable():
        payload = os.urandom(7000)
        try:
            write_file(on_chain[3], payload)
        except OSError:
            return False
        acked[on_chain[3]] = hashlib.sha256(payload).hexdigest()
        return True
    assert wait_until(writable, timeout=FULL, step=1)
    mh.start(gone[1])
    assert wait_until(mh.whole, timeout=FULL), mh.status()
    # nothing acknowledged was lost, and every member holds the same
    _drop_caches()
    for path, digest in acked.items():
        assert hashlib.sha256(read_direct(path)).hexdigest() == digest, path
    now = next(ch for ch in mh.chains() if ch["id"] == chain["id"])
    first = listing(mh, now["targets"][0])
    for t in now["targets"][1:]:
        assert listing(mh, t) == first, t


def test_killing_the_leading_manager_costs_no_client_an_error(mh, workdir):
    stable = stable_files(workdir, 6, seed=3)
    first = mh.leader()
    assert first in MANAGERS
    with Load(writer_dirs(workdir), stable) as load:
        assert load.wait_writes(4)
        mh.kill(first)
        other = next(m for m in MANAGERS if m != first)
        assert wait_until(lambda: mh.leader() == other, timeout=30), "no other manager leads"
        assert load.wait_writes(6)
        mh.start(first)  # it stands by
        assert wait_until(lambda: mh.leaders() == 1, timeout=30)
        assert load.wait_writes(2)
    check_load(load)
    assert mh.leader() == other


def test_killing_an_etcd_member_goes_unnoticed(mh, workdir):
    stable = stable_files(workdir, 6, seed=4)
    victim = mh.etcd_leader()  # the member that matters most
    assert victim in ETCDS
    with Load(writer_dirs(workdir), stable) as load:
        assert load.wait_writes(4)
        mh.kill(victim)
        assert wait_until(lambda: mh.etcd_leader() not in (None, victim), timeout=30), \
            "the two etcd members left elected no leader"
        assert load.wait_writes(6)
        # the managers keep working on two members: a storage host that
        # dies still leaves its chains, and comes back
        before = mh.status()["routing_version"]
        lost = targets_of("s5")
        mh.kill("s5")
        assert wait_until(lambda: not (lost & set(mh.members())), timeout=DETECT), \
            "with one etcd member down the manager no longer moves chains"
        assert mh.status()["routing_version"] > before
        assert load.wait_writes(6)
        mh.start("s5")
        assert wait_until(lambda: lost <= set(mh.members()), timeout=DETECT)
    check_load(load)
    assert mh.leaders() == 1
    check_rejoined(mh, "s5", stable)


def fuse_metric(address, name):
    return scrape(address).get(name, 0)


def test_a_partitioned_client_refreshes_its_stale_table(mh, workdir):
    """A second kvc-fuse on the client host `cl`, cut off while a storage
    host dies and comes back (every chain of that host changes version
    twice). When its link returns, the managers are still out of its reach
    (unreachable routes in its namespace, from before the cut to after),
    so its first I/O meets the servers' -ESTALE: it retries
    (kvc_fuse_routing_retries_total), and once it can refresh its table,
    carries on with no error (its pooled connection to the restarted
    server resets under its first request: sent again on a new one)."""
    conf2 = os.path.join(mh.base, "client.conf")
    metrics2 = f"{mh.net.ip['cl']}:{PORT + 10}"
    mh.write_config(conf2, metrics2)
    mount2 = tempfile.mkdtemp(prefix="kvc-mhc-mnt2-")
    mh.spawn("fuse2", "cl", [BUILD / "kvc-fuse", "--config", conf2, "--mountpoint", mount2,
                             *(["--verbose"] if os.environ.get("KVC_MHC_VERBOSE") else [])])
    proc = mh.procs["fuse2"]
    try:
        assert wait_until(lambda: os.path.ismount(mount2) or proc.poll() is not None,
                          timeout=30) and proc.poll() is None
        d2 = os.path.join(mount2, os.path.basename(workdir))
        victim = "s4"
        lost = targets_of(victim)
        changed = {ch["id"] for ch in mh.chains() if lost & set(ch["targets"])}
        # files through the client's mount, on chains that will change
        files = {}
        for chain in sorted(changed)[:2]:
            for path in files_on_chain(d2, chain, 2, f"c{chain}-"):
                data = os.urandom(CHUNK // 2)
                write_file(path, data)
                files[path] = data
        fresh = files_on_chain(d2, sorted(changed)[0], 1, "fresh")[0]
        known = fuse_metric(metrics2, "kvc_fuse_routing_version")
        # The managers out of its reach first, and long enough that no
        # long poll it sent before is still to be answered (they are
        # answered within io_timeout / 2 when nothing changes): no new
        # table can reach it until the routes go.
        mh.net.unreachable("cl", mh.manager_ips(), on=True)
        time.sleep(2.5)
        mh.net.cut("cl", False)
        mh.kill(victim)
        assert wait_until(lambda: not (lost & set(mh.members())), timeout=DETECT)
        mh.start(victim)
        assert wait_until(lambda: lost <= set(mh.members()), timeout=DETECT)
        current = mh.status()["routing_version"]
        assert current > known
        mh.net.cut("cl", True)
        assert fuse_metric(metrics2, "kvc_fuse_routing_version") == known
        retries = fuse_metric(metrics2, "kvc_fuse_routing_retries_total")
        errors = []

        def io():
            try:
                data = os.urandom(CHUNK // 3)
                write_file(fresh, data)
                files[fresh] = data
                for path, data in list(files.items()):
                    if read_direct(path) != data:
                        errors.append(f"{path}: wrong bytes")
            except OSError as e:
                errors.append(f"{e}")
        worker = threading.Thread(target=io)
        worker.start()
        met_stale = wait_until(
            lambda: fuse_metric(metrics2, "kvc_fuse_routing_retries_total") > retries,
            timeout=4)
        mh.net.unreachable("cl", mh.manager_ips(), on=False)
        worker.join(120)
        assert errors == []
        assert met_stale, "the stale client's I/O was not refused and retried"
        assert wait_until(lambda: fuse_metric(metrics2, "kvc_fuse_routing_version")
                          >= current, timeout=30)
        # and it carries on: both mounts see the same bytes
        _drop_caches()
        for path, data in files.items():
            assert read_direct(path) == data
            assert read_direct(os.path.join(workdir, os.path.basename(path))) == data
        # Cut off again while the storage host restarts; this time the
        # table reaches it before any I/O. Its pooled connections to the
        # host died unseen: the first sync (sent to every member) meets a
        # reset and must be sent again, not wait for a table change.
        mh.net.cut("cl", False)
        mh.kill(victim)
        assert wait_until(lambda: not (lost & set(mh.members())), timeout=DETECT)
        mh.start(victim)
        assert wait_until(lambda: lost <= set(mh.members()), timeout=DETECT)
        current = mh.status()["routing_version"]
        mh.net.cut("cl", True)
        assert wait_until(lambda: fuse_metric(metrics2, "kvc_fuse_routing_version")
                          >= current, timeout=30)
        for path in list(files)[:2]:
            data = os.urandom(CHUNK // 4)
            write_file(path, data)
            assert read_direct(path) == data
    finally:
        mh.net.unreachable("cl", mh.manager_ips(), on=False)
        mh.net.cut("cl", True)
        sh("fusermount3", "-uz", mount2, check=False)
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        os.rmdir(mount2)


def host_metrics(mh):
    """(admitted, pending, spare targets) on the leading manager's metrics."""
    leader = mh.leader()
    m = scrape(mh.manager_metrics[MANAGERS.index(leader)])
    return (m['kvc_mgmt_hosts{state="admitted"}'], m['kvc_mgmt_hosts{state="pending"}'],
            m["kvc_mgmt_spare_targets"])


def test_hosts_added_at_replicas_3(mh, workdir):
    """Three hosts added to the running cluster (kvc-storage --join in
    namespaces of their own, cluster files naming only the managers,
    kvc-meta and their own section; kvc-admin add-host): nothing changes
    while they are pending; once admitted their targets make new chains of
    three members on the new hosts, new files stripe over them and land on
    their disks; one of them killed, its chains' other members serve; it
    restarts without --join from its own-section file under the same ids,
    catches up, and its chains are full again. Old files read unchanged
    throughout. Runs last: the module's cluster keeps the added hosts."""
    old = stable_files(workdir, 4, seed=6)
    before = mh.status()
    assert host_metrics(mh) == (len(STORAGE), 0, 0)
    for j in JOINERS:
        mh.join(j)

    def pending():
        hosts = mh.status().get("hosts", [])
        return {h["name"] for h in hosts if h["state"] == "pending"} == set(JOINERS)
    assert wait_until(pending, timeout=30), mh.status()
    # pending: the table does not change
    st = mh.status()
    assert st["chains"] == before["chains"] and st["routing_version"] == before["routing_version"]
    assert [h["name"] for h in st["hosts"] if h["state"] == "admitted"] == STORAGE
    assert host_metrics(mh) == (len(STORAGE), len(JOINERS), 0)

    for k, j in enumerate(JOINERS):
        out = mh.admin("--json", "add-host", j)
        assert out.returncode == 0, out.stderr
        answer = json.loads(out.stdout)
        assert answer["added"] and answer["server"] == len(STORAGE) + k
        assert answer["first_target"] == (len(STORAGE) + k) * TARGETS
        mh.admitted(j)
    new_targets = set().union(*(mh.targets_of(j) for j in JOINERS))
    mh.chain_count = CHAINS + len(new_targets) // REPLICAS
    assert wait_until(mh.whole, timeout=60), mh.status()
    st = mh.status()
    grown = [ch for ch in st["chains"] if set(ch["targets"]) & new_targets]
    assert len(grown) == len(new_targets) // REPLICAS
    for ch in grown:  # three members, each on another new host
        assert set(ch["targets"]) <= new_targets
        assert sorted(mh.server_of(t) for t in ch["targets"]) == JOINERS
    # the old chains kept their members and versions
    assert st["chains"][:CHAINS] == before["chains"]
    assert [s["name"] for s in st["storage"]] == STORAGE + JOINERS
    assert st["spare_targets"] == []
    assert host_metrics(mh) == (len(STORAGE) + len(JOINERS), 0, 0)

    # New files through the root namespace's kvc-fuse: kvc-meta stripes
    # them over the grown table; those whose first chunk is on a new chain
    # put a chunk file on each of its members' disks.
    assert all(chunk_files(f"{mh.base}/{j}/t{t}") == [] for j in JOINERS
               for t in range(TARGETS))
    new, on_new, outage = {}, [], []
    for ch in grown:
        paths = files_on_chain(workdir, ch["id"], 4, f"n{ch['id']}-")
        on_new.append(paths[2])
        outage.append(paths[3])
        for path in paths[:2]:
            data = os.urandom(2 * CHUNK + 77)
            write_file(path, data)
            new[path] = (hashlib.sha256(data).hexdigest(), len(data))
    for ch in grown:
        for t in ch["targets"]:
            j = mh.server_of(t)
            files = chunk_files(f"{mh.base}/{j}/t{t - min(mh.targets_of(j))}")
            assert len(files) >= 2, (ch, t, files)
    _drop_caches()
    for path, (digest, _) in {**old, **new}.items():
        assert hashlib.sha256(read_direct(path)).hexdigest() == digest, path
    assert ring_read_all([[p, size] for p, (_, size) in new.items()]) == \
        {p: digest for p, (digest, _) in new.items()}

    # One new host killed under load (writers on the new chains, readers of
    # old and new files through FUSE, O_DIRECT and rings): no error; it
    # restarts without --join and rejoins under the same ids.
    victim = JOINERS[1]
    lost = mh.targets_of(victim)
    index = mh.hosts.index(victim)

    def copied():
        m = scrape(mh.storage_metrics[index])
        return sum(v for k, v in m.items()
                   if k.startswith("kvc_storage_resync_chunks_copied_total"))
    with Load([on_new[:len(on_new) // 2], on_new[len(on_new) // 2:]], {**old, **new}) as load:
        assert load.wait_writes(4)
        mh.kill(victim)
        assert wait_until(lambda: not (lost & set(mh.members())), timeout=DETECT), \
            "the manager did not take the new host's targets out"
        assert load.wait_writes(6), "writes to the new chains did not go on"
        for path in outage:  # chunks the victim misses: resync copies them
            data = os.urandom(CHUNK + 55)
            write_file(path, data)
            new[path] = (hashlib.sha256(data).hexdigest(), len(data))
        assert "--join" not in mh.argv[victim]
        mh.start(victim)
        assert wait_until(lambda: lost <= set(mh.members()), timeout=DETECT)
        assert load.wait_writes(4)
    check_load(load)
    i = index
    log = open(os.path.join(mh.base, f"{victim}.log")).read()
    assert f"member: server {i}, targets {i * TARGETS}..{i * TARGETS + TARGETS - 1}" in log
    check_rejoined(mh, victim, {**old, **new})
    assert copied() >= len(outage)
    _drop_caches()
    for path, (digest, _) in old.items():
        assert hashlib.sha256(read_direct(path)).hexdigest() == digest, path
