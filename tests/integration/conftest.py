"""Fixtures: a real kvcfs cluster (kvc-meta, three kvc-storage, kvc-fuse)
started with tools/kvc-cluster in a private directory, on private ports,
mounted at a private mountpoint."""
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import kvcwire

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("KVC_BUILD", ROOT / "build"))
# The build whose libkvc is loaded into processes that are not built with
# the sanitizers (Python, fio): BUILD itself, except in the sanitizer pass
# of the suite, where the daemons come from an ASan build and these from a
# plain one.
CLIENT_BUILD = pathlib.Path(os.environ.get("KVC_CLIENT_BUILD", BUILD))
LIBKVC = CLIENT_BUILD / "libkvc.so"
LAUNCHER = ROOT / "tools" / "kvc-cluster"
CHUNK = 1 << 20
# Several checkouts may run their suites side by side on distinct bases.
PORT_BASE = int(os.environ.get("KVC_TEST_PORT_BASE", "19400"))


class Cluster:
    """meta_extra: more [meta] lines; http: the HTTP address (host:port);
    servers: kvc-storage servers (ports port_base + 1 ..) of `targets`
    targets each; replicas: targets per chain; managers: kvc-mgmt managers
    m1.. (ports port_base + 61 ..) over a local etcd (port_base + 50, kvc-
    cluster runs it), with quick failure detection (failure_timeout_ms)."""

    def __init__(self, base, mount, port_base, meta_extra="", http=None, servers=3,
                 replicas=1, targets=1, managers=0, direct_reads=False,
                 failure_timeout_ms=1500):
        self.dir = pathlib.Path(base)
        self.mount = pathlib.Path(mount)
        self.port_base = port_base
        self.conf = self.dir / "cluster.conf"
        # Created by kvc-cluster start (the cluster file names them).
        self.secret_file = self.dir / "secret"
        self.pool_secret_file = self.dir / "pool.secret"
        self.meta_address = f"127.0.0.1:{port_base}"
        self.http = f"http://{http or f'127.0.0.1:{port_base + 8600}'}"
        self.storage_addresses = [f"127.0.0.1:{port_base + i}" for i in range(1, servers + 1)]
        self.replicas = replicas
        self.targets_per_server = targets
        self.direct_reads = direct_reads
        self.failure_timeout_ms = failure_timeout_ms
        self.etcd = f"http://127.0.0.1:{port_base + 50}"
        self.manager_addresses = [f"127.0.0.1:{port_base + 60 + i}"
                                  for i in range(1, managers + 1)]
        self.manager_metrics = [f"127.0.0.1:{port_base + 70 + i}"
                                for i in range(1, managers + 1)]
        # Prometheus metrics (kvc-cluster's scheme): storage sI on base+10+I,
        # kvc-fuse on base+10; kvc-meta's on its HTTP address.
        self.storage_metrics = [f"127.0.0.1:{port_base + 10 + i}"
                                for i in range(1, servers + 1)]
        self.fuse_metrics = f"127.0.0.1:{port_base + 10}"
        self.meta_extra = meta_extra
        self.world_size = 2
        self.lease_ms = 3000
        kvcwire.mark_meta(self.meta_address)
        for address in [self.meta_address] + self.storage_addresses:
            kvcwire.mark_secret(address, self.secret_file)

    def write_config(self):
        self.dir.mkdir(parents=True, exist_ok=True)
        servers = "".join(
            f"\n[storage s{i}]\naddress = {a}\nmetrics = {m}\n" +
            "".join(f"target = {self.dir}/s{i}/t{t}\n" for t in range(self.targets_per_server))
            for i, (a, m) in enumerate(zip(self.storage_addresses, self.storage_metrics), 1))
        managers = "".join(f"\n[mgmt m{i}]\naddress = {a}\nmetrics = {m}\n"
                           for i, (a, m) in enumerate(zip(self.manager_addresses,
                                                          self.manager_metrics), 1))
        top = (f"etcd = {self.etcd}\nheartbeat_ms = 200\n"
               f"failure_timeout_ms = {self.failure_timeout_ms}\n"
               if self.manager_addresses else "")
        self.conf.write_text(
            f"secret_file = {self.secret_file}\npool_secret_file = {self.pool_secret_file}\n"
            f"chunk_size = {CHUNK}\nstripe = 3\nreplicas = {self.replicas}\n{top}"
            f"storage_direct_reads = {'on' if self.direct_reads else 'off'}\n"
            "connect_timeout_ms = 1000\n"
            f"io_timeout_ms = 2000\n\n[meta]\naddress = {self.meta_address}\n"
            f"data = {self.dir}/meta\nhttp = {self.http[7:]}\nworld_size = {self.world_size}\n"
            f"http_max_body = 65536\nlease_ms = {self.lease_ms}\nclient_timeout_ms = 3000\n"
            f"{self.meta_extra}{servers}{managers}\n[fuse]\nmountpoint = {self.mount}\n"
            f"metrics = {self.fuse_metrics}\n"
            "receive_threads = 4\n")  # exercise parallel receiving on any machine

    def secret(self):
        return kvcwire.read_secret(self.secret_file)

    def pool_secret(self):
        return kvcwire.read_secret(self.pool_secret_file)

    def cli(self, *args, check=True):
        return subprocess.run([str(LAUNCHER), *args, "--dir", str(self.dir),
                               "--bin", str(BUILD)], check=check, capture_output=True,
                              text=True, timeout=120)

    def start(self):
        self.write_config()
        out = self.cli("start")
        assert self.mount.is_dir()
        return out

    def stop(self):
        self.cli("stop", check=False)

    def restart(self, name, signal="KILL"):
        self.cli("restart-daemon", name, "--signal", signal)

    def pid(self, name):
        return int((self.dir / "run" / f"{name}.pid").read_text())

    def admin(self, *args, check=True):
        return subprocess.run([str(BUILD / "kvc-admin"), "--config", str(self.conf), *args],
                              check=check, capture_output=True, text=True, timeout=60)

    def chunks(self):
        """Chunks on every storage target, as kvc-admin status counts them."""
        status = json.loads(self.admin("--json", "status").stdout)
        return sum(t["chunks"] for s in status["storage"] for t in s["targets"])


