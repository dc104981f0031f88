"""The cluster manager (kvc-mgmt over etcd): five storage servers of three
targets, replicas 3, two managers and a local etcd. A storage server
killed or frozen during a read/write load through the mount leaves its
chains (versions up) within the failure timeout: reads see no error,
writes stall at most that long and go on, and every acknowledged byte is
there afterwards. A server that returns rejoins its chains at the tail,
catching up. Killing the leading manager under load costs no client an
error, and another manager leads."""
import errno
import hashlib
import json
import os
import random
import signal
import subprocess
import threading
import time

import pytest

from conftest import CHUNK, PORT_BASE, _drop_caches, wait_until, chained_cluster
from chain_helpers import layout_of, listing, members, scrape, status, targets_of_server

SERVERS, TARGETS, REPLICAS = 5, 3, 3


@pytest.fixture(scope="module")
def mcluster():
    with chained_cluster("mgmt", PORT_BASE + 800, PORT_BASE + 8800, SERVERS, REPLICAS, TARGETS,
                         managers=2) as c:
        yield c


class Load:
    """Writers and readers through the mount: each writer rewrites its
    files with fresh bytes (fsync) and records what was acknowledged;
    readers read back the last acknowledged bytes of finished files."""

    def __init__(self, directory, writers=2, files=6):
        self.dir = directory
        self.stop = threading.Event()
        self.acked = {}
        self.lock = threading.Lock()
        self.errors = []
        self.write_stalls = []
        self.threads = [threading.Thread(target=self.writer, args=(w, files))
                        for w in range(writers)]
        self.threads.append(threading.Thread(target=self.reader))

    def writer(self, w, files):
        rng = random.Random(w)
        while not self.stop.is_set():
            path = self.dir / f"w{w}-{rng.randrange(files)}"
            data = rng.randbytes(rng.choice([4096, 70000, CHUNK + 123, 2 * CHUNK]))
            start = time.monotonic()
            try:
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                self.errors.append(f"write {path}: {e}")
                continue
            self.write_stalls.append(time.monotonic() - start)
            with self.lock:
                self.acked[path] = hashlib.sha256(data).hexdigest()

    def reader(self):
        while not self.stop.is_set():
            with self.lock:
                items = list(self.acked.items())
            # Files are rewritten meanwhile, so their bytes are checked once
            # the load stops (verify); here reads must only never fail.
            for path, _ in items:
                try:
                    with open(path, "rb") as f:
                        f.read()
                except OSError as e:
                    self.errors.append(f"read {path}: {e}")
            time.sleep(0.05)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(120)

    def verify(self):
        _drop_caches()
        for path, digest in self.acked.items():
            with open(path, "rb") as f:
                assert hashlib.sha256(f.read()).hexdigest() == digest, path


def test_chains_come_from_the_managers(mcluster):
    st = status(mcluster)
    assert st["routing_version"] >= 1
    assert len(st["chains"]) == SERVERS * TARGETS // REPLICAS
    text = mcluster.admin("status").stdout
    assert "from the managers" in text
    # The cluster's state in etcd names kvc-meta too.
    out = subprocess.run(["etcdctl", f"--endpoints={mcluster.etcd}", "get", "/kvcfs/meta",
                          "--print-value-only"], capture_output=True, text=True, timeout=20,
                         env={**os.environ, "ETCDCTL_API": "3"})
    assert out.returncode == 0 and out.stdout.strip() == mcluster.meta_address


