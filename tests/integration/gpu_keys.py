"""Ring keys with GPU segments, on a GPU machine (run by test_gpu.py, or by
hand: python3 gpu_keys.py DIRECTORY-ON-A-KVCFS-MOUNT).

1. Keys of 2 MiB gathered from 32 device segments each (one 64 KiB page
   per layer of a [layers, blocks, page] CUDA tensor): put, then get
   scattered into other blocks of another CUDA tensor; bytes compared.
2. Mixed host and device segments in one key.
3. The rate of 32-segment device keys against contiguous 2 MiB device
   keys (one segment), both put and get; the issue's target is >= 80%.
   Printed as "rate ..." lines (no assertion: timings are not tests).
Exit 77 (and "SKIP: ...") without PyTorch or a GPU, 0 when all passed.
"""
import os
import time

from gpu_script import SKIPPED, Checks, kvcfs, run, torch_with_gpu

LAYERS, BLOCKS, PAGE = 32, 64, 64 << 10
KEY = LAYERS * PAGE  # 2 MiB
check = Checks()


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
    check(ring.get_keys(keys, gets).wait() == [KEY] * BLOCKS, "32-segment device keys got")
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
    # 3. rates: contiguous 2 MiB device keys against 32-segment ones
    flat = src.view(-1)
    contiguous = [(f"c-{b}", [flat[b * KEY:(b + 1) * KEY]]) for b in range(flat.numel() // KEY)]
    ok, c_put = timed(lambda: ring.put_keys(keys, contiguous), len(contiguous))
    check(ok, "contiguous device keys put")
    sg = [(f"s-{b}", [src[layer, b] for layer in range(LAYERS)]) for b in range(BLOCKS)]
    ok, s_put = timed(lambda: ring.put_keys(keys, sg), len(sg))
    check(ok, "32-segment device keys put (timed)")
    ok, c_get = timed(lambda: ring.get_keys(keys, contiguous), len(contiguous))
    check(ok, "contiguous device keys got")
    ok, s_get = timed(lambda: ring.get_keys(keys, sg), len(sg))
    check(ok, "32-segment device keys got (timed)")
    print(f"rate put: contiguous {c_put:.0f} keys/s, 32 segments {s_put:.0f} keys/s "
          f"({s_put / c_put:.2f}x)")
    print(f"rate get: contiguous {c_get:.0f} keys/s, 32 segments {s_get:.0f} keys/s "
          f"({s_get / c_get:.2f}x)")
    for iov in (src_iov, dst_iov, host):
        iov.close()
    ring.close()
    keys.close()
    return check.exit_code()


if __name__ == "__main__":
    run(main, "gpu_keys.py DIRECTORY (on a kvcfs mount)")