def _drop_caches():
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")
    except OSError:
        pass


@contextlib.contextmanager
def chained_cluster(prefix, port_base, http_port, servers, replicas, targets, managers=0,
                    failure_timeout_ms=1500):
    """A cluster of its own for one test module (chains, maybe managers),
    in a private directory; afterwards every storage server and manager
    a test stopped (SIGSTOP) is let go first, then everything is stopped
    and removed (KVC_KEEP_LOGS=1 keeps the directory and its logs)."""
    base = tempfile.mkdtemp(prefix=f"kvc-{prefix}-")
    mount = tempfile.mkdtemp(prefix=f"kvc-{prefix}-mnt-")
    c = Cluster(base, mount, port_base, http=f"127.0.0.1:{http_port}", servers=servers,
                replicas=replicas, targets=targets, managers=managers,
                failure_timeout_ms=failure_timeout_ms)
    c.stop()
    try:
        c.start()
        yield c
    finally:
        names = [f"s{i}" for i in range(1, servers + 1)] + [f"m{i}" for i in
                                                            range(1, managers + 1)]
        for name in names:
            try:
                os.kill(c.pid(name), signal.SIGCONT)
            except (OSError, ValueError):
                pass
        c.stop()
        if os.environ.get("KVC_KEEP_LOGS"):
            print(f"logs kept in {base}/logs")
        else:
            shutil.rmtree(base, ignore_errors=True)
        try:
            os.rmdir(mount)
        except FileNotFoundError:
            pass


@pytest.fixture(scope="session")
def cluster():
    base = tempfile.mkdtemp(prefix="kvc-it-")
    mount = tempfile.mkdtemp(prefix="kvc-mnt-")
    # The shared cluster reads cold chunk data with O_DIRECT, so every
    # suite on it goes through that path; private clusters keep the
    # default (the page cache).
    c = Cluster(base, mount, PORT_BASE, direct_reads=True)
    c.stop()
    c.start()
    yield c
    c.stop()
    shutil.rmtree(base, ignore_errors=True)
    try:
        os.rmdir(mount)
    except OSError:
        pass


@pytest.fixture
def workdir(cluster, request):
    """A fresh directory in the mount for one test."""
    path = cluster.mount / request.node.name.replace("[", "_").replace("]", "_")
    if path.exists():
        shutil.rmtree(path)
    path.mkdir()
    yield path


