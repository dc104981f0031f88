#!/usr/bin/python3
"""kvc-bench multihost: scale-out of a kvcfs cluster across network
namespaces on one machine (issue 12's benchmark).

`kvc-bench multihost` (tools/bench/multihost.c) execs /usr/bin/python3 on
this file: next to the binary in a build directory (meson copies it there
as kvc-bench-multihost.py) or in DATADIR/kvcfs when installed. It can also
be run directly: /usr/bin/python3 tools/bench/multihost.py --bin build.

The topology (built once, torn down always: on success, failure, Ctrl-C
or SIGTERM):

  root namespace: kvc-fuse and the load (readers/writers through the
    mount), on a veth `<tag>c` (SUBNET.1) whose peer is a bridge port
  namespace <tag>m: kvc-meta (SUBNET.10), link not shaped
  namespaces <tag>h1..hN: one kvc-storage each (SUBNET.11..), three
    targets each, on a private tmpfs (so the one disk of the machine is
    not what limits N hosts)

Shaped links (tc tbf at --rate, each direction shaped separately):
  every storage host's link, both ways: a host sends (reads) and receives
    (writes, chain forwards) at most --rate;
  the client's uplink (root -> bridge): writes leave the client at most at
    --rate. Its downlink is not shaped, so N hosts can together send N x
    --rate to the readers.
Reads of N hosts are so capped at N x rate; writes at rate at any replica
count: with 5 hosts at replicas 3 each host receives 3/5 and sends 2/5 of
the written bytes (head, middle, tail of a chain each a fifth of the data),
below its link's rate, so the client's uplink, not a storage link, is the
limit at both replica counts.

Every configuration runs on a fresh cluster (new daemons, empty targets):
write --jobs files of --size / --jobs bytes each, O_DIRECT 4 MiB writes,
in parallel (timed: the write figure); sync and drop the page cache (echo
3 > /proc/sys/vm/drop_caches); read them all back in parallel, buffered
4 MiB reads (timed: the read figure).
"""
import argparse
import json
import mmap
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

PROG = "kvc-bench multihost"
BLOCK = 4 << 20
CHUNK = 1 << 20
TARGETS = 3
DAEMON_WAIT = 20.0
RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
SIZE_PRESETS = {"small": 64 << 20, "medium": 512 << 20, "large": 2 << 30}


def progress(msg):
    print(f"[multihost] {msg}", file=sys.stderr, flush=True)


class Usage(argparse.ArgumentParser):
    def error(self, message):
        sys.stderr.write(f"{PROG}: {message}\nTry '{PROG} --help' for more information.\n")
        sys.exit(2)


