"""kvc-bench multihost on a tiny configuration: storage hosts in network
namespaces (10.79.0.0/24) with links shaped at 200 Mbit/s, 64 MiB per run.
Checks the table and JSON shape (never the figures: the machine is shared)
and that nothing is left behind, after a full run and after Ctrl-C."""
import glob
import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import BUILD, PORT_BASE

BENCH = BUILD / "kvc-bench"
ARGS = ["--size", "small", "--rate", "200mbit", "--subnet", "10.79.0",
        "--port", str(PORT_BASE + 400)]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def tag_of(stderr):
    m = re.search(r"topology (kmb[0-9a-f]{4})", stderr)
    assert m, stderr
    return m.group(1)


def assert_clean(tag):
    """No namespace, link (so no qdisc), route, mount, directory or daemon
    of the run is left."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    assert tag not in names and tag not in links
    assert subprocess.run(["ip", "route", "show", "10.79.0.0/24"], capture_output=True,
                          text=True).stdout.strip() == ""
    with open("/proc/mounts") as f:
        assert "kvc-mhbench-" not in f.read()
    assert glob.glob("/tmp/kvc-mhbench-*") == []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert b"kvc-mhbench-" not in f.read(), pid
        except OSError:
            pass


def test_tiny_run_prints_the_table_and_json_and_cleans_up(tmp_path):
    out_json = tmp_path / "mh.json"
    out = subprocess.run([BENCH, "multihost", "--hosts", "1,3", "--json", out_json, *ARGS],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "run 3/3" in out.stderr and "torn down" in out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split() == ["benchmark", "GB/s", "IOPS", "p50", "us", "p99", "us", "ratio"]
    names = [line[:44].strip() for line in lines[1:6]]
    assert names == ["read, 1 host, replicas 1 (links 0.025)",
                     "read, 3 hosts, replicas 1 (links 0.075)",
                     "write, 3 hosts, replicas 1 (link 0.025)",
                     "write, 3 hosts, replicas 3 (link 0.025)",
                     "read, 3 hosts, replicas 3 (links 0.075)"]
    doc = json.loads(out_json.read_text())
    assert doc["ratio"] == "ratio" and doc["rate_bps"] == 200e6
    rows = doc["results"]
    assert [(r["kind"], r["hosts"], r["replicas"]) for r in rows] == [
        ("read", 1, 1), ("read", 3, 1), ("write", 3, 1), ("write", 3, 3), ("read", 3, 3)]
    for r in rows:
        assert r["gbps"] > 0 and set(r["cpu"]) == {"busy", "fuse_s", "storage_s", "load_s"}
        assert {"name", "gbps", "iops", "p50_us", "p99_us", "ratio", "link_gbps"} <= set(r)
    assert rows[0]["ratio"] == 1.0 and rows[2]["ratio"] == 1.0
    assert rows[1]["ratio"] > 0 and rows[3]["ratio"] > 0 and rows[4]["ratio"] == 0
    assert_clean(tag_of(out.stderr))


def test_ctrl_c_tears_everything_down():
    proc = subprocess.Popen([BENCH, "multihost", "--hosts", "2", *ARGS],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    try:
        for line in proc.stderr:  # wait until a cluster is up and writing
            seen += line
            if "writing" in line:
                break
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        seen += proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0
    assert "writing" in seen
    assert_clean(tag_of(seen))


def test_needs_root_and_checks_its_options():
    out = subprocess.run([BENCH, "multihost", "--hosts", "0"], capture_output=True, text=True)
    assert out.returncode == 2 and "Try 'kvc-bench multihost --help'" in out.stderr
    out = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          BENCH, "multihost"], capture_output=True, text=True)
    if "Permission denied" in out.stderr and "needs root" not in out.stderr:
        pytest.skip("the build directory is not readable by nobody")
    assert out.returncode == 1 and "needs root" in out.stderr
