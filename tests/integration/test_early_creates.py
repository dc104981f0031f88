"""Early creates (fuse/early_creates.h): in a directory whose names it
keeps, kvc-fuse answers a non-exclusive O_CREAT itself with an inode number
kvc-meta reserved for it, and enters the files it made in batches (ADOPT).
What must hold: every byte and size is there, for this client at once and
for another client within milliseconds; every later call on such a file
(stat, rename, link, chmod, unlink, readdir) finds it; fsync makes it
survive the client's death; an exclusive create still asks kvc-meta; and
the chunks of a file made so and never entered are reclaimed when its
client stops or dies."""
import json
import os
import re
import signal
import stat
import subprocess
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import chunk_files_of, client_conf, drop_second_mount, second_mount, wait_until
from lossy_relay import LossyRelay
from test_keys import keep_names_of, opens, seen_within


def metrics_text(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        return r.read().decode()


def early(cluster, state, what="creates"):
    """kvc_fuse_early_{creates,removals}_total{state=...} of the first
    kvc-fuse."""
    text = metrics_text(cluster.fuse_metrics)
    name = f"kvc_fuse_early_{what}_total"
    m = re.search(r'^%s\{state="%s"\} (\S+)$' % (name, state), text, re.M)
    assert m, f"no {name}"
    return float(m.group(1))


def write_key(path, data):
    with open(path, "wb") as f:  # O_WRONLY|O_CREAT|O_TRUNC, as connectors do
        f.write(data)


def test_keys_made_here_are_entered_with_their_bytes(cluster, workdir, other):
    """Keys written by 8 threads into a kept directory are made here (the
    counter moves by about their number), all entered, none lost; each
    reads back byte for byte here and, within the events' trip, on
    another client, with its size."""
    keep_names_of(cluster, workdir)
    made, entered = early(cluster, "made"), early(cluster, "entered")
    blobs = {f"k-{i}": os.urandom(65536 if i % 3 else 1000 + i) for i in range(400)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: write_key(workdir / kv[0], kv[1]), blobs.items()))
    assert early(cluster, "made") - made >= 300
    assert wait_until(lambda: early(cluster, "entered") - entered == early(cluster, "made") - made,
                      timeout=10)
    assert early(cluster, "lost") == 0
    for name, data in blobs.items():
        assert (workdir / name).read_bytes() == data, name
    for name, data in blobs.items():
        theirs = os.path.join(other, name)
        assert seen_within(lambda: opens(theirs) == data) is not None, name
        assert os.stat(theirs).st_size == len(data)
    assert sorted(os.listdir(other)) == sorted(n for n in os.listdir(workdir))


def test_every_call_on_a_file_made_here_finds_it(cluster, workdir):
    """Right after an early create, while the file may still wait to be
    entered, each kind of call that kvc-meta must answer for it works:
    kvc-meta gets the file first."""
    keep_names_of(cluster, workdir)
    made = early(cluster, "made")
    checks = []
    for i, call in enumerate(["stat", "rename", "link", "chmod", "unlink", "listdir",
                              "truncate", "xattr", "reopen"]):
        path = workdir / f"f-{i}"
        write_key(path, b"x" * (100 + i))
        if call == "stat":
            checks.append(os.stat(path).st_size == 100 + i)
        elif call == "rename":
            os.rename(path, workdir / "renamed")
            checks.append((workdir / "renamed").read_bytes() == b"x" * (100 + i))
        elif call == "link":
            os.link(path, workdir / "hard")
            checks.append(os.stat(workdir / "hard").st_nlink == 2)
        elif call == "chmod":
            os.chmod(path, 0o600)
            checks.append(stat.S_IMODE(os.stat(path).st_mode) == 0o600)
        elif call == "unlink":
            os.unlink(path)
            checks.append(not os.path.exists(path))
        elif call == "listdir":
            checks.append(path.name in os.listdir(workdir))
        elif call == "truncate":
            os.truncate(path, 10)
            checks.append(path.read_bytes() == b"x" * 10)
        elif call == "xattr":
            os.setxattr(path, "user.k", b"v")
            checks.append(os.getxattr(path, "user.k") == b"v")
        elif call == "reopen":
            with open(path, "r+b") as f:
                f.seek(0, 2)
                f.write(b"yy")
            checks.append(path.read_bytes() == b"x" * (100 + i) + b"yy")
    assert all(checks), checks
    assert early(cluster, "made") - made >= 8
    assert early(cluster, "lost") == 0