@pytest.mark.parametrize("how", ["kill", "freeze"])
def test_a_lost_server_leaves_its_chains_and_returns(mcluster, how):
    d = mcluster.mount / f"lost-{how}"
    d.mkdir()
    victim = "s3"
    lost = targets_of_server(victim)
    before = status(mcluster)["routing_version"]
    with Load(d) as load:
        wait_until(lambda: len(load.acked) >= 4, timeout=60)
        if how == "kill":
            os.kill(mcluster.pid(victim), signal.SIGKILL)
        else:
            os.kill(mcluster.pid(victim), signal.SIGSTOP)
        # the manager takes the server's targets out of their chains
        assert wait_until(lambda: not (lost & set(members(mcluster))), timeout=30)
        written = len(load.write_stalls)
        # and writes go on
        assert wait_until(lambda: len(load.write_stalls) >= written + 6, timeout=60)
        if how == "kill":
            mcluster.restart(victim)
        else:
            os.kill(mcluster.pid(victim), signal.SIGCONT)
        # back, at the tail of their chains, catching up
        assert wait_until(lambda: lost <= set(members(mcluster)), timeout=30)
        time.sleep(1)
    assert load.errors == []
    # no write waited much longer than detection (1.5 s) plus a retry
    assert max(load.write_stalls) < 30
    assert status(mcluster)["routing_version"] > before
    load.verify()
    # the returning targets catch up (resync from the member before them)
    # and serve reads again
    assert wait_until(lambda: all(members(mcluster)[t][1] for t in lost), timeout=60)
    # and each holds exactly what the other members of its chain hold
    for ch in status(mcluster)["chains"]:
        for t in lost & set(ch["targets"]):
            other = next(m for m in ch["targets"] if m not in lost)
            assert listing(mcluster, t) == listing(mcluster, other), (t, other)


def test_killing_the_leading_manager_costs_no_client_an_error(mcluster):
    d = mcluster.mount / "leader"
    d.mkdir()
    logs = mcluster.dir / "logs"

    def leader():
        for m in ("m1", "m2"):
            text = (logs / f"{m}.log").read_text()
            if text.rfind("leading:") > text.rfind("no longer leading"):
                return m
        return None

    def elections():
        return sum((logs / f"{m}.log").read_text().count("leading:") for m in ("m1", "m2"))

    first = leader()
    assert first in ("m1", "m2")
    held = elections()
    with Load(d) as load:
        wait_until(lambda: len(load.acked) >= 4, timeout=60)
        # kill -9, then start again: once the dead one's lease runs out,
        # one of the two leads (the restarted one may win)
        mcluster.restart(first)
        assert wait_until(lambda: elections() > held and leader() is not None, timeout=30)
        n = len(load.write_stalls)
        assert wait_until(lambda: len(load.write_stalls) >= n + 6, timeout=60)
    assert load.errors == []
    load.verify()
    # the new leader still follows failures: the table is served
    assert status(mcluster)["routing_version"] >= 1


def test_routing_metrics(mcluster):
    """After the failures above: the clients' routing version moved past
    the cluster file's, each chain's version and members are there, and
    one manager leads, taking heartbeats, with no server silent."""
    version = status(mcluster)["routing_version"]
    for address, prefix in [(mcluster.fuse_metrics, "kvc_fuse"),
                            (mcluster.storage_metrics[0], "kvc_storage")]:
        m = scrape(address)
        assert wait_until(lambda: scrape(address)[f"{prefix}_routing_version"] >= version,
                          timeout=20)
        for ch in status(mcluster)["chains"]:
            assert m[f'{prefix}_chain_members{{chain="{ch["id"]}"}}'] >= 1
            assert f'{prefix}_chain_version{{chain="{ch["id"]}"}}' in m
    fuse = scrape(mcluster.fuse_metrics)
    # what the lost servers cost kvc-fuse (how much depends on what the
    # load met in the window: the page cache answers many reads)
    assert fuse["kvc_fuse_routing_retries_total"] >= 0
    assert fuse["kvc_fuse_replica_retries_total"] >= 0
    managers = [scrape(a) for a in mcluster.manager_metrics]
    assert sum(m["kvc_mgmt_leader"] for m in managers) == 1
    leader = next(m for m in managers if m["kvc_mgmt_leader"] == 1)
    assert leader["kvc_mgmt_heartbeats_total"] > 0
    assert leader["kvc_mgmt_routing_version"] == version
    assert leader["kvc_mgmt_servers_silent"] == 0


