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
"""
import errno
import hashlib
import json
import mmap
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid

import pytest

import kvcwire
from conftest import BUILD, CHUNK, PORT_BASE, _drop_caches, wait_until
from test_manager import scrape
from test_replication import layout_of, ring_read_all
from test_resync import listing

PORT = PORT_BASE + 400  # kvc-meta; storage +1 (metrics +11), fuse metrics +10,
ETCD = PORT + 50        # etcd client (peer +1), managers +61 (metrics +71)
SUBNET = f"10.78.{(PORT_BASE // 100) % 200 + 20}"
STORAGE = [f"s{i}" for i in range(1, 6)]
CONTROL = ["x1", "x2", "x3"]
TARGETS, REPLICAS = 3, 3
CHAINS = len(STORAGE) * TARGETS // REPLICAS
ETCDS = ["e1", "e2", "e3"]
MANAGERS = ["m1", "m2"]
HOST_OF = {"e1": "x1", "e2": "x2", "e3": "x3", "m1": "x1", "m2": "x2", "meta": "x3",
           **{s: s for s in STORAGE}}
DETECT = 30  # s: bound for the manager to take a silent server out (1.5 s)
FULL = 120   # s: bound for a returning server's targets to be caught up


def sh(*args, check=True):
    return subprocess.run([str(a) for a in args], check=check, capture_output=True,
                          text=True, timeout=30)


class Net:
    """The bridge and one namespace per host (host name -> ip, veth)."""

    def __init__(self):
        tag = uuid.uuid4().hex[:4]
        self.bridge = f"kvcbr{tag}"
        names = STORAGE + CONTROL + ["cl"]
        last = {**{s: 10 + i for i, s in enumerate(STORAGE, 1)},
                **{x: 20 + i for i, x in enumerate(CONTROL, 1)}, "cl": 31}
        self.ns = {h: f"kvc{tag}{h}" for h in names}
        self.veth = {h: f"kvc{tag}v{h}" for h in names}
        self.ip = {h: f"{SUBNET}.{last[h]}" for h in names}
        self.made = []

    def up(self):
        if sh("ip", "-4", "route", "show", f"{SUBNET}.0/24").stdout.strip():
            pytest.skip(f"{SUBNET}.0/24 is in use on this machine")
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        self.made.append(self.bridge)
        sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for h in self.ns:
            ns, link = self.ns[h], self.veth[h]
            sh("ip", "netns", "add", ns)
            self.made.append(h)
            sh("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", link, "master", self.bridge, "up")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip[h]}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def down(self):
        for h in self.made[1:]:
            sh("ip", "link", "del", self.veth[h], check=False)
            sh("ip", "netns", "del", self.ns[h], check=False)
        if self.made:
            sh("ip", "link", "del", self.bridge, check=False)

    def cut(self, host, connected):
        sh("ip", "link", "set", self.veth[host], "up" if connected else "down")

    def unreachable(self, host, ips, on):
        """Routes in host's namespace that make ips unreachable (or not)."""
        for ip in ips:
            sh("ip", "-n", self.ns[host], "route", "add" if on else "del", "unreachable",
               f"{ip}/32", check=on)


def reachable(address):
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
        return True
    except OSError:
        return False


def http_json(url, body=None):
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(url, data=data, timeout=3) as r:
        return json.loads(r.read())


