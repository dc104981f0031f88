"""Helpers of the chain suites (test_replication, test_resync, test_manager,
test_hosts, test_multihost_chains and its harness): what the managers'
table says (kvc-admin status --json), where a target lives, a target's
chunk listing (CHUNK_LIST), files written and checked through the mount,
a USRBIO ring read and a Prometheus scrape.

`c` is a cluster with admin(), storage_addresses, secret() and
targets_per_server (conftest.Cluster; multihost_harness.MultiHost has
the last three and a status() of its own). Targets are numbered in server
order, targets_per_server each."""
import hashlib
import json
import os
import random
import signal
import struct
import subprocess
import urllib.request

import kvcwire
from conftest import CHUNK, _drop_caches
from test_hf3fs_compat import python

TARGETS = 3  # targets per server of the chain suites' clusters
CHUNK_LIST = 72
# write_files' default sizes: small, inline-sized, chunk edges, several chunks
SIZES = [1, 4096, 65536, 65537, CHUNK - 1, CHUNK + 7, 3 * CHUNK + 5]


# -- the managers' table ------------------------------------------------

def status(c):
    return json.loads(c.admin("--json", "status", check=False).stdout)


def chain_table(c):
    """chain id -> chain (id, version, targets, syncing)."""
    return {ch["id"]: ch for ch in status(c)["chains"]}


def members(c):
    """target -> (chain, serving?) from the managers' table."""
    out = {}
    for ch in status(c)["chains"]:
        for t in ch["targets"]:
            out[t] = (ch["id"], t not in ch["syncing"])
    return out


def layout_of(path):
    """(inode, chain ids of the stripe) of a file of the mount."""
    def xattr(name):
        return subprocess.run(["getfattr", "-n", name, "--only-values", str(path)],
                              capture_output=True, text=True, check=True).stdout
    fields = dict(f.split("=", 1) for f in xattr("user.kvc.layout").split())
    return int(xattr("user.kvc.inode")), [int(x) for x in fields["chains"].split(",")]


# -- where a target lives -----------------------------------------------

def server_of_target(target, targets=TARGETS):
    """The name (s1, s2, ..) of the server of target (of conftest's
    clusters: servers s1.. in order, `targets` targets each)."""
    return f"s{target // targets + 1}"


def targets_of_server(name, targets=TARGETS):
    i = int(name[1:]) - 1
    return set(range(i * targets, (i + 1) * targets))


def target_dir(c, target):
    per = c.targets_per_server
    return c.dir / server_of_target(target, per) / f"t{target % per}"


def chunk_files(directory):
    """Paths of the chunk files under a target's directory."""
    found = []
    for root, _, files in os.walk(os.path.join(directory, "chunks")):
        found += [os.path.join(root, f) for f in files]
    return found


def kill(c, name, sig=signal.SIGKILL):
    os.kill(c.pid(name), sig)


# -- a target's chunks, asked of its server -----------------------------

def sock_for(c, target):
    sock, st = kvcwire.connect(c.storage_addresses[target // c.targets_per_server],
                               c.secret())
    assert st == 0
    return sock


def call(sock, msg_type, body, data=b""):
    sock.sendall(kvcwire.frame(msg_type, body, data))
    _, status, reply, data = kvcwire.recv_frame(sock)
    return status, reply


def listing(c, target, page=1000):
    """Every chunk of target: {(inode, chunk): (length, crc)}, in order."""
    out, after, cursor = {}, 0, (0, 0)
    with sock_for(c, target) as sock:
        while True:
            st, reply = call(sock, CHUNK_LIST,
                             struct.pack("<QIIIIII", cursor[0], cursor[1], target, page, after, 0, 0))
            assert st == 0, st
            count, more = struct.unpack_from("<II", reply)
            assert len(reply) == 8 + 24 * count
            keys = []
            for i in range(count):
                inode, chunk, length, crc, _ = struct.unpack_from("<QIIII", reply, 8 + 24 * i)
                keys.append((inode, chunk))
                out[(inode, chunk)] = (length, crc)
            assert keys == sorted(keys) and len(set(keys)) == count
            if not more:
                return out
            cursor, after = keys[-1], 1


# -- files through the mount --------------------------------------------

def write_files(directory, count, seed, prefix="f", sizes=SIZES):
    """count files of random sizes (fsync'ed): path -> sha256."""
    rng = random.Random(seed)
    files = {}
    for i in range(count):
        size = rng.choice(sizes)
        data = rng.randbytes(size)
        path = directory / f"{prefix}{i}"
        with open(path, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        files[path] = hashlib.sha256(data).hexdigest()
    return files


def check_files(files):
    _drop_caches()
    for path, digest in files.items():
        with open(path, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == digest, path


def ring_read_all(paths_and_sizes):
    """Read files through a USRBIO ring as vLLM's client does."""
    script = """
import hashlib, json, multiprocessing, os, sys
from hf3fs_fuse.io import make_iovec, make_ioring, register_fd, deregister_fd, extract_mount_point
items = json.loads(sys.argv[1])
out = {}
for path, size in items:
    fd = os.open(path, os.O_RDONLY)
    register_fd(fd)
    mount = extract_mount_point(path)
    shm = multiprocessing.shared_memory.SharedMemory(size=max(size, 4096), create=True)
    iov = make_iovec(shm, mount)
    shm.unlink()
    ior = make_ioring(mount, 4, for_read=True, timeout=1, numa=-1)
    ior.prepare(iov[0:size], True, fd, 0)
    res = ior.submit().wait(min_results=1)
    assert res[0].result == size, (path, res[0].result)
    out[path] = hashlib.sha256(bytes(shm.buf[:size])).hexdigest()
    del ior, iov
    shm.close()
    deregister_fd(fd)
    os.close(fd)
print(json.dumps(out))
"""
    return json.loads(python(script, json.dumps(paths_and_sizes)).strip().splitlines()[-1])


# -- metrics ------------------------------------------------------------

def scrape(address):
    """A daemon's Prometheus metrics: series (name{labels}) -> value."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values
