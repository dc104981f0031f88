"""kvc-bench ring --transports-only: the page-cache baselines (a bare copy,
and a copy with every 16 KiB block's crc checked) and the mount's ring
reads against them, in one run; no file left behind."""
import json
import os
import subprocess

from conftest import BUILD


def test_bench_ring_transports_rows_with_the_checked_baseline(cluster, local_tmp):
    out_json = local_tmp / "ring.json"
    out = subprocess.run([str(BUILD / "kvc-bench"), "ring", "--transports-only", "--mount",
                          str(cluster.mount), "--file-size", "64M", "--seconds", "0.2",
                          "--threads", "2", "--local-dir", str(local_tmp), "--json",
                          str(out_json)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {r["name"]: r for r in json.loads(out_json.read_text())["results"]}
    base = rows["page cache: 2 threads pread 16M blocks of a warm file"]
    checked = rows["page cache + 16K crcs: 2 threads pread 1M / page cache"]
    assert base["gbps"] > 0 and checked["gbps"] > 0
    assert abs(checked["ratio"] - checked["gbps"] / base["gbps"]) < 0.01
    for size in (1, 16):
        for depth in (32, 128):
            row = rows[f"mount ring read {size}M depth {depth} / page cache"]
            assert row["gbps"] > 0 and row["ratio"] > 0
    assert [n for n in os.listdir(local_tmp) if n.startswith(".kvc-bench")] == []
    assert [n for n in os.listdir(cluster.mount) if n.startswith(".kvc-bench")] == []


def test_bench_ring_killed_leaves_no_shared_memory(cluster, local_tmp):
    """kvc-bench's iovs are its own: their names go at once, so a run
    killed mid-way leaves nothing in /dev/shm."""
    import signal
    import time
    before = set(os.listdir("/dev/shm"))
    p = subprocess.Popen([str(BUILD / "kvc-bench"), "ring", "--transports-only", "--mount",
                          str(cluster.mount), "--file-size", "64M", "--seconds", "5",
                          "--threads", "2", "--local-dir", str(local_tmp)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line in p.stderr:
            if line.startswith("warming up"):
                break
        time.sleep(0.5)  # ring reads running
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    left = [n for n in set(os.listdir("/dev/shm")) - before if n.startswith("kvc-")]
    assert left == []
    for n in os.listdir(cluster.mount):
        if n.startswith(".kvc-bench-ring"):
            os.unlink(cluster.mount / n)
