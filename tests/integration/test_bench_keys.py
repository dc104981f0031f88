"""kvc-bench keys: the file-per-key benchmark runs its four phases on a
local directory and on the mount, writes its JSON, and leaves neither
directory behind."""
import json
import os
import subprocess

from conftest import BUILD


def test_bench_keys_measures_both_and_cleans_up(cluster, local_tmp):
    out_json = local_tmp / "keys.json"
    out = subprocess.run([str(BUILD / "kvc-bench"), "keys", "--mount", str(cluster.mount),
                          "--local", str(local_tmp), "--keys", "64", "--threads", "4",
                          "--size", "4K", "--json", str(out_json)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {r["name"]: r for r in json.loads(out_json.read_text())["results"]}
    for where in ("local", "kvcfs"):
        for phase in ("create+write+close", "read", "stat", "unlink"):
            assert rows[f"{where} {phase}"]["iops"] > 0, (where, phase)
    assert rows["kvcfs read"]["ratio"] > 0
    left = [n for d in (cluster.mount, local_tmp) for n in os.listdir(d)
            if n.startswith(".kvc-bench-keys")]
    assert left == []


def test_bench_keys_floor_times_a_null_fuse_filesystem_and_unmounts_it(cluster, local_tmp):
    """--floor: the phases run on a null FUSE filesystem kvc-bench mounts
    under $TMPDIR for the run (the phases check every key's length and
    size, so one that lost them fails the run); afterwards neither its
    mount nor its directory is left."""
    out_json = local_tmp / "floor.json"
    tmp = local_tmp / "tmp"
    tmp.mkdir()
    out = subprocess.run([str(BUILD / "kvc-bench"), "keys", "--mount", str(cluster.mount),
                          "--local", str(local_tmp), "--keys", "64", "--threads", "4",
                          "--size", "4K", "--floor", "--json", str(out_json)],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TMPDIR=str(tmp)))
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {r["name"]: r for r in json.loads(out_json.read_text())["results"]}
    for where in ("local", "floor", "kvcfs"):
        for phase in ("create+write+close", "read", "stat", "unlink"):
            assert rows[f"{where} {phase}"]["iops"] > 0, (where, phase)
    assert rows["floor create+write+close"]["ratio"] > 0
    with open("/proc/mounts") as f:
        assert "kvc-floor" not in f.read()
    assert os.listdir(tmp) == []


def test_bench_keys_refuses_a_directory_outside_kvcfs(local_tmp):
    """An empty mount point (kvc-fuse not running) would time the local disk
    as "kvcfs": refused, for the file and the ring modes."""
    for extra in ([], ["--ring"]):
        out = subprocess.run([str(BUILD / "kvc-bench"), "keys", "--mount", str(local_tmp),
                              "--keys", "8"] + extra, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "not in a kvcfs mount" in out.stderr
        assert os.listdir(local_tmp) == []


def test_bench_keys_ring_keeps_several_batches_in_flight(cluster, local_tmp):
    """--depth 3 with a last batch cut short (100 keys, batches of 16):
    every operation of both runs completes every key (a lost or doubled
    completion would fail the run or stall it), gets and exists three
    rounds over the same keys (--rounds), and the keys' directory goes."""
    out_json = local_tmp / "ring.json"
    out = subprocess.run([str(BUILD / "kvc-bench"), "keys", "--ring", "--mount",
                          str(cluster.mount), "--keys", "100", "--batch", "16", "--depth", "3",
                          "--segments", "4", "--size", "4K", "--rounds", "3",
                          "--json", str(out_json)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "depth 3" in out.stderr
    rows = {r["name"]: r for r in json.loads(out_json.read_text())["results"]}
    for op in ("put", "get", "exists", "remove"):
        for segs in ("1 seg", "4 segs"):
            assert rows[f"ring {op} {segs}"]["iops"] > 0, (op, segs)
    assert [n for n in os.listdir(cluster.mount) if n.startswith(".kvc-bench-ring-keys")] == []


BAD_RING_OPTIONS = [  # (option, value, what kvc-bench says)
    ("--depth", "0", "--depth must be 1 to 16"),
    ("--depth", "17", "--depth must be 1 to 16"),
    ("--rounds", "0", "--rounds must be 1 to 20"),
    ("--rounds", "21", "--rounds must be 1 to 20"),
]


def test_bench_keys_ring_one_segment_twice(cluster, local_tmp):
    """--segments 1: the second run is the first again (an A/A check of
    the figures' noise) under keys of its own, reported as "(again)"."""
    out_json = local_tmp / "ring1.json"
    out = subprocess.run([str(BUILD / "kvc-bench"), "keys", "--ring", "--mount",
                          str(cluster.mount), "--keys", "40", "--batch", "8", "--segments", "1",
                          "--size", "4K", "--json", str(out_json)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {r["name"]: r for r in json.loads(out_json.read_text())["results"]}
    for op in ("put", "get", "exists", "remove"):
        assert rows[f"ring {op} 1 seg"]["iops"] > 0, op
        assert rows[f"ring {op} 1 seg (again)"]["iops"] > 0, op


def test_bench_keys_ring_refuses_a_bad_depth_or_rounds(cluster):
    for option, value, said in BAD_RING_OPTIONS:
        out = subprocess.run([str(BUILD / "kvc-bench"), "keys", "--ring", "--mount",
                              str(cluster.mount), option, value],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, (option, value, out.stdout + out.stderr)
        assert said in out.stderr, (option, value, out.stderr)
