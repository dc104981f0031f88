"""PyTorch views of kvcfs iovs, on a GPU machine (run by test_gpu.py, or
by hand: python3 gpu_torch.py FILE-ON-A-KVCFS-MOUNT).

1. A CUDA torch tensor wrapped as a device iov: ring reads land in it.
2. A device iov made by libkvc, viewed as a float16 tensor: no copy.
3. A pinned iov viewed as a CPU tensor: is_pinned, copy_(non_blocking).
4. Ring writes from the wrapped tensor; the file read through the mount.
Exit 77 (and "SKIP: ...") without PyTorch or a GPU, 0 when all passed.
"""
import os

from gpu_script import SKIPPED, Checks, kvcfs, run, torch_with_gpu

PAGE = 2 << 20
PAGES = 16
check = Checks()


def ring_pages(ring, iov, fd, read, slots):
    """Page i of the file <-> slot slots[i] of the iov; True when all moved."""
    for i, slot in enumerate(slots):
        ring.prepare(iov, read, fd, i * PAGE, PAGE, iov_offset=slot * PAGE, userdata=i)
    ring.submit()
    done = []
    while len(done) < len(slots):
        done += ring.wait(min_results=len(slots) - len(done))
    return all(c.result == PAGE for c in done)


def main(path):
    torch = torch_with_gpu()
    if torch is None:
        return SKIPPED
    mount = kvcfs.extract_mount_point(path)
    size = PAGES * PAGE
    data = torch.randint(0, 256, (size,), dtype=torch.uint8)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    kvcfs.register_fd(fd)
    host = kvcfs.Iov.create(mount, size)
    host.as_tensor().copy_(data)
    writer = kvcfs.Ring(mount, 32, for_read=False)
    reader = kvcfs.Ring(mount, 32, for_read=True)
    check(ring_pages(writer, host, fd, False, range(PAGES)), "pages written through a ring")

    gpu = torch.zeros(size, dtype=torch.uint8, device="cuda")
    wrapped = kvcfs.Iov.wrap_device(gpu, mount)
    check(wrapped.device == gpu.device.index, "a CUDA tensor wrapped as a device iov")
    reversed_slots = [PAGES - 1 - i for i in range(PAGES)]
    check(ring_pages(reader, wrapped, fd, True, reversed_slots), "ring reads into the tensor")
    expected = data.view(PAGES, PAGE).flip(0).reshape(-1)
    check(torch.equal(gpu.cpu(), expected), "the tensor holds the pages, reversed")

    made = kvcfs.Iov.create_device(mount, size)
    view = made.as_tensor(dtype=torch.float16, shape=(PAGES, PAGE // 2))
    check(view.is_cuda and view.data_ptr() == made.base, "as_tensor of a device iov: no copy")
    check(ring_pages(reader, made, fd, True, range(PAGES)), "ring reads into libkvc's GPU memory")
    check(torch.equal(view.view(torch.uint8).reshape(-1).cpu(), data), "seen through the view")

    host.pin()
    pinned = host.as_tensor()
    check(pinned.is_pinned(), "a pinned iov's tensor is pinned for PyTorch")
    pinned.zero_()
    check(ring_pages(reader, host, fd, True, range(PAGES)), "ring reads into the pinned iov")
    target = torch.empty(size, dtype=torch.uint8, device="cuda")
    target.copy_(pinned, non_blocking=True)
    torch.cuda.synchronize()
    check(torch.equal(target.cpu(), data), "copy_(non_blocking=True) to the GPU")
    host.unpin()

    gpu.add_(1)
    torch.cuda.synchronize()
    check(ring_pages(writer, wrapped, fd, False, range(PAGES)), "ring writes from the tensor")
    kvcfs.fsync(fd)
    back = torch.frombuffer(bytearray(os.pread(fd, size, 0)), dtype=torch.uint8)
    check(torch.equal(back, gpu.cpu()), "the file holds the tensor's bytes")

    for iov in (wrapped, made, host):
        iov.close()
    writer.close()
    reader.close()
    kvcfs.deregister_fd(fd)
    os.close(fd)
    return check.exit_code()


if __name__ == "__main__":
    run(main, "gpu_torch.py FILE (on a kvcfs mount)")
