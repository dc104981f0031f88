"""The multi-host harness of test_multihost_chains.py: the bridge and
network namespaces (Net), the daemons of each host and what the cluster
says (MultiHost), and the mixed load through the mount (Load).

Besides the five storage hosts of the cluster file, three namespaces
j1..j3 are ready for hosts added to the running cluster (kvc-storage
--join, kvc-admin add-host): MultiHost.hosts lists the admitted ones in
server order, and its targets_of()/server_of() know them."""
import hashlib
import json
import mmap
import os
import random
import signal
import socket
import subprocess
import threading
import time
import urllib.request
import uuid

import pytest

import kvcwire
from conftest import BUILD, CHUNK, PORT_BASE, _drop_caches, wait_until
from chain_helpers import ring_read_all, scrape

PORT = PORT_BASE + 400  # kvc-meta; storage +1 (metrics +11), fuse metrics +10,
ETCD = PORT + 50        # etcd client (peer +1), managers +61 (metrics +71)
SUBNET = f"10.78.{(PORT_BASE // 100) % 200 + 20}"
STORAGE = [f"s{i}" for i in range(1, 6)]
CONTROL = ["x1", "x2", "x3"]
JOINERS = ["j1", "j2", "j3"]  # hosts added while the cluster runs
TARGETS, REPLICAS = 3, 3
CHAINS = len(STORAGE) * TARGETS // REPLICAS
ETCDS = ["e1", "e2", "e3"]
MANAGERS = ["m1", "m2"]
HOST_OF = {"e1": "x1", "e2": "x2", "e3": "x3", "m1": "x1", "m2": "x2", "meta": "x3",
           **{s: s for s in STORAGE + JOINERS}}
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
        names = STORAGE + CONTROL + ["cl"] + JOINERS
        last = {**{s: 10 + i for i, s in enumerate(STORAGE, 1)},
                **{x: 20 + i for i, x in enumerate(CONTROL, 1)}, "cl": 31,
                **{j: 40 + i for i, j in enumerate(JOINERS, 1)}}
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
        self.hosts = list(STORAGE)  # admitted storage hosts, in server order
        self.targets_per_server = TARGETS
        self.chain_count = CHAINS   # chains of the whole cluster

    # -- configuration and daemons --------------------------------------

    def host_addresses(self, host):
        """(address, metrics address) of a storage host."""
        ip = self.net.ip[host]
        return f"{ip}:{PORT + 1}", f"{ip}:{PORT + 11}"

    def write_config(self, path, fuse_metrics, hosts=STORAGE):
        servers = "".join(
            f"\n[storage {s}]\naddress = {self.host_addresses(s)[0]}\n"
            f"metrics = {self.host_addresses(s)[1]}\n" +
            "".join(f"target = {self.base}/{s}/t{t}\n" for t in range(TARGETS))
            for s in hosts)
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

    def join(self, host):
        """Start kvc-storage on a new host with --join, from a cluster file
        naming the managers, kvc-meta and only its own section; later
        starts (start(host)) go without --join."""
        conf = os.path.join(self.base, f"{host}.conf")
        self.write_config(conf, self.fuse_metrics, hosts=[host])
        argv = [BUILD / "kvc-storage", "--config", conf, "--name", host]
        self.spawn(host, host, argv + ["--join"])
        self.argv[host] = argv

    def admitted(self, host):
        """host was admitted (kvc-admin add-host) as the next server."""
        self.hosts.append(host)
        address, metrics = self.host_addresses(host)
        self.storage_addresses.append(address)
        self.storage_metrics.append(metrics)

    def targets_of(self, host):
        i = self.hosts.index(host)
        return set(range(i * TARGETS, (i + 1) * TARGETS))

    def server_of(self, target):
        return self.hosts[target // TARGETS]

    def start(self, name, wait=True):
        if name == "fuse":
            sh("fusermount3", "-uz", self.mount, check=False)
        self.spawn(name, HOST_OF.get(name), self.argv[name])
        if wait:
            self.wait_ready(name)

    def address_of(self, name):
        if name in self.hosts:
            return self.storage_addresses[self.hosts.index(name)]
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
        joined = [j for j in JOINERS if j in self.procs and j in self.hosts]
        for name in ETCDS + MANAGERS + ["meta"] + STORAGE + joined + ["fuse"]:
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
        return len(chains) == self.chain_count and all(
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
        self.acked_data = {}
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
                self.acked_data[path] = data

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
            got = read_direct(path)
            if hashlib.sha256(got).hexdigest() != digest:
                want = self.acked_data[path]
                bad = [i for i in range(0, max(len(got), len(want)), 4096)
                       if got[i:i + 4096] != want[i:i + 4096]]
                raise AssertionError(f"{path}: {len(got)} bytes read, {len(want)} acknowledged; "
                                     f"{len(bad)} 4 KiB blocks differ, from offset "
                                     f"{bad[0] if bad else None}")
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
