/*
 * kvc_engine: an fio external ioengine that runs a job's I/O through kvcfs
 * USRBIO rings (include/kvc/usrbio.h):
 *
 *   fio --ioengine=external:/path/to/fio_kvc.so --filename=/mnt/kvc/f ...
 *
 * fio's I/O buffers are allocated inside one kvcfs iov (the iomem hooks),
 * so every read lands in shared memory that kvc-fuse fills directly; any
 * block size works (an I/O may be as long as the iov). Each
 * job thread has a read ring and a write ring of iodepth entries; files
 * are registered with kvc-fuse when fio opens them. Built against the
 * headers of the installed fio's source (tools/fio/build.sh).
 */
#include "fio.h"
#include "optgroup.h"

#include "kvc/usrbio.h"

struct kvc_fio {
	char mount[4096];
	struct kvc_iov *iov;
	struct kvc_ring *rings[2]; /* [0] reads, [1] writes */
	int outstanding[2];
	struct kvc_completion *done;
	struct io_u **events;
	int depth;
};

static struct kvc_fio *state(struct thread_data *td)
{
	return td->io_ops_data;
}

static int kvc_fio_setup_state(struct thread_data *td)
{
	if (td->io_ops_data)
		return 0;
	struct kvc_fio *k = calloc(1, sizeof(*k));
	if (!k)
		return ENOMEM;
	k->depth = td->o.iodepth > 0 ? (int)td->o.iodepth : 1;
	k->done = calloc((size_t)k->depth * 2, sizeof(*k->done));
	k->events = calloc((size_t)k->depth * 2, sizeof(*k->events));
	const char *where = td->files_index ? td->files[0]->file_name : td->o.directory;
	if (!k->done || !k->events || !where ||
	    kvc_extract_mount_point(k->mount, sizeof(k->mount), where) < 0) {
		log_err("fio_kvc: %s is not on a kvcfs mount\n", where ? where : "(no file)");
		free(k->done);
		free(k->events);
		free(k);
		return EINVAL;
	}
	td->io_ops_data = k;
	return 0;
}

static int kvc_fio_init(struct thread_data *td)
{
	int rc = kvc_fio_setup_state(td);
	if (rc)
		return rc;
	struct kvc_fio *k = state(td);
	for (int i = 0; i < 2; i++) {
		rc = kvc_ring_create(&k->rings[i], k->mount, k->depth, i == 0, 0, 0, 0, -1, 0);
		if (rc < 0) {
			log_err("fio_kvc: ring: %s\n", strerror(-rc));
			return -rc;
		}
	}
	return 0;
}

static void kvc_fio_cleanup(struct thread_data *td)
{
	struct kvc_fio *k = state(td);
	if (!k)
		return;
	kvc_ring_destroy(k->rings[0]);
	kvc_ring_destroy(k->rings[1]);
	kvc_iov_destroy(k->iov);
	free(k->done);
	free(k->events);
	free(k);
	td->io_ops_data = NULL;
}

static int kvc_fio_iomem_alloc(struct thread_data *td, size_t total)
{
	int rc = kvc_fio_setup_state(td);
	if (rc)
		return rc;
	struct kvc_fio *k = state(td);
	rc = kvc_iov_create(&k->iov, k->mount, total, 0, -1, NULL);
	if (rc < 0) {
		log_err("fio_kvc: iov of %zu bytes: %s\n", total, strerror(-rc));
		return -rc;
	}
	/* Nothing opens it by id: its /dev/shm name goes now, so not even a
	 * killed fio leaves it behind. */
	kvc_iov_unlink(k->iov);
	td->orig_buffer = kvc_iov_base(k->iov);
	return 0;
}

static void kvc_fio_iomem_free(struct thread_data *td)
{
	struct kvc_fio *k = state(td);
	if (k && k->iov) {
		kvc_iov_destroy(k->iov);
		k->iov = NULL;
	}
	td->orig_buffer = NULL;
}