def test_only_truncating_creates_are_made_here(cluster, workdir):
    """O_EXCL must be decided by kvc-meta, and an O_CREAT without O_TRUNC
    (O_APPEND: a log) must keep a file another client made meanwhile:
    neither is ever made here."""
    keep_names_of(cluster, workdir)
    made = early(cluster, "made")
    for i in range(20):
        fd = os.open(workdir / f"x-{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"x")
        os.close(fd)
        fd = os.open(workdir / f"a-{i}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, b"a")
        os.close(fd)
    assert early(cluster, "made") == made
    with pytest.raises(FileExistsError):
        os.open(workdir / "x-3", os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    assert (workdir / "a-3").read_bytes() == b"a"


def test_a_directory_s_times_set_after_creates_in_it_stay(cluster, workdir):
    """tar, rsync -a and cp -a create a directory's files, then restore the
    directory's times: the ADOPT of those files (which touches the
    directory) must not land after the utimensat."""
    keep_names_of(cluster, workdir)
    made = early(cluster, "made")
    for round in range(5):
        for i in range(20):
            write_key(workdir / f"t-{round}-{i}", b"t")
        os.utime(workdir, (1_000_000_000 + round, 1_000_000_000 + round))
        time.sleep(0.02)  # every batch long entered
        assert os.stat(workdir).st_mtime == 1_000_000_000 + round
    assert early(cluster, "made") - made >= 50


def test_a_file_whose_directory_went_is_lost_and_fsync_says_so(cluster, workdir, other):
    """A file made here waits (open, up to 5 ms) to be entered; another
    client removes its directory meanwhile (empty in kvc-meta): kvc-meta
    refuses the file, which is lost: counted, its I/O fails, and fsync
    does not claim it durable."""
    raced = 0
    for attempt in range(10):
        d = workdir / f"gone-{attempt}"
        d.mkdir()
        keep_names_of(cluster, d)
        write_key(d / "first", b"")  # made by kvc-meta: the directory's
        os.unlink(d / "first")      # attributes are held from now on
        lost = early(cluster, "lost")
        f = open(d / "f", "wb")
        try:
            os.rmdir(os.path.join(other, d.name))
        except OSError:  # the file was entered first: no race this time
            f.close()
            continue
        raced += 1
        assert wait_until(lambda: early(cluster, "lost") > lost, timeout=10)
        with pytest.raises(OSError):
            f.write(b"late")
            f.flush()
            os.fsync(f.fileno())
        try:
            f.close()
        except OSError:
            pass
        assert not d.exists()
        break
    assert raced, "the directory was never removed before its file was entered"
    # (early creates now pause for 10 s: later tests' creates ask kvc-meta)


def keep_names_on(mount_dir):
    """Look up absent names in a directory of a second client until its
    kvc-fuse keeps the directory's names (fuse/dir_names.h)."""
    for i in range(8):
        assert not os.path.exists(os.path.join(mount_dir, f".miss-{i}"))
    time.sleep(0.5)


def their_new_dir(cluster, workdir, mount2, name):
    """A new directory of workdir whose names the kvc-fuse of mount2
    keeps: (directory as the first client sees it, its path in mount2)."""
    d = workdir / name
    d.mkdir()
    theirs = os.path.join(mount2, d.relative_to(cluster.mount))
    keep_names_on(theirs)
    return d, theirs


def test_a_fsynced_early_file_survives_its_client_s_death(cluster, workdir):
    """fsync enters the file in kvc-meta before it answers: after kill -9
    of the kvc-fuse that made it, the file is there, whole, for everyone."""
    proc, mount2 = second_mount(cluster)
    try:
        theirs = os.path.join(mount2, workdir.relative_to(cluster.mount))
        keep_names_on(theirs)
        blobs = {f"s-{i}": os.urandom(65536) for i in range(30)}
        for name, data in blobs.items():
            with open(os.path.join(theirs, name), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        for name, data in blobs.items():
            assert (workdir / name).read_bytes() == data, name
    finally:
        drop_second_mount(proc, mount2)


def slow_entry_mount(cluster):
    """A second kvc-fuse whose files made here stay unentered while open
    (early_open_delay_ms of 10 minutes): (process, mountpoint)."""
    conf = cluster.dir / "cluster-slow-entry.conf"
    conf.write_text(cluster.conf.read_text().replace(
        "[fuse]\n", "[fuse]\nearly_open_delay_ms = 600000\n"))
    return second_mount(cluster, conf)


def make_unentered(cluster, workdir, mount2, name):
    """In a new directory of workdir, through mount2: a file made there
    (early), 1 MiB written to the storage servers, still open. Returns
    (directory as the first client sees it, the open file, its inode)."""
    d, theirs = their_new_dir(cluster, workdir, mount2, name)
    write_key(os.path.join(theirs, "first"), b"")  # the directory's attributes
    os.unlink(os.path.join(theirs, "first"))       # are held from now on
    f = open(os.path.join(theirs, "f"), "wb")
    f.write(os.urandom(1 << 20))
    f.flush()
    ino = os.fstat(f.fileno()).st_ino
    assert chunk_files_of(cluster, ino), "its bytes are on the storage servers"
    assert not (d / "f").exists(), "made by the second client, not entered yet"
    return d, f, ino


def test_an_overwrite_after_a_flush_never_shrinks_a_file_made_here(cluster, workdir):
    """A file made here and not entered yet takes its size with it (the
    flush folds it into the entry). A flush (close of a dup), then an
    overwrite of its first bytes, then close: the second flush sends only
    the overwrite's end, and the file stays 100 bytes, here and on another
    client, never 10."""
    proc, mount2 = slow_entry_mount(cluster)
    try:
        d, theirs = their_new_dir(cluster, workdir, mount2, "fold")
        fd = os.open(os.path.join(theirs, "f"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, b"a" * 100)
        os.close(os.dup(fd))  # a flush: the size folded into the waiting entry
        os.pwrite(fd, b"H" * 10, 0)
        os.close(fd)
        want = b"H" * 10 + b"a" * 90
        assert opens(os.path.join(theirs, "f")) == want
        assert os.stat(os.path.join(theirs, "f")).st_size == 100
        assert wait_until(lambda: opens(d / "f") == want, timeout=10)
        assert os.stat(d / "f").st_size == 100
    finally:
        drop_second_mount(proc, mount2)


def test_a_lost_file_s_chunks_are_reclaimed_at_once(cluster, workdir):
    """A file made early whose directory another client removed before it
    was entered is lost (kvc-meta refuses it): kvc-meta settles its number
    and its collector removes the lost file's chunks at once, by the
    file's own layout; the client's grants go back when it unmounts."""
    proc, mount2 = slow_entry_mount(cluster)
    try:
        d, f, ino = make_unentered(cluster, workdir, mount2, "lost-dir")
        # The directory is empty in kvc-meta: the first client removes it.
        assert wait_until(lambda: not d.exists() or _rmdir(d), timeout=10)
        try:
            f.close()  # it may go now, and is refused: its directory went
        except OSError:
            pass
        assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=30), \
            "the lost file's chunks stay on the storage servers"
        held = grants(cluster)
        assert held >= 2, "both clients hold grants (kvc-admin status)"
        subprocess.run(["fusermount3", "-u", mount2], check=True, timeout=60)
        assert proc.wait(timeout=60) == 0
        assert grants(cluster) < held, "the unmounted client's grants were given back"
        log = (cluster.dir / "fuse2.log").read_text(errors="replace")
        assert "refused by kvc-meta" in log
    finally:
        drop_second_mount(proc, mount2)


def test_a_file_held_open_stays_unentered_through_watches_and_a_kvc_meta_restart(
        cluster, workdir):
    """A file made here and held open waits for its early_open_delay_ms
    (10 minutes on this mount): neither the pass that keeps open files
    watched (its first at the first renewal, then every half cache ttl:
    5 s) nor a reopen (a new client's first renewal asks for one, and a
    kvc-meta restart does) enters it (each did: an OPEN or GETATTR of an
    inode waits for its entry); its entry opens its session in the new
    process, and its close enters it with its bytes."""
    proc, mount2 = slow_entry_mount(cluster)
    log = cluster.dir / "fuse2.log"
    try:
        d, f, ino = make_unentered(cluster, workdir, mount2, "held-dir")
        time.sleep(6.5)  # past a watch pass after the file was made
        assert not (d / "f").exists(), \
            "a watch pass, or the reopen a new client makes at its first renewal, entered it"
        reopens = log.read_text(errors="replace").count("reopening")
        cluster.restart("meta", "KILL")
        assert wait_until(lambda: log.read_text(errors="replace").count("reopening") > reopens,
                          timeout=20), "the second client did not reopen its files"
        time.sleep(0.5)
        assert not (d / "f").exists(), "the reopen after the restart entered it"
        data = os.urandom((1 << 20) + 3)
        f.seek(0)
        f.write(data)
        f.close()
        assert wait_until(lambda: (d / "f").exists(), timeout=10)
        assert (d / "f").read_bytes() == data
        assert os.stat(d / "f").st_ino == ino
    finally:
        drop_second_mount(proc, mount2)


def test_lookups_and_listings_elsewhere_leave_a_directory_s_files_waiting(cluster, workdir):
    """A LOOKUP or READDIR waits only for the files made in its own
    directory: listing or looking up names in another directory leaves a
    file made (and still open) here unentered, and a listing of its own
    directory enters it first (so the listing shows it)."""
    proc, mount2 = slow_entry_mount(cluster)
    try:
        d, f, ino = make_unentered(cluster, workdir, mount2, "waiting-dir")
        elsewhere = workdir / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "x").write_bytes(b"x")
        theirs = os.path.join(mount2, elsewhere.relative_to(cluster.mount))
        for i in range(20):  # lookups kvc-meta answers, and listings
            assert os.path.exists(os.path.join(theirs, "x"))
            assert not os.path.exists(os.path.join(theirs, f"absent-{i}"))
            assert os.listdir(theirs) == ["x"]
        time.sleep(0.3)
        assert not (d / "f").exists(), "a lookup elsewhere entered this directory's file"
        mine = os.path.join(mount2, d.relative_to(cluster.mount))
        assert os.listdir(mine) == ["f"]
        assert wait_until(lambda: (d / "f").exists(), timeout=5), \
            "the listing of its directory entered it"
        f.close()
    finally:
        drop_second_mount(proc, mount2)


def test_a_listing_never_caches_attributes_older_than_waiting_entries(cluster, workdir):
    """readdirplus answers a subdirectory's and a linked file's attributes
    from kvc-meta; entries still waiting here change them (a file made in
    the subdirectory, a removal of another name of the file). Such an
    entry gets no cache time: a stat after the listing shows the client's
    own changes (the later mtime, the lower link count)."""
    proc, mount2 = slow_entry_mount(cluster)
    try:
        top = workdir / "listed"
        (top / "sub").mkdir(parents=True)
        (top / "other").mkdir()
        theirs = os.path.join(mount2, top.relative_to(cluster.mount))
        sub, other = os.path.join(theirs, "sub"), os.path.join(theirs, "other")
        keep_names_on(sub)
        keep_names_on(other)
        write_key(os.path.join(other, "g"), b"linked")  # made here, entered at once
        os.link(os.path.join(other, "g"), os.path.join(theirs, "h"))
        write_key(os.path.join(sub, "first"), b"")    # the directories' attributes
        os.unlink(os.path.join(sub, "first"))         # are held from now on
        write_key(os.path.join(other, "first"), b"")
        os.unlink(os.path.join(other, "first"))
        time.sleep(0.05)
        before = time.time_ns()
        held = open(os.path.join(sub, "f"), "wb")       # waits (open, 10 min)
        os.unlink(os.path.join(other, "g"))           # queued behind it
        assert not (top / "sub" / "f").exists(), "the file waits"
        assert os.stat(top / "h").st_nlink == 2, "and so does the removal"
        names = os.listdir(theirs)                    # readdirplus of the parent
        assert sorted(names) == ["h", "other", "sub"]
        assert os.stat(sub).st_mtime_ns >= before, "the listing's older mtime was kept"
        assert os.stat(os.path.join(theirs, "h")).st_nlink == 1, \
            "the listing's older link count was kept"
        held.close()
    finally:
        drop_second_mount(proc, mount2)


def test_a_client_given_up_and_back_makes_files_with_new_numbers(cluster, workdir):
    """A kvc-fuse frozen past the client timeout (3 s here) is declared
    gone: its grants are reclaimed. Awake again, it hears ESTALE and asks
    for new numbers (a grant reply for the old ones would be refused), so
    no file it makes from then on is lost: every one is entered, byte for
    byte, and seen by the other client."""
    proc, mount2 = second_mount(cluster)
    try:
        theirs = os.path.join(mount2, workdir.relative_to(cluster.mount))
        keep_names_on(theirs)
        write_key(os.path.join(theirs, "before"), b"before")
        assert wait_until(lambda: (workdir / "before").exists(), timeout=5)
        proc.send_signal(signal.SIGSTOP)  # no file of theirs is open here
        try:
            time.sleep(6)  # past the timeout and the next sweep
        finally:
            proc.send_signal(signal.SIGCONT)
        blobs = {f"after-{i}": os.urandom(4096 + i) for i in range(40)}
        for name, data in blobs.items():
            write_key(os.path.join(theirs, name), data)
        for name, data in blobs.items():
            assert wait_until(lambda: (workdir / name).exists(), timeout=10), name
            assert (workdir / name).read_bytes() == data, name
        assert (workdir / "before").read_bytes() == b"before"
    finally:
        drop_second_mount(proc, mount2)


def grants(cluster):
    return json.loads(cluster.admin("--json", "status").stdout)["meta"]["grants"]


def _rmdir(path):
    try:
        os.rmdir(path)
        return True
    except OSError:
        return False


def test_an_unentered_file_s_chunks_are_reclaimed_when_its_client_dies(cluster, workdir):
    """kill -9 of a kvc-fuse with a file made early, written and never
    entered: once kvc-meta declares the client gone (client_timeout_ms),
    its grants are reclaimed and the file's chunks removed; the name never
    appears."""
    proc, mount2 = slow_entry_mount(cluster)
    try:
        d, f, ino = make_unentered(cluster, workdir, mount2, "killed-dir")
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert wait_until(lambda: not chunk_files_of(cluster, ino), timeout=60), \
            "the dead client's unentered file keeps its chunks"
        assert not (d / "f").exists()
    finally:
        try:
            f.close()
        except (OSError, UnboundLocalError):
            pass
        drop_second_mount(proc, mount2)


def test_unlinks_of_known_keys_are_answered_here(cluster, workdir, other):
    """Keys this client made or looked up in a kept directory are removed
    here and in kvc-meta in batches: gone at once here, within the events'
    trip on another client, and every one of them entered."""
    keep_names_of(cluster, workdir)
    blobs = {f"u-{i}": os.urandom(4096) for i in range(200)}
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: write_key(workdir / kv[0], kv[1]), blobs.items()))
    for name in blobs:  # the other client caches them
        assert seen_within(lambda: opens(os.path.join(other, name)) is not None) is not None
    made, entered = early(cluster, "made", "removals"), early(cluster, "entered", "removals")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: os.unlink(workdir / n), blobs))
    assert early(cluster, "made", "removals") - made >= 150
    for name in blobs:
        assert not (workdir / name).exists()
    assert wait_until(lambda: early(cluster, "entered", "removals") - entered ==
                      early(cluster, "made", "removals") - made, timeout=10)
    for name in blobs:
        assert seen_within(lambda: not os.path.exists(os.path.join(other, name))) is not None
    assert [n for n in os.listdir(other) if n.startswith("u-")] == []
    assert early(cluster, "missed", "removals") == 0
    # The directory's attributes this client keeps as after its removals
    # hear of another client's change (kvc-meta noted them for it).
    os.chmod(other, 0o750)
    assert seen_within(lambda: stat.S_IMODE(os.stat(workdir).st_mode) == 0o750) is not None
    os.chmod(other, 0o755)


