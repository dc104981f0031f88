"""Ring keys with GPU segments, on a GPU machine (run by test_gpu.py, or by
hand: python3 gpu_keys.py DIRECTORY-ON-A-KVCFS-MOUNT).

1. Keys of 2 MiB gathered from 32 device segments each (one 64 KiB page
   per layer of a [layers, blocks, page] CUDA tensor): put, then get
   scattered into other blocks of another CUDA tensor; bytes compared.
2. Mixed host and device segments in one key.
3. The same layout through kvcfs.Blocks (one [blocks, page] tensor per
   layer): got back into another cache, bytes compared.
4. The rate of 32-segment device keys against contiguous 2 MiB device
   keys (one segment), both put and get, each prepared through
   kvcfs.Blocks (resolved once, as an engine would); the issue's target
   is >= 80%. Printed as "rate ..." lines (no assertion: timings are not
   tests).
Exit 77 (and "SKIP: ...") without PyTorch or a GPU, 0 when all passed.
"""
import os
import statistics
import time
import urllib.request

from gpu_script import SKIPPED, Checks, kvcfs, run, torch_with_gpu

LAYERS, BLOCKS, PAGE = 32, 64, 64 << 10
KEY = LAYERS * PAGE  # 2 MiB
RATE_ROUNDS = 4
check = Checks()


def transport_bytes():
    """kvc-fuse's chunk bytes per transport (place, tcp) and those it read
    itself from a same-host target (local), from the metrics at
    $KVC_FUSE_METRICS (host:port; tools/gpu-check sets it), else None."""
    address = os.environ.get("KVC_FUSE_METRICS")
    if not address:
        return None
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        lines = r.read().decode().splitlines()
    out = {"place": 0.0, "tcp": 0.0, "local": 0.0}
    for line in lines:
        for t in ("place", "tcp"):
            if line.startswith(f'kvc_fuse_transport_bytes_total{{transport="{t}"}} '):
                out[t] = float(line.rsplit(" ", 1)[1])
        if line.startswith("kvc_fuse_transport_local_bytes_total "):
            out["local"] = float(line.rsplit(" ", 1)[1])
    return out


def timed(batch_fn, keys):
    start = time.monotonic()
    results = batch_fn().wait()
    seconds = time.monotonic() - start
    return all(r == KEY for r in results), keys / seconds


def main(directory):
    torch = torch_with_gpu()
    if torch is None:
        return SKIPPED
    mount = kvcfs.extract_mount_point(directory)
    os.makedirs(directory, exist_ok=True)
    keys = kvcfs.KeyDir(directory)
    ring = kvcfs.Ring(mount, 64, for_read=False)
    src = torch.randint(0, 256, (LAYERS, BLOCKS, PAGE), dtype=torch.uint8, device="cuda")
    dst = torch.zeros_like(src)
    src_iov, dst_iov = kvcfs.Iov.wrap_device(src, mount), kvcfs.Iov.wrap_device(dst, mount)
    torch.cuda.synchronize()
    # 1. gathered from 32 layers, scattered into other blocks
    puts = [(f"sg-{b}", [src[layer, b] for layer in range(LAYERS)]) for b in range(BLOCKS)]
    check(ring.put_keys(keys, puts).wait() == [KEY] * BLOCKS, "32-segment device keys put")
    gets = [(f"sg-{b}", [dst[layer, BLOCKS - 1 - b] for layer in range(LAYERS)])
            for b in range(BLOCKS)]
    before = transport_bytes()
    check(ring.get_keys(keys, gets).wait() == [KEY] * BLOCKS, "32-segment device keys got")
    after = transport_bytes()
    if before is not None:
        # a key's 32 pieces of staging are one storage io, placed (or,
        # from a same-host single-copy target, read by kvc-fuse itself)
        placed, tcp, local = (after[t] - before[t] for t in ("place", "tcp", "local"))
        check(placed + local >= BLOCKS * KEY and tcp < KEY,
              f"32-segment device gets placed ({placed:.0f} bytes placed, {local:.0f} read "
              f"here, {tcp:.0f} by TCP)")
    torch.cuda.synchronize()
    check(torch.equal(dst.flip(1), src), "bytes match after gather and scatter")
    # 2. host and device segments in one key
    host = kvcfs.Iov.create(mount, KEY)
    host.as_tensor()[:KEY // 2].copy_(src[:LAYERS // 2, 0].flatten().cpu())
    mixed = [(host, 0, KEY // 2)] + [src[layer, 0] for layer in range(LAYERS // 2, LAYERS)]
    check(ring.put_keys(keys, [("mixed", mixed)]).wait() == [KEY], "mixed key put")
    check(ring.get_keys(keys, [("mixed", [(dst_iov, 0, KEY)])]).wait() == [KEY],
          "mixed key got")
    torch.cuda.synchronize()
    check(torch.equal(dst.flatten()[:KEY], src[:, 0].flatten()), "mixed key bytes")
    # 3. the same through Blocks: the keys of part 1 into a fresh cache
    dst.zero_()
    torch.cuda.synchronize()
    by_layer = kvcfs.Blocks([dst[layer] for layer in range(LAYERS)], BLOCKS)
    check(by_layer.key_bytes == KEY, "Blocks: a key is a page of every layer")
    got = [(f"sg-{b}", by_layer[b]) for b in range(BLOCKS)]
    check(ring.get_keys(keys, got).wait() == [KEY] * BLOCKS, "Blocks: keys got")
    torch.cuda.synchronize()
    check(torch.equal(dst, src), "Blocks: bytes match")
    # 4. rates: contiguous 2 MiB device keys against 32-segment ones, in
    # turns (which goes first alternates), the median of each
    flat = src.view(-1)
    whole = kvcfs.Blocks([flat], flat.numel() // KEY)
    layered = kvcfs.Blocks([src[layer] for layer in range(LAYERS)], BLOCKS)
    rates = {"c put": [], "s put": [], "c get": [], "s get": []}
    all_ok = True
    for rnd in range(RATE_ROUNDS):
        contiguous = [(f"c{rnd}-{b}", whole[b]) for b in range(len(whole))]
        sg = [(f"s{rnd}-{b}", layered[b]) for b in range(BLOCKS)]
        puts = [("c put", lambda: ring.put_keys(keys, contiguous)),
                ("s put", lambda: ring.put_keys(keys, sg))]
        gets = [("c get", lambda: ring.get_keys(keys, contiguous)),
                ("s get", lambda: ring.get_keys(keys, sg))]
        for pair in [puts] + [gets] * 3:
            for what, fn in (pair if rnd % 2 else pair[::-1]):
                ok, rate = timed(fn, BLOCKS)
                all_ok = all_ok and ok
                rates[what].append(rate)
    check(all_ok, f"timed puts and gets, {RATE_ROUNDS} rounds")
    med = {what: statistics.median(r) for what, r in rates.items()}
    for op in ("put", "get"):
        c, sgm = med["c " + op], med["s " + op]
        print(f"rate {op}: contiguous {c:.0f} keys/s, 32 segments {sgm:.0f} keys/s "
              f"({sgm / c:.2f}x; medians of {len(rates['c ' + op])})")
    for iov in (src_iov, dst_iov, host):
        iov.close()
    ring.close()
    keys.close()
    return check.exit_code()


if __name__ == "__main__":
    run(main, "gpu_keys.py DIRECTORY (on a kvcfs mount)")