static enum fio_q_status kvc_fio_queue(struct thread_data *td, struct io_u *io_u)
{
	struct kvc_fio *k = state(td);
	if (io_u->ddir == DDIR_SYNC || io_u->ddir == DDIR_DATASYNC) {
		int rc = kvc_fd_sync(io_u->file->fd);
		io_u->error = rc < 0 ? -rc : 0;
		return FIO_Q_COMPLETED;
	}
	if (io_u->ddir != DDIR_READ && io_u->ddir != DDIR_WRITE) {
		io_u->error = EINVAL;
		return FIO_Q_COMPLETED;
	}
	int w = io_u->ddir == DDIR_WRITE;
	int rc = kvc_ring_prep(k->rings[w], k->iov, !w, io_u->xfer_buf, io_u->file->fd,
	                       io_u->offset, io_u->xfer_buflen, io_u);
	if (rc == -EAGAIN)
		return FIO_Q_BUSY;
	if (rc < 0) {
		io_u->error = -rc;
		return FIO_Q_COMPLETED;
	}
	k->outstanding[w]++;
	return FIO_Q_QUEUED;
}

static int kvc_fio_commit(struct thread_data *td)
{
	struct kvc_fio *k = state(td);
	for (int i = 0; i < 2; i++) {
		int rc = kvc_ring_submit(k->rings[i]);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static int collect(struct kvc_fio *k, int ring, int min, int have, const struct timespec *abs)
{
	int room = k->depth * 2 - have;
	int got = kvc_ring_wait(k->rings[ring], k->done, room, min, abs);
	for (int i = 0; i < got; i++) {
		struct io_u *io_u = (struct io_u *)k->done[i].userdata;
		int64_t res = k->done[i].result;
		io_u->error = res < 0 ? (int)-res : 0;
		io_u->resid = res >= 0 && (uint64_t)res < io_u->xfer_buflen ? io_u->xfer_buflen - res : 0;
		k->events[have + i] = io_u;
	}
	if (got > 0)
		k->outstanding[ring] -= got;
	return got < 0 ? 0 : got;
}

static int kvc_fio_getevents(struct thread_data *td, unsigned int min, unsigned int max,
                             const struct timespec *t)
{
	struct kvc_fio *k = state(td);
	struct timespec abs, *deadline = NULL;
	(void)max;
	if (t) {
		clock_gettime(CLOCK_REALTIME, &abs);
		abs.tv_sec += t->tv_sec;
		abs.tv_nsec += t->tv_nsec;
		if (abs.tv_nsec >= 1000000000) {
			abs.tv_sec++;
			abs.tv_nsec -= 1000000000;
		}
		deadline = &abs;
	}
	int have = collect(k, 0, 0, 0, NULL);
	have += collect(k, 1, 0, have, NULL);
	while ((unsigned)have < min) {
		/* Block on the ring with work outstanding (both: take turns). */
		int ring = k->outstanding[0] ? 0 : 1;
		int both = k->outstanding[0] && k->outstanding[1];
		struct timespec slice;
		const struct timespec *until = deadline;
		if (both) {
			clock_gettime(CLOCK_REALTIME, &slice);
			slice.tv_nsec += 200000;
			if (slice.tv_nsec >= 1000000000) {
				slice.tv_sec++;
				slice.tv_nsec -= 1000000000;
			}
			until = &slice;
		}
		int got = collect(k, ring, 1, have, until);
		have += got;
		if (both)
			have += collect(k, 1 - ring, 0, have, NULL);
		if (!got && deadline && !both)
			break;
	}
	return have;
}

static struct io_u *kvc_fio_event(struct thread_data *td, int event)
{
	return state(td)->events[event];
}

static int kvc_fio_open_file(struct thread_data *td, struct fio_file *f)
{
	int rc = generic_open_file(td, f);
	if (rc)
		return rc;
	rc = kvc_fd_register(f->fd, 0);
	if (rc < 0) {
		log_err("fio_kvc: register %s: %s\n", f->file_name, strerror(-rc));
		int closed = generic_close_file(td, f);
		(void)closed; /* the registration error is the one to report */
		return -rc;
	}
	return 0;
}

static int kvc_fio_close_file(struct thread_data *td, struct fio_file *f)
{
	kvc_fd_deregister(f->fd);
	return generic_close_file(td, f);
}

struct ioengine_ops ioengine = {
	.name = "kvcfs",
	.version = FIO_IOOPS_VERSION,
	.flags = FIO_NODISKUTIL,
	.init = kvc_fio_init,
	.cleanup = kvc_fio_cleanup,
	.queue = kvc_fio_queue,
	.commit = kvc_fio_commit,
	.getevents = kvc_fio_getevents,
	.event = kvc_fio_event,
	.open_file = kvc_fio_open_file,
	.close_file = kvc_fio_close_file,
	.get_file_size = generic_get_file_size,
	.iomem_alloc = kvc_fio_iomem_alloc,
	.iomem_free = kvc_fio_iomem_free,
};
