"""Hosts come from the manager (issue 12): clients whose cluster file names
no storage servers read and write through the managers' routing table, and
a host added to the running cluster (kvc-storage --join, then kvc-admin
add-host) takes new files' chunks while old files read as before.

One cluster of its own: two storage servers of one target, replicas 1, one
manager (ports PORT_BASE + 900 .., HTTP PORT_BASE + 8900); the joining
host listens on PORT_BASE + 903."""
import json
import os
import re
import signal
import subprocess

import pytest

from chain_helpers import chunk_files, scrape
from conftest import (BUILD, CHUNK, PORT_BASE, _drop_caches, chained_cluster, drop_second_mount,
                      second_mount, wait_until)

BASE = PORT_BASE + 900


@pytest.fixture(scope="module")
def hc():
    with chained_cluster("hosts", BASE, PORT_BASE + 8900, 2, 1, 1, managers=1) as c:
        yield c


def without_storage(text):
    """The cluster file with its [storage NAME] sections left out."""
    out, skipping = [], False
    for line in text.splitlines():
        if line.startswith("["):
            skipping = line.startswith("[storage")
        if not skipping:
            out.append(line)
    return "\n".join(out) + "\n"


def admin(conf, *args, check=True):
    return subprocess.run([str(BUILD / "kvc-admin"), "--config", str(conf), *args],
                          check=check, capture_output=True, text=True, timeout=60)


def status(conf):
    return json.loads(admin(conf, "--json", "status", check=False).stdout)


def host_metrics(c):
    """(admitted, pending, spare targets) on the leading manager's metrics."""
    m = scrape(c.manager_metrics[0])
    assert m["kvc_mgmt_leader"] == 1
    return (m['kvc_mgmt_hosts{state="admitted"}'], m['kvc_mgmt_hosts{state="pending"}'],
            m["kvc_mgmt_spare_targets"])