def parse_rate(text):
    """tc's rate syntax (1gbit, 200mbit, 500kbit) -> bits per second."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?bit)", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"bad rate '{text}' (e.g. 1gbit, 200mbit)")
    return float(m.group(1)) * RATE_UNITS[m.group(2)]


def parse_size(text):
    if text in SIZE_PRESETS:
        return SIZE_PRESETS[text]
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)i?b?", text.strip().lower())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (e.g. 1G, 256M, small)")
    return int(float(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)])


def parse_hosts(text):
    try:
        hosts = sorted({int(h) for h in text.split(",") if h})
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad host list '{text}' (e.g. 1,2,3,5)")
    if not hosts or hosts[0] < 1 or hosts[-1] > 9:
        raise argparse.ArgumentTypeError("host counts are 1..9")
    return hosts


def arguments(argv):
    p = Usage(prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
              description="Aggregate read throughput of 1, 2, 3, 5 storage hosts and write\n"
              "throughput at replicas 1 against 3, each host in a network namespace of\n"
              "its own with its link shaped by tc; a fresh cluster per run. Needs root.",
              epilog="Reads: replicas 1 on each host count; ratio = GB/s / (N x one host's "
              "GB/s).\nWrites: the largest host count (at least 3) at replicas 1 and 3; "
              "ratio = replicas 3 / replicas 1.\nShaped: every storage link both ways and the "
              "client's uplink at --rate;\nthe client's downlink is not (see "
              "docs/benchmarks.md \"Scale-out\").\nProgress goes to stderr, the table to "
              "stdout.")
    p.add_argument("--rate", type=parse_rate, default=parse_rate("1gbit"), metavar="RATE",
                   help="each shaped link's rate, tc syntax (default 1gbit)")
    p.add_argument("--hosts", type=parse_hosts, default=[1, 2, 3, 5], metavar="LIST",
                   help="storage host counts for the read runs (default 1,2,3,5)")
    p.add_argument("--size", type=parse_size, default=1 << 30, metavar="SIZE",
                   help="bytes written then read per run: 1G, 256M, or small (64M), "
                   "medium (512M), large (2G) (default 1G)")
    p.add_argument("--jobs", type=int, default=8, metavar="N",
                   help="parallel writers and readers, one file each (default 8)")
    p.add_argument("--bin", default=os.environ.get("KVC_BENCH_BIN_DIR"), metavar="DIR",
                   help="where kvc-meta, kvc-storage, kvc-fuse are (default: kvc-bench's "
                   "directory)")
    p.add_argument("--json", metavar="FILE", help="write the table as JSON")
    p.add_argument("--keep-going", action="store_true",
                   help="a failed run is reported and the next one runs")
    p.add_argument("--subnet", default="10.79.0", metavar="A.B.C",
                   help="the /24 of the namespaces (default 10.79.0)")
    p.add_argument("--port", type=int, default=28100, metavar="PORT",
                   help="kvc-meta's port in its namespace, kvc-storage's PORT+1 (default 28100)")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.jobs > 64:
        p.error("--jobs is 1..64")
    if args.size < args.jobs * BLOCK:
        p.error(f"--size must be at least --jobs x 4 MiB ({args.jobs * 4} MiB)")
    if not re.fullmatch(r"\d+\.\d+\.\d+", args.subnet):
        p.error(f"bad --subnet '{args.subnet}' (e.g. 10.79.0)")
    if not args.bin:
        p.error("--bin DIR is required when not run through kvc-bench")
    return args


def sh(*cmd, check=True):
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: {out.stderr.strip() or out.returncode}")
    return out


def fmt_rate(bits):
    for unit in ("gbit", "mbit", "kbit"):
        if bits >= RATE_UNITS[unit]:
            return f"{bits / RATE_UNITS[unit]:g}{unit}"
    return f"{bits:g}bit"


class Topology:
    """The bridge, the client's veth, the meta namespace and `hosts` storage
    namespaces; everything it made is undone by down(), whatever failed."""

    def __init__(self, hosts, subnet, rate):
        tag = "kmb" + uuid.uuid4().hex[:4]
        self.tag, self.subnet, self.rate = tag, subnet, rate
        self.bridge = f"{tag}br"
        self.client = f"{tag}c"            # root namespace side, SUBNET.1
        self.client_port = f"{tag}cb"      # its bridge port
        self.meta_ns, self.meta_port = f"{tag}m", f"{tag}mb"
        self.meta_ip = f"{subnet}.10"
        self.host_ns = [f"{tag}h{i}" for i in range(1, hosts + 1)]
        self.host_port = [f"{tag}h{i}b" for i in range(1, hosts + 1)]
        self.host_ip = [f"{subnet}.{10 + i}" for i in range(1, hosts + 1)]
        self.made_links, self.made_ns = [], []

    def shape(self, dev, netns=None):
        """tbf at the rate on dev's egress; a burst of 4 ms of the rate (at
        least 64 KiB, so GSO packets pass whole), 50 ms of queue."""
        burst = max(64 << 10, int(self.rate / 8 / 250))
        cmd = ["tc"] + (["-n", netns] if netns else []) + [
            "qdisc", "replace", "dev", dev, "root", "tbf", "rate", fmt_rate(self.rate),
            "burst", str(burst), "latency", "50ms"]
        sh(*cmd)

    def add_ns(self, ns, port, ip, shaped):
        self.made_ns.append(ns)  # before: a signal may come between the two
        sh("ip", "netns", "add", ns)
        self.made_links.append(port)
        sh("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", port, "master", self.bridge, "up")
        sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        if shaped:
            self.shape("eth0", ns)   # what the host sends
            self.shape(port)         # what it receives

    def up(self):
        if sh("ip", "route", "show", f"{self.subnet}.0/24").stdout.strip():
            raise RuntimeError(f"{self.subnet}.0/24 is routed already (another run? "
                               "use --subnet)")
        progress(f"topology {self.tag}: bridge, client {self.subnet}.1, meta {self.meta_ip}, "
                 f"{len(self.host_ns)} storage hosts, links at {fmt_rate(self.rate)}")
        self.made_links.append(self.bridge)
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "link", "set", self.bridge, "up")
        self.made_links.append(self.client)
        sh("ip", "link", "add", self.client, "type", "veth", "peer", "name", self.client_port)
        sh("ip", "link", "set", self.client_port, "master", self.bridge, "up")
        sh("ip", "addr", "add", f"{self.subnet}.1/24", "dev", self.client)
        sh("ip", "link", "set", self.client, "up")
        self.shape(self.client)      # the client's uplink: what writes leave by
        self.add_ns(self.meta_ns, self.meta_port, self.meta_ip, shaped=False)
        for ns, port, ip in zip(self.host_ns, self.host_port, self.host_ip):
            self.add_ns(ns, port, ip, shaped=True)

    def down(self):
        """Deleting a veth end deletes its peer and both qdiscs; deleting a
        namespace its eth0."""
        for link in reversed(self.made_links):
            sh("ip", "link", "del", link, check=False)
        for ns in reversed(self.made_ns):
            sh("ip", "netns", "del", ns, check=False)
        self.made_links, self.made_ns = [], []

    def leftovers(self):
        links = sh("ip", "-o", "link", "show", check=False).stdout
        nss = sh("ip", "netns", "list", check=False).stdout
        return [w for w in (links + nss).split() if w.startswith(self.tag)]


def reachable(address):
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=0.5).close()
        return True
    except OSError:
        return False


def wait_until(predicate, timeout):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


ACTIVE = []  # the clusters started and not stopped yet


class Cluster:
    """One fresh cluster on the first `hosts` storage namespaces: its own
    directory (meta data, logs, config) and targets on the run's tmpfs."""

    def __init__(self, topo, hosts, replicas, bindir, port, base, mount):
        self.topo, self.hosts, self.replicas = topo, hosts, replicas
        self.bindir, self.base, self.mount = bindir, base, mount
        self.meta = f"{topo.meta_ip}:{port}"
        self.storage = [f"{ip}:{port + 1}" for ip in topo.host_ip[:hosts]]
        self.conf = os.path.join(base, "cluster.conf")
        self.procs = {}
        ACTIVE.append(self)  # main()'s teardown stops it if run_one could not

    def write_config(self):
        secret = os.path.join(self.base, "secret")
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(32).hex().encode() + b"\n")
        os.close(fd)
        data = os.path.join(self.base, "data")
        servers = ""
        for i, address in enumerate(self.storage, 1):
            targets = "".join(f"target = {data}/h{i}/t{t}\n" for t in range(TARGETS))
            servers += f"\n[storage h{i}]\naddress = {address}\n{targets}"
        with open(self.conf, "w") as f:
            f.write(f"secret_file = {secret}\nchunk_size = {CHUNK}\n"
                    f"replicas = {self.replicas}\n"
                    "connect_timeout_ms = 2000\nio_timeout_ms = 10000\n\n"
                    f"[meta]\naddress = {self.meta}\ndata = {self.base}/meta\nhttp = off\n"
                    f"{servers}\n[fuse]\nmountpoint = {self.mount}\n")

    def start_daemon(self, name, netns, *command):
        log = open(os.path.join(self.base, f"{name}.log"), "ab")
        prefix = ["ip", "netns", "exec", netns] if netns else []
        self.procs[name] = subprocess.Popen(prefix + [str(c) for c in command], stdout=log,
                                            stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def log_tail(self, name):
        try:
            with open(os.path.join(self.base, f"{name}.log"), errors="replace") as f:
                return "".join(f.readlines()[-5:]).strip()
        except OSError:
            return ""

    def wait_up(self, name, predicate):
        proc = self.procs[name]
        if not wait_until(lambda: predicate() or proc.poll() is not None, DAEMON_WAIT) \
                or proc.poll() is not None:
            raise RuntimeError(f"{name} did not come up: {self.log_tail(name)}")

    def start(self):
        self.write_config()
        self.start_daemon("meta", self.topo.meta_ns, os.path.join(self.bindir, "kvc-meta"),
                          "--config", self.conf)
        for i in range(1, self.hosts + 1):
            self.start_daemon(f"h{i}", self.topo.host_ns[i - 1],
                              os.path.join(self.bindir, "kvc-storage"), "--config", self.conf,
                              "--name", f"h{i}")
        self.wait_up("meta", lambda: reachable(self.meta))
        for i, address in enumerate(self.storage, 1):
            self.wait_up(f"h{i}", lambda a=address: reachable(a))
        self.start_daemon("fuse", None, os.path.join(self.bindir, "kvc-fuse"),
                          "--config", self.conf)
        self.wait_up("fuse", lambda: os.path.ismount(self.mount))

    def stop(self):
        if os.path.ismount(self.mount):
            if sh("fusermount3", "-u", self.mount, check=False).returncode != 0:
                sh("fusermount3", "-uz", self.mount, check=False)
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.procs = {}
        if self in ACTIVE:
            ACTIVE.remove(self)


def parallel(jobs, work):
    """Run work(j) for j in range(jobs) on threads (the I/O system calls
    release the GIL); returns the seconds from start to the last end."""
    errors = []

    def run(j):
        try:
            work(j)
        except BaseException as e:  # reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=run, args=(j,), daemon=True) for j in range(jobs)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    if errors:
        raise RuntimeError(f"I/O failed: {errors[0]}")
    return elapsed


def write_files(mount, jobs, per_file):
    buf = mmap.mmap(-1, BLOCK)        # page-aligned, as O_DIRECT wants
    buf.write(os.urandom(BLOCK))

    def work(j):
        fd = os.open(os.path.join(mount, f"f{j}"), os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
        try:
            for _ in range(per_file // BLOCK):
                if os.write(fd, buf) != BLOCK:
                    raise OSError("short write")
        finally:
            os.close(fd)

    return parallel(jobs, work)


def read_files(mount, jobs, per_file):
    def work(j):
        buf = bytearray(BLOCK)
        fd = os.open(os.path.join(mount, f"f{j}"), os.O_RDONLY)
        try:
            total = 0
            while True:
                n = os.readv(fd, [buf])
                if n == 0:
                    break
                total += n
        finally:
            os.close(fd)
        if total != per_file:
            raise OSError(f"f{j}: read {total} bytes of {per_file}")

    return parallel(jobs, work)


TICK = os.sysconf("SC_CLK_TCK")


def cpu_times():
    """(busy, total) seconds of all cores from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / TICK, sum(fields) / TICK


def process_seconds(pid):
    """User + system CPU seconds of a process (its threads included)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def timed(phase, cluster):
    """phase()'s seconds and where the CPU went meanwhile: the machine's
    busy fraction (all cores, every process: ours, the kernel's softirqs
    of the links, and other users of the machine) and the CPU seconds of
    kvc-fuse, of the kvc-storage servers together and of the load (this
    process's threads)."""
    def sample():
        storage = sum(process_seconds(p.pid) for name, p in cluster.procs.items()
                      if name.startswith("h"))
        return (*cpu_times(), process_seconds(cluster.procs["fuse"].pid), storage,
                process_seconds(os.getpid()))
    before = sample()
    seconds = phase()
    d = [b - a for a, b in zip(before, sample())]
    return seconds, dict(busy=d[0] / max(d[1], 1e-9), fuse_s=d[2], storage_s=d[3], load_s=d[4])


def cpu_text(c):
    return (f"CPU {c['busy']:.0%} busy (kvc-fuse {c['fuse_s']:.1f} s, storage "
            f"{c['storage_s']:.1f} s, load {c['load_s']:.1f} s)")


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def run_one(args, topo, workdir, hosts, replicas):
    """One configuration on a fresh cluster: (write GB/s, read GB/s, write
    CPU busy, read CPU busy)."""
    base = tempfile.mkdtemp(prefix=f"r{hosts}x{replicas}-", dir=workdir)
    mount = tempfile.mkdtemp(prefix="mnt-", dir=workdir)
    cluster = Cluster(topo, hosts, replicas, args.bin, args.port, base, mount)
    per_file = args.size // args.jobs // BLOCK * BLOCK
    total = per_file * args.jobs
    try:
        cluster.start()
        progress(f"  writing {args.jobs} x {per_file >> 20} MiB (O_DIRECT, 4 MiB writes)")
        seconds, wcpu = timed(lambda: write_files(mount, args.jobs, per_file), cluster)
        w = total / seconds / 1e9
        progress(f"  write {w:.3f} GB/s in {seconds:.1f} s, {cpu_text(wcpu)}")
        progress("  dropping caches")
        drop_caches()
        seconds, rcpu = timed(lambda: read_files(mount, args.jobs, per_file), cluster)
        r = total / seconds / 1e9
        progress(f"  read {r:.3f} GB/s in {seconds:.1f} s, {cpu_text(rcpu)}")
        return w, r, wcpu, rcpu
    finally:
        cluster.stop()
        os.rmdir(mount) if not os.path.ismount(mount) else None
        shutil.rmtree(base, ignore_errors=True)


def report(rows, label, json_path, extra):
    print(f"{'benchmark':<44} {'GB/s':>9} {'IOPS':>10} {'p50 us':>9} {'p99 us':>9} "
          f"{label:>10}")
    for r in rows:
        gbps = f"{r['gbps']:9.3f}" if r["gbps"] else f"{'FAILED':>9}"
        ratio = f"{r['ratio']:9.2f}x" if r["ratio"] else f"{'-':>10}"
        print(f"{r['name']:<44} {gbps} {'-':>10} {'-':>9} {'-':>9} {ratio}")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(dict(ratio=label, results=rows, **extra), f)
            f.write("\n")
        print(f"JSON written to {json_path}")


class Stop(Exception):
    pass


def on_signal(signum, frame):
    raise Stop(f"signal {signum}")


def main(argv):
    args = arguments(argv)
    if os.geteuid() != 0:
        sys.stderr.write(f"{PROG}: needs root (network namespaces, tc, drop_caches, "
                         "mounts): run it as root\n")
        return 1
    for name in ("kvc-meta", "kvc-storage", "kvc-fuse"):
        if not os.access(os.path.join(args.bin, name), os.X_OK):
            sys.stderr.write(f"{PROG}: no {name} in {args.bin} (--bin DIR)\n")
            return 1
    for tool in ("ip", "tc", "fusermount3"):
        if not shutil.which(tool):
            sys.stderr.write(f"{PROG}: {tool} is not installed\n")
            return 1
    top = max(args.hosts)
    plan = [(n, 1) for n in args.hosts]
    if top >= 3:
        plan.append((top, 3))
    else:
        progress(f"no replicas 3 run: it needs 3 hosts (--hosts has at most {top})")
    topo = Topology(top, args.subnet, args.rate)
    workdir = tmpfs = None
    results, failed = {}, 0
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        workdir = tempfile.mkdtemp(prefix="kvc-mhbench-")
        tmpfs = os.path.join(workdir, "tmpfs")
        topo.up()
        for i, (hosts, replicas) in enumerate(plan, 1):
            progress(f"run {i}/{len(plan)}: {hosts} host{'s' if hosts > 1 else ''}, "
                     f"replicas {replicas}, {args.size >> 20} MiB")
            os.mkdir(tmpfs)
            sh("mount", "-t", "tmpfs", "-o", "mode=0700", "kvc-mhbench", tmpfs)
            try:
                results[(hosts, replicas)] = run_one(args, topo, tmpfs, hosts, replicas)
            except (RuntimeError, OSError) as e:
                failed += 1
                progress(f"  FAILED: {e}")
                if not args.keep_going:
                    raise
            finally:
                sh("umount", tmpfs, check=False)
                os.rmdir(tmpfs)
    except Stop as e:
        progress(f"interrupted ({e}): tearing down")
        failed = failed or 1
        results = {}
    except (RuntimeError, OSError) as e:
        sys.stderr.write(f"{PROG}: {e}\n")
        failed = failed or 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)  # the teardown runs to its end
        for cluster in list(ACTIVE):
            cluster.stop()
        if tmpfs and os.path.ismount(tmpfs):
            sh("umount", "-l", tmpfs, check=False)  # and whatever is mounted under it
        topo.down()
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
        left = topo.leftovers()
        progress("torn down" + (f"; LEFT BEHIND: {' '.join(left)}" if left else ""))
    if not results:
        return 1
    rate_gbps = args.rate / 8 / 1e9
    none = (0, 0, {}, {})
    one = results.get((min(args.hosts), 1), none)[1] / min(args.hosts)
    rows = []
    for n in args.hosts:
        r, cpu = results.get((n, 1), none)[1::2]
        rows.append(dict(name=f"read, {n} host{'s' if n > 1 else ''}, replicas 1 "
                         f"(links {n * rate_gbps:.3f})", kind="read", hosts=n, replicas=1,
                         gbps=r, link_gbps=n * rate_gbps, cpu=cpu,
                         ratio=r / (n * one) if r and one else 0))
    if top >= 3:
        w1, w3 = results.get((top, 1), none)[0], results.get((top, 3), none)[0]
        for rep, w in ((1, w1), (3, w3)):
            rows.append(dict(name=f"write, {top} hosts, replicas {rep} (link {rate_gbps:.3f})",
                             kind="write", hosts=top, replicas=rep, gbps=w,
                             link_gbps=rate_gbps, cpu=results.get((top, rep), none)[2],
                             ratio=w / w1 if w and w1 else 0))
        r3, cpu = results.get((top, 3), none)[1::2]
        rows.append(dict(name=f"read, {top} hosts, replicas 3 (links {top * rate_gbps:.3f})",
                         kind="read", hosts=top, replicas=3, gbps=r3, cpu=cpu,
                         link_gbps=top * rate_gbps, ratio=0))
    for row in rows:
        row.update(iops=0.0, p50_us=0.0, p99_us=0.0)
    report(rows, "ratio", args.json,
           dict(rate_bps=args.rate, size=args.size, jobs=args.jobs,
                ratio_meaning="reads: GB/s / (N x one host's GB/s); writes: replicas 3 / "
                              "replicas 1"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