@pytest.fixture
def local_tmp():
    d = pathlib.Path(tempfile.mkdtemp(prefix="kvc-local-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def wait_until(predicate, timeout=20.0, step=0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def freeze(pid, timeout=10.0):
    """SIGSTOP pid and wait until every thread of it has stopped: the
    signal stops a process's threads one by one as each is scheduled, and
    a thread not stopped yet may still serve a request sent after the
    kill (on a busy machine, a whole read from the page cache)."""
    os.kill(pid, signal.SIGSTOP)

    def stopped():
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                        return False
        except FileNotFoundError:  # a thread ended meanwhile: look again
            return False
        return True

    assert wait_until(stopped, timeout=timeout, step=0.001), f"pid {pid} did not stop"


def fsync_through_a_freeze(path, pid, seconds, hang=60):
    """Write 3 chunks to path, then fsync it while the daemon pid is frozen
    for `seconds` (a stand-in for a slow writeback): asserts the fsync is
    still waiting when the daemon is let go, and comes back without an
    error after; the bytes read back."""
    import threading
    data = os.urandom(3 * CHUNK)
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        outcome = []

        def sync():
            try:
                os.fsync(f.fileno())
                outcome.append(None)
            except OSError as e:
                outcome.append(e)

        freeze(pid)
        try:
            syncer = threading.Thread(target=sync)
            syncer.start()
            time.sleep(seconds)
            assert syncer.is_alive(), f"fsync came back with the server frozen: {outcome}"
        finally:
            os.kill(pid, signal.SIGCONT)
        syncer.join(hang)
        assert not syncer.is_alive(), "fsync hung after the server came back"
        assert outcome == [None], outcome
    assert path.read_bytes() == data


def chunk_name(ino, chunk):
    """Where chunk `chunk` of inode ino lies under a target's directory,
    when it is a file (src/storage/chunk_store.h)."""
    return f"chunks/{ino & 0xff:02x}/{ino:016x}.{chunk:08x}"


def chunk_files_of(cluster, ino):
    """The chunk files of inode ino on every storage target of the cluster
    (chunks/XX/IIIIIIIIIIIIIIII.CCCCCCCC, src/storage/chunk_store.h): what
    a test checks when other tests' removals may be under way."""
    return list(cluster.dir.glob(f"**/chunks/*/{ino:016x}.*"))


def client_conf(cluster, path, old, new):
    """The cluster's file with its first `old` replaced by `new`, for a
    second kvc-fuse (second_mount): without the first's metrics listener
    (that port is taken). Written to path; returns path."""
    text = cluster.conf.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    path.write_text("\n".join(line for line in text.splitlines()
                              if not line.startswith(f"metrics = {cluster.fuse_metrics}")))
    return path


def second_mount(cluster, conf=None):
    """Another kvc-fuse (another client) of the same cluster, mounted on a
    new temporary directory; conf: another cluster file (default the
    cluster's). Returns (process, mountpoint); drop_second_mount ends it."""
    mount = tempfile.mkdtemp(prefix="kvc-mnt2-")
    log = open(cluster.dir / "fuse2.log", "ab")
    proc = subprocess.Popen([str(BUILD / "kvc-fuse"), "--config", str(conf or cluster.conf),
                             "--mountpoint", mount], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    assert wait_until(lambda: os.path.ismount(mount), timeout=20)
    return proc, mount


class ServerPlacement:
    """A cluster seen through another kvc-fuse (server_placement): the
    mount, its metrics and its cluster file replaced, the rest the
    cluster's."""

    def __init__(self, cluster, conf, mount, metrics):
        self._cluster = cluster
        self.conf, self.mount, self.fuse_metrics = conf, mount, metrics

    def __getattr__(self, name):
        return getattr(self._cluster, name)


@contextlib.contextmanager
def server_placement(cluster, metrics_port):
    """The cluster through a second kvc-fuse whose cluster file says
    `local_reads = off` (metrics on metrics_port): every read goes to the
    storage servers (placed on this host), as with replicas, managers or
    a key's scattered segments, where the default kvc-fuse reads a
    single-copy target's chunks itself (src/client/transport_local.h)."""
    metrics = f"127.0.0.1:{metrics_port}"
    conf = cluster.dir / f"no-local-reads-{metrics_port}.conf"
    conf.write_text(cluster.conf.read_text()
                    .replace("[meta]", "local_reads = off\n\n[meta]", 1)
                    .replace(f"metrics = {cluster.fuse_metrics}", f"metrics = {metrics}", 1))
    proc, mount = second_mount(cluster, conf)
    try:
        yield ServerPlacement(cluster, conf, pathlib.Path(mount), metrics)
    finally:
        drop_second_mount(proc, mount)
        conf.unlink()


def drop_second_mount(proc, mount):
    proc.kill()
    proc.wait()
    subprocess.run(["fusermount3", "-uz", mount], capture_output=True)
    os.rmdir(mount)


@pytest.fixture
def other(cluster, workdir):
    """The workdir as a second kvc-fuse client (second_mount) sees it."""
    proc, mount2 = second_mount(cluster)
    try:
        yield os.path.join(mount2, workdir.relative_to(cluster.mount))
    finally:
        drop_second_mount(proc, mount2)