class MultiHost:
    def __init__(self, net, base, mount):
        self.net, self.base, self.mount = net, base, mount
        self.conf = os.path.join(base, "cluster.conf")
        self.secret_file = os.path.join(base, "secret")
        ip = net.ip
        self.meta = f"{ip['x3']}:{PORT}"
        self.storage_addresses = [f"{ip[s]}:{PORT + 1}" for s in STORAGE]
        self.storage_metrics = [f"{ip[s]}:{PORT + 11}" for s in STORAGE]
        self.etcd = {e: f"http://{ip[HOST_OF[e]]}:{ETCD}" for e in ETCDS}
        self.manager_addresses = [f"{ip[HOST_OF[m]]}:{PORT + 61}" for m in MANAGERS]
        self.manager_metrics = [f"{ip[HOST_OF[m]]}:{PORT + 71}" for m in MANAGERS]
        self.fuse_metrics = f"127.0.0.1:{PORT + 10}"
        self.procs, self.argv = {}, {}

    # -- configuration and daemons --------------------------------------

    def write_config(self, path, fuse_metrics):
        servers = "".join(
            f"\n[storage {s}]\naddress = {a}\nmetrics = {m}\n" +
            "".join(f"target = {self.base}/{s}/t{t}\n" for t in range(TARGETS))
            for s, a, m in zip(STORAGE, self.storage_addresses, self.storage_metrics))
        managers = "".join(f"\n[mgmt {n}]\naddress = {a}\nmetrics = {m}\n" for n, a, m in
                           zip(MANAGERS, self.manager_addresses, self.manager_metrics))
        with open(path, "w") as f:
            f.write(f"secret_file = {self.secret_file}\nchunk_size = {CHUNK}\nstripe = 3\n"
                    f"replicas = {REPLICAS}\netcd = {','.join(self.etcd.values())}\n"
                    "heartbeat_ms = 200\nfailure_timeout_ms = 1500\n"
                    "connect_timeout_ms = 1000\nio_timeout_ms = 2000\n\n"
                    f"[meta]\naddress = {self.meta}\ndata = {self.base}/meta\nhttp = off\n"
                    f"{servers}{managers}\n[fuse]\nmountpoint = {self.mount}\n"
                    f"metrics = {fuse_metrics}\n")

    def configure(self):
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(32).hex().encode() + b"\n")
        os.close(fd)
        self.write_config(self.conf, self.fuse_metrics)
        peers = ",".join(f"{e}=http://{self.net.ip[HOST_OF[e]]}:{ETCD + 1}" for e in ETCDS)
        for e in ETCDS:
            ip = self.net.ip[HOST_OF[e]]
            self.argv[e] = [
                "etcd", "--name", e, "--data-dir", f"{self.base}/{e}",
                "--listen-client-urls", f"http://{ip}:{ETCD}",
                "--advertise-client-urls", f"http://{ip}:{ETCD}",
                "--listen-peer-urls", f"http://{ip}:{ETCD + 1}",
                "--initial-advertise-peer-urls", f"http://{ip}:{ETCD + 1}",
                "--initial-cluster", peers, "--initial-cluster-state", "new",
                "--initial-cluster-token", f"kvc-{self.net.bridge}",
                "--logger", "zap", "--log-outputs", "stderr"]
        for m in MANAGERS:
            self.argv[m] = [BUILD / "kvc-mgmt", "--config", self.conf, "--name", m]
        self.argv["meta"] = [BUILD / "kvc-meta", "--config", self.conf]
        for s in STORAGE:
            self.argv[s] = [BUILD / "kvc-storage", "--config", self.conf, "--name", s]
        self.argv["fuse"] = [BUILD / "kvc-fuse", "--config", self.conf]

    def spawn(self, name, host, argv):
        log = open(os.path.join(self.base, f"{name}.log"), "ab")
        prefix = ["nsenter", f"--net=/run/netns/{self.net.ns[host]}"] if host else []
        self.procs[name] = subprocess.Popen(prefix + [str(a) for a in argv], stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def start(self, name, wait=True):
        if name == "fuse":
            sh("fusermount3", "-uz", self.mount, check=False)
        self.spawn(name, HOST_OF.get(name), self.argv[name])
        if wait:
            self.wait_ready(name)

    def address_of(self, name):
        if name in STORAGE:
            return self.storage_addresses[STORAGE.index(name)]
        if name in MANAGERS:
            return self.manager_addresses[MANAGERS.index(name)]
        return self.meta

    def wait_ready(self, name):
        proc = self.procs[name]
        if name in ETCDS:
            def ready():
                try:
                    return http_json(self.etcd[name] + "/health")["health"] == "true"
                except (OSError, ValueError, KeyError):
                    return False
        elif name == "fuse":
            def ready():
                return os.path.ismount(self.mount)
        else:
            def ready():
                return reachable(self.address_of(name))
        assert wait_until(lambda: ready() or proc.poll() is not None, timeout=30) and \
            proc.poll() is None, f"{name} did not start; see {self.base}/{name}.log"

    def kill(self, name, sig=signal.SIGKILL):
        proc = self.procs[name]
        os.kill(proc.pid, sig)
        if sig == signal.SIGKILL:
            proc.wait(timeout=30)

    def start_all(self):
        self.configure()
        for e in ETCDS:  # members wait for each other: start all, then check
            self.start(e, wait=False)
        for e in ETCDS:
            self.wait_ready(e)
        for name in MANAGERS + ["meta"] + STORAGE + ["fuse"]:
            self.start(name)
        assert wait_until(self.whole, timeout=60), self.status()

    def stop_all(self):
        sh("fusermount3", "-uz", self.mount, check=False)
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.kill()
            proc.wait(timeout=30)

    def heal(self):
        """Whatever a test broke, made whole again: links up, no blocked
        routes, stopped daemons continued, dead ones started, every chain
        full (three members, none catching up) and etcd healthy."""
        for host in self.net.ns:
            self.net.cut(host, True)
        self.net.unreachable("cl", self.manager_ips(), on=False)
        for name in ETCDS + MANAGERS + ["meta"] + STORAGE + ["fuse"]:
            proc = self.procs[name]
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
            else:
                self.start(name, wait=name not in ETCDS)
        for e in ETCDS:
            self.wait_ready(e)
        assert wait_until(self.whole, timeout=FULL), self.status()
        assert wait_until(lambda: self.leaders() == 1, timeout=30)

    def manager_ips(self):
        return [self.net.ip[HOST_OF[m]] for m in MANAGERS]

    # -- what the cluster says -----------------------------------------

    def admin(self, *args):
        return subprocess.run([str(BUILD / "kvc-admin"), "--config", self.conf, *args],
                              capture_output=True, text=True, timeout=60)

    def status(self):
        try:
            return json.loads(self.admin("--json", "status").stdout)
        except ValueError:
            return {}

    def chains(self):
        return self.status().get("chains", [])

    def whole(self):
        chains = self.chains()
        return len(chains) == CHAINS and all(
            len(ch["targets"]) == REPLICAS and not ch["syncing"] for ch in chains)

    def members(self):
        """target -> (chain id, serving reads?)"""
        return {t: (ch["id"], t not in ch["syncing"])
                for ch in self.chains() for t in ch["targets"]}

    def secret(self):
        return kvcwire.read_secret(self.secret_file)

    def leaders(self):
        """Managers that say they lead (kvc_mgmt_leader)."""
        n = 0
        for address in self.manager_metrics:
            try:
                n += int(scrape(address).get("kvc_mgmt_leader", 0))
            except OSError:
                pass
        return n

    def leader(self):
        for m, address in zip(MANAGERS, self.manager_metrics):
            try:
                if scrape(address).get("kvc_mgmt_leader") == 1:
                    return m
            except OSError:
                pass
        return None

    def etcd_leader(self):
        for e, url in self.etcd.items():
            try:
                st = http_json(url + "/v3/maintenance/status", {})
            except (OSError, ValueError):
                continue
            if st.get("leader") and st["header"]["member_id"] == st["leader"]:
                return e
        return None


def targets_of(server):
    i = STORAGE.index(server)
    return set(range(i * TARGETS, (i + 1) * TARGETS))


def server_of(target):
    return STORAGE[target // TARGETS]


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


# -- the load ------------------------------------------------------------

def read_direct(path):
    """The file's bytes with O_DIRECT (past every cache: from the servers)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        size = os.fstat(fd).st_size
        buf = mmap.mmap(-1, max(4096, -(-size // 4096) * 4096))
        got = 0
        while got < size:
            n = os.preadv(fd, [memoryview(buf)[got:]], got)
            if n <= 0:
                break
            got += n
        return bytes(buf[:got])
    finally:
        os.close(fd)


def write_file(path, data):
    """Replace path's bytes with data, acknowledged (fsync). An error says
    which step failed and when."""
    step = "open"
    try:
        with open(path, "wb", buffering=0) as f:
            step = "write"
            f.write(data)
            step = "fsync"
            os.fsync(f.fileno())
            step = "close"
    except OSError as e:
        e.strerror = f"{e.strerror} ({step}, {time.strftime('%H:%M:%S')}.{int(time.time() * 1000) % 1000:03d})"
        raise


def stable_files(directory, count, seed):
    """Files written once (path -> (sha256, size)): read during failures."""
    rng = random.Random(seed)
    files = {}
    for i in range(count):
        data = rng.randbytes(rng.choice([4096, 70000, CHUNK + 5, 3 * CHUNK - 7]))
        path = os.path.join(directory, f"stable{i}")
        write_file(path, data)
        files[path] = (hashlib.sha256(data).hexdigest(), len(data))
    return files


class Load:
    """Writers rewriting files with fresh bytes (fsync; each writer its own
    paths, the last acknowledged bytes recorded), a reader of those files
    (no error allowed), an O_DIRECT reader and a USRBIO ring reader of the
    stable files (no error and the same bytes allowed)."""

    def __init__(self, writer_paths, stable, sizes=(4096, 70000, CHUNK + 123, 2 * CHUNK)):
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked, self.errors, self.stalls = {}, [], []
        self.stable, self.sizes = stable, sizes
        self.ring_passes = 0
        self.threads = [threading.Thread(target=self.writer, args=(w, paths))
                        for w, paths in enumerate(writer_paths)]
        self.threads += [threading.Thread(target=self.reader),
                         threading.Thread(target=self.direct_reader),
                         threading.Thread(target=self.ring_reader)]

    def writer(self, w, paths):
        rng = random.Random(w)
        while not self.stop.is_set():
            path = rng.choice(paths)
            data = rng.randbytes(rng.choice(self.sizes))
            start = time.monotonic()
            try:
                write_file(path, data)
            except OSError as e:
                self.errors.append(f"write {path}: {e}")
                with self.lock:
                    self.acked.pop(path, None)
                continue
            with self.lock:
                self.stalls.append(time.monotonic() - start)
                self.acked[path] = hashlib.sha256(data).hexdigest()

    def writes(self):
        with self.lock:
            return len(self.stalls)

    def reader(self):
        while not self.stop.is_set():
            with self.lock:
                paths = list(self.acked)
            for path in paths:  # rewritten meanwhile: only no error here
                try:
                    with open(path, "rb") as f:
                        f.read()
                except OSError as e:
                    self.errors.append(f"read {path}: {e}")
            time.sleep(0.05)

    def direct_reader(self):
        while not self.stop.is_set():
            for path, (digest, _) in self.stable.items():
                try:
                    if hashlib.sha256(read_direct(path)).hexdigest() != digest:
                        self.errors.append(f"direct read {path}: wrong bytes")
                except OSError as e:
                    self.errors.append(f"direct read {path}: {e}")
            time.sleep(0.05)

    def ring_reader(self):
        items = [[p, size] for p, (_, size) in self.stable.items()]
        want = {p: digest for p, (digest, _) in self.stable.items()}
        while not self.stop.is_set():
            try:
                got = ring_read_all(items)
                if got != want:
                    self.errors.append(f"ring read: wrong bytes {got} != {want}")
            except (AssertionError, OSError, ValueError, subprocess.SubprocessError) as e:
                self.errors.append(f"ring read: {e}")
            self.ring_passes += 1
            time.sleep(0.2)

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(300)

    def wait_writes(self, more, timeout=60):
        """`more` acknowledged writes after now (writes go on)."""
        n = self.writes()
        return wait_until(lambda: self.writes() >= n + more, timeout=timeout)

    def verify(self):
        _drop_caches()
        for path, digest in self.acked.items():
            assert hashlib.sha256(read_direct(path)).hexdigest() == digest, path
        for path, (digest, _) in self.stable.items():
            assert hashlib.sha256(read_direct(path)).hexdigest() == digest, path


def writer_dirs(directory, writers=2, files=5):
    return [[os.path.join(directory, f"w{w}-{i}") for i in range(files)]
            for w in range(writers)]


def check_load(load):
    assert load.errors == [], load.errors[:10]
    # no write waited much longer than detection (1.5 s) and an attempt
    # that met the failure (the client's patience is 2 x 1.5 + 2 x 2 s)
    assert max(load.stalls) < 30, max(load.stalls)
    assert load.ring_passes > 0
    load.verify()


def chunk_reads(mh, server):
    m = scrape(mh.storage_metrics[STORAGE.index(server)])
    return sum(v for k, v in m.items()
               if k.startswith("kvc_storage_reply_data_bytes_total") and "chunk_read" in k)


def differences(mh, server):
    """(target, other member, chunks that differ) for each of server's
    targets whose chunk listing is not another member's."""
    out = []
    lost = targets_of(server)
    for ch in mh.chains():
        for t in lost & set(ch["targets"]):
            other = next(m for m in ch["targets"] if m not in lost)
            mine, theirs = listing(mh, t), listing(mh, other)
            if mine != theirs:
                keys = set(mine) | set(theirs)
                out.append((t, other, {k: (mine.get(k), theirs.get(k)) for k in sorted(keys)
                                       if mine.get(k) != theirs.get(k)}))
    return out


# Found by the "cut" case (about one run in three) and reproduced by
# test_a_range_operation_delayed_by_a_partition_lands_after_resync.
LATE_RANGE_OP = (
    "product bug: a CHUNK_TRUNCATE/REMOVE sent to a partitioned host stays in "
    "TCP retransmission after its sender timed out and closed the socket; the "
    "link comes back, the host's targets rejoin and resync, and then the stale "
    "request arrives and is applied (range operations carry no chain version), "
    "so the returned target lacks chunks the other members hold")


def check_rejoined(mh, server, stable, late_range_ops=False):
    """server's targets serve in full chains again, hold exactly what the
    other members of their chains hold, and serve reads."""
    assert wait_until(mh.whole, timeout=FULL), mh.status()
    before = chunk_reads(mh, server)

    def read_all():
        for path in stable:
            read_direct(path)
        return chunk_reads(mh, server) > before
    assert wait_until(read_all, timeout=60, step=0.5), f"{server} serves no reads"
    diff = differences(mh, server)
    if diff and late_range_ops:
        pytest.xfail(f"{LATE_RANGE_OP}: {diff}")
    assert diff == []


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
    check_rejoined(mh, victim, stable, late_range_ops=how == "cut")


@pytest.mark.xfail(strict=True, reason=LATE_RANGE_OP)
def test_a_range_operation_delayed_by_a_partition_lands_after_resync(mh, workdir):
    """The cut case's rare failure, made likely: kvc-meta's connection to
    the host is warm, a truncate to 0 is sent while the host is cut off
    (kvc-meta times out, the manager takes the host out, the truncate is
    done on the other members), the file is written again, and the link
    comes back about when the truncate's next TCP retransmission is due
    after resync is over. The host's target must keep the new chunk."""
    victim = "s5"
    target = min(targets_of(victim))
    chain = next(ch for ch in mh.chains() if target in ch["targets"])
    path = files_on_chain(workdir, chain["id"], 1, "late")[0]
    data = os.urandom(100000)
    write_file(path, data)
    os.truncate(path, 50000)  # kvc-meta connects to every member
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