def test_an_open_file_removed_here_keeps_its_bytes(cluster, workdir, other):
    """An unlink answered here of a file still open: the open file reads
    back whole, fstat says no links, and the name is gone everywhere."""
    keep_names_of(cluster, workdir)
    data = os.urandom(200000)
    write_key(workdir / "held", data)
    made = early(cluster, "made", "removals")
    with open(workdir / "held", "rb") as f:
        os.unlink(workdir / "held")
        assert early(cluster, "made", "removals") == made + 1
        assert os.fstat(f.fileno()).st_nlink == 0
        assert f.read() == data
        assert seen_within(lambda: not os.path.exists(os.path.join(other, "held"))) is not None
    assert not (workdir / "held").exists()
    write_key(workdir / "held", b"again")  # the name is free again
    assert (workdir / "held").read_bytes() == b"again"
    assert seen_within(lambda: opens(os.path.join(other, "held")) == b"again") is not None


ADOPT = 61  # src/core/wire.h KVC_MSG_ADOPT


def test_an_adopt_whose_answer_was_lost_keeps_its_file_renamed_elsewhere(cluster, workdir):
    """kvc-meta enters a file made early, and its answer never comes back
    (the connection dies after the commit); before the kvc-fuse sends the
    ADOPT again, another client renames the file. kvc-meta refuses the
    second ADOPT (the number is entered already, under another name now):
    the file is not lost for that. The kvc-fuse finds it entered, reads
    its bytes under the new name, and logs no loss."""
    relay = LossyRelay(cluster.meta_address)
    conf = client_conf(cluster, cluster.dir / "cluster-lossy.conf",
                       f"[meta]\naddress = {cluster.meta_address}\n",
                       f"[meta]\naddress = {relay.address}\n")
    log = cluster.dir / "fuse2.log"
    losses = log.read_text(errors="replace").count("the file is lost") if log.exists() else 0
    proc, mount2 = second_mount(cluster, conf)
    try:
        d, theirs = their_new_dir(cluster, workdir, mount2, "lost-answer")
        write_key(os.path.join(theirs, "first"), b"")  # the directory's attributes
        assert wait_until(lambda: (d / "first").exists(), timeout=10)
        made = relay.count(ADOPT)
        data = os.urandom(70000)
        relay.lose_next_answer(ADOPT)
        # The close may wait for the entry (when something asked for it
        # before: the first renewal's reopen does), and so for the relay:
        # it waits io_timeout_ms for an ADOPT that works.
        made_here = {}

        def make():
            try:
                with open(os.path.join(theirs, "f"), "wb") as f:
                    f.write(data)
                    made_here["ino"] = os.fstat(f.fileno()).st_ino
            except OSError as e:
                made_here["error"] = e
        maker = threading.Thread(target=make)
        maker.start()
        try:
            assert relay.lost.wait(20), "no ADOPT went through the relay"
            time.sleep(0.3)  # its sender tries again, and finds kvc-meta out of reach
            # entered by the ADOPT whose answer was lost: renamed by this client
            assert wait_until(lambda: (d / "f").exists(), timeout=10)
            ino = os.stat(d / "f").st_ino
            os.rename(d / "f", d / "g")
        finally:
            relay.reopen()
            maker.join(30)
        assert made_here == {"ino": ino}
        assert wait_until(lambda: relay.count(ADOPT) > made + 1, timeout=20), \
            "the ADOPT was not sent again"
        # a lookup in the directory waits for its files' entries
        assert opens(os.path.join(theirs, "g")) == data
        assert os.stat(os.path.join(theirs, "g")).st_ino == ino
        assert (d / "g").read_bytes() == data
        text = log.read_text(errors="replace")
        assert text.count("the file is lost") == losses, "the file was given up as lost"
        assert "entered by an ADOPT whose answer was lost" in text
    finally:
        drop_second_mount(proc, mount2)
        relay.stop()