def test_a_client_without_storage_sections_and_a_host_added(hc):
    client_conf = hc.dir / "client.conf"
    client_conf.write_text(without_storage(hc.conf.read_text()))
    assert "[storage" not in client_conf.read_text()

    # kvc-admin names the servers from the table (once a manager leads).
    assert wait_until(lambda: len(status(client_conf)["storage"]) == 2, timeout=20)
    st = status(client_conf)
    assert [s["name"] for s in st["storage"]] == ["s1", "s2"]
    assert [h["state"] for h in st["hosts"]] == ["admitted", "admitted"]
    assert len(st["chains"]) == 2
    assert host_metrics(hc) == (2, 0, 0)

    proc, mount = second_mount(hc, conf=client_conf)
    joiner = None
    try:
        old = {}
        for i in range(4):
            data = os.urandom(3 * CHUNK + 1234 * i)
            with open(os.path.join(mount, f"old{i}"), "wb") as f:
                f.write(data)
            old[f"old{i}"] = data
        for name, data in old.items():
            with open(os.path.join(mount, name), "rb") as f:
                assert f.read() == data

        # A new host: a cluster file with the managers and its own section.
        target = hc.dir / "s3" / "t0"
        host_conf = hc.dir / "host.conf"
        host_conf.write_text(without_storage(hc.conf.read_text()) +
                             f"\n[storage s3]\naddress = 127.0.0.1:{BASE + 3}\n"
                             f"target = {target}\n")
        log = open(hc.dir / "s3-join.log", "ab")
        joiner = subprocess.Popen([str(BUILD / "kvc-storage"), "--config", str(host_conf),
                                   "--name", "s3", "--join"], stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)

        def pending():
            hosts = status(client_conf).get("hosts", [])
            return any(h["name"] == "s3" and h["state"] == "pending" for h in hosts)
        assert wait_until(pending, timeout=20)
        assert len(status(client_conf)["chains"]) == 2  # pending: nothing changed
        assert host_metrics(hc) == (2, 1, 0)

        # Bad uses: clear errors.
        bad = admin(client_conf, "add-host", "nosuch", check=False)
        assert bad.returncode == 1 and "no pending host" in bad.stderr

        added = admin(client_conf, "--json", "add-host", "s3")
        answer = json.loads(added.stdout)
        assert answer["added"] and answer["server"] == 2 and answer["first_target"] == 2
        twice = admin(client_conf, "add-host", "s3", check=False)
        assert twice.returncode == 1 and "admitted already" in twice.stderr

        # Once it serves and heartbeats, its target makes a chain of its own.
        def chained():
            st = status(client_conf)
            return len(st["chains"]) == 3 and st["chains"][2]["targets"] == [2]
        assert wait_until(chained, timeout=30)
        st = status(client_conf)
        assert [s["name"] for s in st["storage"]] == ["s1", "s2", "s3"]
        s3 = [h for h in st["hosts"] if h["name"] == "s3"][0]
        assert s3["state"] == "admitted" and s3["heartbeat_age_ms"] >= 0
        assert st["spare_targets"] == []
        assert host_metrics(hc) == (3, 0, 0)

        # New files stripe over the three chains: some land on the new host.
        assert chunk_files(target) == []
        new = {}
        for i in range(6):
            data = os.urandom(3 * CHUNK + 99 * i)
            with open(os.path.join(mount, f"new{i}"), "wb") as f:
                f.write(data)
            new[f"new{i}"] = data
        files = chunk_files(target)
        assert files, "no chunk of the new files on the added host"
        assert all(re.search(r"/chunks/[0-9a-f]{2}/[0-9a-f]{16}\.[0-9a-f]{8}$", f)
                   for f in files)
        st = status(client_conf)
        t2 = [t for s in st["storage"] for t in s["targets"] if t["id"] == 2][0]
        assert t2["chunks"] >= len(files)  # small last chunks live in the index
        # Old files read as before (their layout names the first two chains),
        # new ones read back whole, through the client and the full file's.
        for name, data in {**old, **new}.items():
            with open(os.path.join(mount, name), "rb") as f:
                assert f.read() == data
            with open(hc.mount / name, "rb") as f:
                assert f.read() == data

        # Restarted without --join, from its own-section file (whose ids
        # would start at 0), it takes its ids from the table: server 2,
        # target 2, and serves its chunks again.
        joiner.send_signal(signal.SIGKILL)
        joiner.wait()
        joiner = subprocess.Popen([str(BUILD / "kvc-storage"), "--config", str(host_conf),
                                   "--name", "s3"], stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        assert wait_until(lambda: "member: server 2, targets 2..2" in
                          (hc.dir / "s3-join.log").read_text(), timeout=20)
        _drop_caches()

        def new_files_read():
            try:
                for name, data in new.items():
                    with open(os.path.join(mount, name), "rb") as f:
                        if f.read() != data:
                            return False
                return True
            except OSError:
                return False
        assert wait_until(new_files_read, timeout=30)
        for name in new:
            os.unlink(os.path.join(mount, name))
    finally:
        if joiner:
            joiner.send_signal(signal.SIGKILL)
            joiner.wait()
        drop_second_mount(proc, mount)


def test_register_of_an_admitted_name_with_another_address_is_refused(hc):
    """A second host claiming an admitted host's name is refused at once."""
    host_conf = hc.dir / "impostor.conf"
    host_conf.write_text(without_storage(hc.conf.read_text()) +
                         f"\n[storage s1]\naddress = 127.0.0.1:{BASE + 4}\n"
                         f"target = {hc.dir}/imp/t0\n")
    out = subprocess.run([str(BUILD / "kvc-storage"), "--config", str(host_conf), "--name",
                          "s1", "--join"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "another address or target count" in out.stderr


def test_a_host_never_admitted_does_not_start_without_join(hc):
    """Without --join, a host the table does not name is refused (and not
    listed as pending): its file's ids would name other hosts' targets."""
    host_conf = hc.dir / "stranger.conf"
    host_conf.write_text(without_storage(hc.conf.read_text()) +
                         f"\n[storage s9]\naddress = 127.0.0.1:{BASE + 5}\n"
                         f"target = {hc.dir}/s9/t0\n")
    out = subprocess.run([str(BUILD / "kvc-storage"), "--config", str(host_conf), "--name",
                          "s9"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "names no host of that name" in out.stderr and "--join" in out.stderr
    assert not any(h["name"] == "s9" for h in status(hc.conf).get("hosts", []))
    assert not os.path.exists(hc.dir / "s9" / "t0")  # refused before opening it


def test_add_host_help_and_without_managers(hc):
    out = admin(hc.conf, "add-host", "--help")
    assert out.returncode == 0 and "add-host NAME" in out.stdout
    out = subprocess.run([str(BUILD / "kvc-storage"), "--help"], capture_output=True,
                         text=True)
    assert "--join" in out.stdout
