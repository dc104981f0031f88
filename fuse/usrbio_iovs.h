/*
 * usrbio_iovs: a USRBIO client's iovs in kvc-fuse (part of usrbio_service,
 * whose header gives the rules): registering shared host memory (checked
 * by kvc_usrbio_check_memory, then mapped) and GPU memory (imported by
 * device_io for this client alone), charging the uid's limits, and
 * dropping them again. State lives in struct kvc_usrbio_client.
 */
#ifndef KVC_FUSE_USRBIO_IOVS_H
#define KVC_FUSE_USRBIO_IOVS_H

#include <stdbool.h>
#include <stdint.h>

#include "fuse/usrbio_service.h"

/* Check an fd a client passed as shared memory of at least `need` bytes:
 * a regular file of tmpfs or hugetlbfs (a memfd, /dev/shm) owned by the
 * client's uid; ring memory (`ring`) must be a memfd (tmpfs) sealed with
 * F_SEAL_SHRINK and F_SEAL_GROW. Returns 0, -EINVAL (not such memory: a
 * file of this mount, of a disk or of another FUSE filesystem; or too
 * small), -EACCES (another uid's), -EPERM (ring memory not sealed). */
int kvc_usrbio_check_memory(struct kvc_usrbio *u, struct kvc_usrbio_client *c, int fd,
                            uint64_t need, bool ring);

/* IOV_REGISTER of memory_fd (taken: always closed). Returns 0 and the
 * handle, -EINVAL, -EACCES, -EDQUOT (the uid's iov bytes or registrations),
 * -EMFILE (this connection's iovs), -errno of mmap. */
int kvc_usrbio_iov_register(struct kvc_usrbio *u, struct kvc_usrbio_client *c, int memory_fd,
                            const struct kvc_msg_iov_register *m, uint32_t *handle);
/* IOV_REGISTER_DEVICE: as device_io's kvc_device_import, and -EDQUOT,
 * -EMFILE. */
int kvc_usrbio_iov_register_device(struct kvc_usrbio *u, struct kvc_usrbio_client *c,
                                   const struct kvc_msg_iov_register_device *m,
                                   uint32_t *handle);
/* IOV_DEREGISTER: waits until no ring batch uses the client's memory.
 * Returns 0 or -EINVAL (no such iov). */
int kvc_usrbio_iov_deregister(struct kvc_usrbio_client *c, uint32_t handle);

/* Unmap every iov of a client (cleanup; no batch runs any more). */
void kvc_usrbio_iov_drop_all(struct kvc_usrbio_client *c);

#endif
