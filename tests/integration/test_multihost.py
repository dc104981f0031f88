"""Several hosts on one machine: kvc-meta and three kvc-storage servers each
in a network namespace of its own (10.77.0.11-13 behind a bridge), kvc-fuse
in the root namespace. Nothing is on 127.0.0.1: every byte crosses a
virtual network, and cutting a host's link is a network partition."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

import kvcwire
from conftest import BUILD, CHUNK, PORT_BASE, wait_until

PORT = PORT_BASE + 300
HOSTS = 3
HANG = 60


def sh(*args, check=True):
    return subprocess.run([str(a) for a in args], check=check, capture_output=True, text=True,
                          timeout=30)


class Hosts:
    def __init__(self):
        tag = uuid.uuid4().hex[:4]
        self.bridge = f"kvcbr{tag}"
        self.names = [f"kvc{tag}h{i}" for i in range(1, HOSTS + 1)]
        self.links = [f"kvc{tag}v{i}" for i in range(1, HOSTS + 1)]
        self.ips = [f"10.77.0.{10 + i}" for i in range(1, HOSTS + 1)]

    def up(self):
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", "10.77.0.1/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for ns, link, ip in zip(self.names, self.links, self.ips):
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
            sh("ip", "link", "set", link, "master", self.bridge, "up")
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            sh("ip", "-n", ns, "link", "set", "eth0", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")

    def down(self):
        for ns, link in zip(self.names, self.links):
            sh("ip", "link", "del", link, check=False)
            sh("ip", "netns", "del", ns, check=False)
        sh("ip", "link", "del", self.bridge, check=False)

    def cut(self, i, connected):
        sh("ip", "link", "set", self.links[i], "up" if connected else "down")


def reachable(address):
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
        return True
    except OSError:
        return False


class MultiHostCluster:
    def __init__(self, hosts, base, mount):
        self.hosts, self.base, self.mount = hosts, base, mount
        self.conf = os.path.join(base, "cluster.conf")
        self.procs = {}
        self.meta = f"{hosts.ips[0]}:{PORT}"
        self.storage = [f"{ip}:{PORT + 1}" for ip in hosts.ips]

    def write_config(self):
        """The cluster file and its secret: 32 random bytes in hex, in a file
        only root reads (every host of this test shares the filesystem)."""
        secret = self.secret_file = os.path.join(self.base, "secret")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(32).hex().encode() + b"\n")
        os.close(fd)
        servers = "".join(f"\n[storage s{i}]\naddress = {a}\ntarget = {self.base}/s{i}/t0\n"
                          for i, a in enumerate(self.storage, 1))
        with open(self.conf, "w") as f:
            f.write(f"secret_file = {secret}\nchunk_size = {CHUNK}\nstripe = 3\n"
                    "connect_timeout_ms = 1000\nio_timeout_ms = 2000\n\n"
                    f"[meta]\naddress = {self.meta}\ndata = {self.base}/meta\nhttp = off\n"
                    f"{servers}\n[fuse]\nmountpoint = {self.mount}\n")

    def start_daemon(self, name, netns, *command):
        log = open(os.path.join(self.base, f"{name}.log"), "ab")
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.procs[name] = subprocess.Popen(prefix + [str(c) for c in command], stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)

    def start(self):
        self.write_config()
        self.start_daemon("meta", self.hosts.names[0], BUILD / "kvc-meta", "--config", self.conf)
        for i, ns in enumerate(self.hosts.names, 1):
            self.start_daemon(f"s{i}", ns, BUILD / "kvc-storage", "--config", self.conf,
                              "--name", f"s{i}")
        for address in [self.meta] + self.storage:
            assert wait_until(lambda: reachable(address), timeout=20), f"{address} not up"
        self.start_daemon("fuse", None, BUILD / "kvc-fuse", "--config", self.conf)
        assert wait_until(lambda: os.path.ismount(self.mount), timeout=20), "no mount"

    def stop(self):
        sh("fusermount3", "-uz", self.mount, check=False)
        for proc in self.procs.values():
            proc.kill()
            proc.wait(timeout=10)

    def admin(self, *args):
        return subprocess.run([str(BUILD / "kvc-admin"), "--config", self.conf, *args],
                              capture_output=True, text=True, timeout=HANG)


@pytest.fixture(scope="module")
def multihost():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    hosts = Hosts()
    base = tempfile.mkdtemp(prefix="kvc-mh-")
    mount = tempfile.mkdtemp(prefix="kvc-mh-mnt-")
    cluster = MultiHostCluster(hosts, base, mount)
    try:
        hosts.up()
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        hosts.down()
        shutil.rmtree(base, ignore_errors=True)
        os.rmdir(mount)


def read_direct(path):
    """The file's bytes through FUSE with O_DIRECT (no kernel cache)."""
    return subprocess.run(["dd", f"if={path}", "bs=1M", "iflag=direct", "status=none"],
                          capture_output=True, timeout=HANG)


def test_every_host_holds_chunks_and_bytes_round_trip(multihost):
    data = os.urandom(24 * CHUNK + 777)
    path = os.path.join(multihost.mount, "spread")
    with open(path, "wb") as f:
        f.write(data)
    assert read_direct(path).stdout == data
    status = json.loads(multihost.admin("--json", "status").stdout)
    per_host = [sum(t["chunks"] for t in s["targets"]) for s in status["storage"]]
    assert len(per_host) == HOSTS and all(n >= 8 for n in per_host), per_host


def test_daemons_refuse_peers_without_the_secret(multihost):
    """Over the network as on loopback: no credentials or a wrong secret is
    refused, the cluster's secret gets in."""
    kvcwire.mark_meta(multihost.meta)
    secret = kvcwire.read_secret(multihost.secret_file)
    for address in [multihost.meta] + multihost.storage:
        for wrong in (None, b"f" * 64):
            sock, status = kvcwire.connect(address, wrong)
            sock.close()
            assert status == -kvcwire.EACCES, address
        assert kvcwire.ping(address, secret), address


def test_a_partitioned_host_gives_eio_then_recovers(multihost):
    data = os.urandom(12 * CHUNK)
    path = os.path.join(multihost.mount, "partition")
    with open(path, "wb") as f:
        f.write(data)
    multihost.hosts.cut(2, connected=False)
    try:
        started = time.monotonic()
        out = read_direct(path)
        assert out.returncode != 0 and b"Input/output error" in out.stderr
        assert time.monotonic() - started < HANG
        status = multihost.admin("status")
        assert status.returncode != 0 and "down" in status.stdout.lower()
    finally:
        multihost.hosts.cut(2, connected=True)
    assert wait_until(lambda: read_direct(path).stdout == data, timeout=30)
    assert multihost.admin("status").returncode == 0


def test_a_partitioned_metadata_host_gives_eio_then_recovers(multihost):
    path = os.path.join(multihost.mount, "before-meta-cut")
    with open(path, "wb") as f:
        f.write(b"kept")
    multihost.hosts.cut(0, connected=False)  # kvc-meta and s1 live there
    try:
        out = subprocess.run(["touch", os.path.join(multihost.mount, "during-meta-cut")],
                             capture_output=True, text=True, timeout=HANG)
        assert out.returncode != 0 and "Input/output error" in out.stderr
    finally:
        multihost.hosts.cut(0, connected=True)
    after = os.path.join(multihost.mount, "after-meta-cut")
    assert wait_until(lambda: subprocess.run(["touch", after], capture_output=True,
                                             timeout=HANG).returncode == 0, timeout=30)
    assert read_direct(path).stdout == b"kept"
