"""Differential test: the same random sequence of POSIX calls on a local
directory and on the mount, one client and two (calls alternate between two
mounts of one cluster), every result compared: return value or errno, bytes
read, a file's type, size and link count, a directory's sorted listing.

The name space is small (3 directories of 6 names, some nested) so calls
collide: creates over existing files, renames over each other, removals of
names another client just made, descriptors held open across another
client's rewrite. Early creates and removals (a directory whose names
kvc-fuse keeps) come in through the many lookups of absent names.

Two clients promise close-to-open and changes seen within an event's trip
(docs/operations.md "Caching and visibility"), not one host's ordering: on a
switch of client a call that reads is asked again for up to EVENT_WAIT
before it counts as a divergence, and writes go through open, write, close
(a descriptor held for writing on one client is one host's business). A
divergence fails with the seed and the calls up to it, to replay."""
import errno
import os
import random
import shutil
import stat
import time

import pytest

DIRS = ["d0", "d1", "d2"]
NAMES = [f"n{i}" for i in range(6)]
EVENT_WAIT = 0.5
READS = {"read", "stat", "listdir", "fread", "fstat", "miss"}


def a_path(r, tight):
    """A path; tight (two clients): fewer names, so each client's calls
    meet the other's more often."""
    d = r.choice(DIRS[:2] if tight else DIRS)
    names = NAMES[:3] if tight else NAMES
    if r.random() < 0.15:
        return f"{d}/{r.choice(NAMES[:2])}/{r.choice(names)}"
    return f"{d}/{r.choice(names)}"


def a_call(r, two):
    kind = r.choices(["create", "append", "pwrite", "excl", "read", "stat", "listdir", "unlink",
                      "rename", "link", "mkdir", "rmdir", "truncate", "miss", "fopen", "fread",
                      "fstat", "fclose"],
                     weights=[12, 4, 3, 3, 8, 8, 5, 7, 7, 3, 4, 2, 3, 6, 3, 3, 3, 3])[0]
    return {"kind": kind, "client": r.randint(0, 1) if two else 0, "path": a_path(r, two),
            "to": a_path(r, two), "dir": r.choice(DIRS + [f"{d}/{n}" for d in DIRS for n in NAMES[:2]]),
            "size": r.choice([0, 1, 100, 4096, 5000, 70000]), "offset": r.randint(0, 6000),
            "slot": r.randint(0, 2), "byte": r.randint(0, 255)}


def outcome(fn):
    try:
        return ("ok", fn())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


def sized(st):
    """A file's type and size (a directory's size is the filesystem's own
    business: ext4 says 4096, kvcfs 0)."""
    return ("dir", 0) if stat.S_ISDIR(st.st_mode) else ("file", st.st_size)


def describe(path):
    st = os.lstat(path)
    return sized(st) + (0 if stat.S_ISDIR(st.st_mode) else st.st_nlink,)


class Side:
    """One side of the comparison: a root per client (the local side has
    one root for both) and the descriptors held open, by slot."""

    def __init__(self, roots):
        self.roots = roots
        self.fds = {}

    def run(self, c):
        root = self.roots[c["client"] % len(self.roots)]
        p, to = os.path.join(root, c["path"]), os.path.join(root, c["to"])
        data = bytes([c["byte"]]) * c["size"]
        k = c["kind"]

        def write(flags, at=None):
            fd = os.open(p, flags, 0o644)
            try:
                return os.pwrite(fd, data, at) if at is not None else os.write(fd, data)
            finally:
                os.close(fd)

        def held(slot):
            fd = self.fds.get((c["client"], slot))
            if fd is None:
                raise OSError(errno.EBADF, "no descriptor held")
            return fd

        calls = {
            "create": lambda: write(os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            "append": lambda: write(os.O_WRONLY | os.O_APPEND),
            "pwrite": lambda: write(os.O_WRONLY, c["offset"]),
            "excl": lambda: write(os.O_WRONLY | os.O_CREAT | os.O_EXCL),
            "read": lambda: open(p, "rb").read(),
            "stat": lambda: describe(p),
            "listdir": lambda: sorted(os.listdir(os.path.join(root, c["dir"]))),
            "unlink": lambda: os.unlink(p),
            "rename": lambda: os.rename(p, to),
            "link": lambda: os.link(p, to),
            "mkdir": lambda: os.mkdir(os.path.join(root, c["dir"])),
            "rmdir": lambda: os.rmdir(os.path.join(root, c["dir"])),
            "truncate": lambda: os.truncate(p, c["offset"]),
            "miss": lambda: os.path.lexists(os.path.join(root, c["dir"], f"absent{c['byte']}")),
            "fread": lambda: os.pread(held(c["slot"]), 1 << 20, 0),
            "fstat": lambda: sized(os.fstat(held(c["slot"]))),
        }
        if k == "fopen":
            old = self.fds.pop((c["client"], c["slot"]), None)
            if old is not None:
                os.close(old)
            res = outcome(lambda: os.open(p, os.O_RDONLY))
            if res[0] == "ok":
                self.fds[(c["client"], c["slot"])] = res[1]
                return ("ok", None)
            return res
        if k == "fclose":
            fd = self.fds.pop((c["client"], c["slot"]), None)
            if fd is not None:
                os.close(fd)
            return ("ok", fd is not None)
        return outcome(calls[k])

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def run_seed(seed, count, local, roots):
    r = random.Random(seed)
    two = len(roots) == 2
    for d in DIRS:
        os.mkdir(os.path.join(local, d))
        os.mkdir(os.path.join(roots[0], d))
    ref, fs = Side([local]), Side(roots)
    done, last = [], 0
    try:
        for _ in range(count):
            c = a_call(r, two)
            done.append(c)
            switched = two and c["client"] != last
            last = c["client"]
            if switched:
                time.sleep(0.02)  # the other client's change reaches this one
            want = ref.run(c)
            got = fs.run(c)
            deadline = time.monotonic() + (EVENT_WAIT if two else 0)
            while got != want and c["kind"] in READS and time.monotonic() < deadline:
                time.sleep(0.01)
                got = fs.run(c)
            if got != want:
                calls = "\n".join(f"  {x}" for x in done[-12:])
                pytest.fail(f"seed {seed}, call {len(done)} ({'switched client' if switched else 'same client'}):"
                            f"\n local {want}\n kvcfs {got}\nlast calls:\n{calls}")
    finally:
        ref.close()
        fs.close()


@pytest.mark.parametrize("seed", range(6))
def test_one_client_matches_a_local_directory(workdir, local_tmp, seed):
    local = local_tmp / f"ref-{seed}"
    mine = workdir / f"s{seed}"
    local.mkdir()
    mine.mkdir()
    try:
        run_seed(1000 + seed, 250, str(local), [str(mine)])
    finally:
        shutil.rmtree(local)


@pytest.mark.parametrize("seed", range(6))
def test_two_clients_match_a_local_directory(workdir, other, local_tmp, seed):
    local = local_tmp / f"ref-{seed}"
    mine = workdir / f"s{seed}"
    local.mkdir()
    mine.mkdir()
    try:
        run_seed(2000 + seed, 200, str(local), [str(mine), os.path.join(other, f"s{seed}")])
    finally:
        shutil.rmtree(local)