def test_two_of_three_lost_refuse_writes_until_one_returns(mcluster):
    """A chain down to one member (min_write_replicas = 2 of 3) refuses
    writes with EROFS rather than keep a single copy; what it holds still
    reads; once a member is back (catching up) writes go on."""
    d = mcluster.mount / "two-lost"
    d.mkdir()
    chain = status(mcluster)["chains"][0]
    victims = sorted({f"s{t // TARGETS + 1}" for t in chain["targets"][:2]})
    files = {}
    for i in range(10):
        data = os.urandom(4096)
        (d / f"f{i}").write_bytes(data)
        files[d / f"f{i}"] = data
    mine = [p for p in files if layout_of(p)[1][0] == chain["id"]]
    assert mine, "round-robin placement puts a small file on every chain"
    path = mine[0]
    for v in victims:
        os.kill(mcluster.pid(v), signal.SIGKILL)
    restarted = set()
    try:
        assert wait_until(lambda: len(next(c for c in status(mcluster)["chains"]
                                           if c["id"] == chain["id"])["targets"]) == 1,
                          timeout=30)
        with pytest.raises(OSError) as err:
            with open(path, "r+b") as f:
                f.write(b"x" * 100)
                f.flush()
                os.fsync(f.fileno())
        assert err.value.errno == errno.EROFS
        _drop_caches()
        assert path.read_bytes() == files[path]  # the survivor serves it
        mcluster.restart(victims[0])
        restarted.add(victims[0])
        assert wait_until(lambda: len(next(c for c in status(mcluster)["chains"]
                                           if c["id"] == chain["id"])["targets"]) >= 2,
                          timeout=30)
        with open(path, "r+b") as f:
            f.write(b"y" * 100)
            f.flush()
            os.fsync(f.fileno())
        files[path] = b"y" * 100 + files[path][100:]
    finally:
        # (not by signal 0 to its old pid: the number may be another
        # process's by now, pids wrap)
        for v in victims:
            if v not in restarted:
                mcluster.restart(v)
    # every chain full and serving again, nothing lost
    assert wait_until(lambda: all(len(c["targets"]) == REPLICAS and not c["syncing"]
                                  for c in status(mcluster)["chains"]), timeout=90)
    _drop_caches()
    for p, data in files.items():
        assert p.read_bytes() == data, p


def test_drain_and_undrain_a_target(mcluster):
    """kvc-admin drain takes a target out of its chain and keeps it out
    (its server heartbeats on); files stay readable and writable; undrain
    lets it back in, catching up, until it serves; a drain that would take
    a chain's last readable copy is refused."""
    d = mcluster.mount / "drain"
    d.mkdir()
    files = {d / f"f{i}": os.urandom(70000) for i in range(6)}
    for p, data in files.items():
        p.write_bytes(data)
    chain = status(mcluster)["chains"][1]
    target = chain["targets"][0]
    out = json.loads(mcluster.admin("--json", "drain", str(target)).stdout)
    assert out["done"] and out["chain"] == -1
    assert target not in members(mcluster)
    states = {t["id"]: t["state"] for s in status(mcluster)["storage"] for t in s["targets"]}
    assert states[target] == "out"
    assert all(v in ("serving", "syncing", "out") for v in states.values())
    time.sleep(1)  # heartbeats go on: it stays out
    assert target not in members(mcluster)
    for p, data in files.items():
        p.write_bytes(data[::-1])
        files[p] = data[::-1]
    _drop_caches()
    for p, data in files.items():
        assert p.read_bytes() == data
    # the last readable copy of a chain cannot be drained
    left = [t for t in next(c for c in status(mcluster)["chains"]
                            if c["id"] == chain["id"])["targets"]]
    out = mcluster.admin("drain", str(left[0]), check=False)
    assert out.returncode == 0  # two left: one may go
    refused = mcluster.admin("drain", str(left[1]), check=False)
    assert refused.returncode == 1 and "last member serving reads" in refused.stderr
    for t in (left[0], target):
        back = json.loads(mcluster.admin("--json", "undrain", str(t)).stdout)
        assert back["done"] and back["serving"]
    assert wait_until(lambda: all(len(c["targets"]) == REPLICAS and not c["syncing"]
                                  for c in status(mcluster)["chains"]), timeout=60)
    _drop_caches()
    for p, data in files.items():
        assert p.read_bytes() == data
    assert "drain" in mcluster.admin("drain", "--help").stdout
