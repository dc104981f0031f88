/*
 * fuzz_usrbio: what fuzz_control and fuzz_ring share: kvc-fuse's USRBIO
 * service set up without a FUSE mount or threads (kvc_usrbio_init with no
 * ring workers), storage that cannot be reached (I/O fails fast), and
 * stand-ins for the kvc-fuse functions the service calls into the rest of
 * the daemon for (file holds, the lease, kernel cache invalidation). A
 * file of the harness's temporary directory counts as a file of "the
 * mount"; holding one puts it in the inode table with FILE_SIZE bytes.
 * Include in exactly one .c per harness (it defines the stand-ins).
 */
#ifndef KVC_FUZZ_USRBIO_H
#define KVC_FUZZ_USRBIO_H

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "core/log.h"
#include "core/ring.h"
#include "fuse/ring_service.h"
#include "fuse/usrbio_service.h"

#define FILE_SIZE (3u << 20)

static struct kvc_fuse fuzz_fs;
static struct kvc_usrbio fuzz_usrbio;
static struct kvc_server_conn fuzz_conn;
static char fuzz_file[128];

int kvc_fuse_hold_inode(struct kvc_fuse *fs, uint64_t ino)
{
	struct kvc_attr attr = {.ino = ino, .size = FILE_SIZE, .mode = 0100644,
	                        .layout = {.chunk_size = 1 << 20, .stripe = 1, .chain_count = 1}};
	return kvc_inode_table_open(fs->inodes, &attr);
}

void kvc_fuse_drop_inode(struct kvc_fuse *fs, uint64_t ino)
{
	kvc_inode_table_release(fs->inodes, ino);
}

int kvc_fuse_check_lease(struct kvc_fuse *fs)
{
	(void)fs;
	return 0;
}

bool kvc_fuse_lease_fresh(struct kvc_fuse *fs)
{
	(void)fs;
	return true;
}

void kvc_close_queue_retry_later(struct kvc_fuse *fs, const uint64_t *inos, uint32_t n, int rc)
{
	(void)fs, (void)inos, (void)n, (void)rc;
}

int fuse_lowlevel_notify_inval_inode(struct fuse_session *se, fuse_ino_t ino, off_t off,
                                     off_t len)
{
	(void)se, (void)ino, (void)off, (void)len;
	return 0;
}

int fuse_lowlevel_notify_inval_entry(struct fuse_session *se, fuse_ino_t parent,
                                     const char *name, size_t namelen)
{
	(void)se, (void)parent, (void)name, (void)namelen;
	return 0;
}

int fuse_session_fd(struct fuse_session *se)
{
	(void)se;
	return -1; /* no kernel: meta_events' whole-cache drop writes nowhere */
}

static void fuzz_usrbio_setup(void)
{
	const char *dir = fuzz_temp_dir();
	char err[256];
	struct stat st;
	kvc_log_setup("fuzz", KVC_LOG_ERROR); /* bad rings are the point: no warnings */
	/* Storage that cannot be reached: I/O fails fast with an error. */
	if (kvc_config_parse("chunk_size = 1048576\nconnect_timeout_ms = 50\n"
	                     "io_timeout_ms = 50\n[meta]\naddress = 127.0.0.1:1\n"
	                     "[storage s]\naddress = 127.0.0.1:1\ntarget = /nonexistent\n"
	                     "[fuse]\nusrbio_uid_iov_mb = 64\nusrbio_uid_rings = 8\n"
	                     "usrbio_uid_registrations = 16\n",
	                     "fuzz", &fuzz_fs.config, err, sizeof(err)) != 0)
		abort();
	if (kvc_storage_client_init(&fuzz_fs.storage, &fuzz_fs.config) != 0 ||
	    kvc_meta_client_init(&fuzz_fs.meta, &fuzz_fs.config) != 0 || /* ring keys: -EIO */
	    kvc_inode_table_create(&fuzz_fs.inodes) != 0)
		abort();
	snprintf(fuzz_file, sizeof(fuzz_file), "%s/file", dir);
	int fd = open(fuzz_file, O_RDWR | O_CREAT, 0600);
	if (fd < 0 || fstat(fd, &st) != 0)
		abort();
	close(fd);
	fuzz_usrbio.mount_dev = st.st_dev; /* the temporary directory is "the mount" */
	if (kvc_usrbio_init(&fuzz_usrbio, &fuzz_fs, 0) != 0)
		abort();
	fuzz_conn.fd = fuzz_reply_fd(); /* a socket pair: SO_PEERCRED names us */
}

/* Shared memory for an iov of `size` bytes, or a ring of `entries` (with
 * its header) when entries > 0; sealed or not. Returns the fd. */
static int fuzz_memory(size_t size, uint32_t entries, int sealed)
{
	int fd = memfd_create("fuzz", MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
	if (entries)
		size = kvc_ring_bytes(entries);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
		abort();
	if (entries) {
		struct kvc_ring_shared header = {.magic = KVC_RING_MAGIC, .layout = KVC_RING_LAYOUT,
		                                 .entries = entries};
		if (pwrite(fd, &header, sizeof(header), 0) != (ssize_t)sizeof(header))
			abort();
	}
	if (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
		abort();
	return fd;
}

/* Hand one frame (type, body, the passed fds: taken over) to the
 * service's handler, as its server does. Returns the handler's result. */
static int fuzz_frame(uint16_t type, const void *body, uint32_t len, const int *fds, int nfds)
{
	struct kvc_wire_header h;
	/* A copy of exactly the body's length, so ASan sees any overread. */
	void *copy = malloc(len ? len : 1);
	memcpy(copy, body, len);
	kvc_wire_header_init(&h, type, 1, 0, len, 0);
	fuzz_conn.body = copy;
	fuzz_conn.body_capacity = len;
	fuzz_conn.passed_fd_count = nfds;
	for (int i = 0; i < nfds; i++)
		fuzz_conn.passed_fds[i] = fds[i];
	int rc = kvc_usrbio_handle(&fuzz_usrbio, &fuzz_conn, &h);
	for (int i = 0; i < fuzz_conn.passed_fd_count; i++) /* what no handler took */
		if (fuzz_conn.passed_fds[i] >= 0)
			close(fuzz_conn.passed_fds[i]);
	fuzz_conn.passed_fd_count = 0;
	fuzz_conn.body = NULL;
	free(copy);
	return rc;
}

/* The connection closes: everything it registered goes. */
static void fuzz_disconnect(void)
{
	kvc_usrbio_disconnect(&fuzz_usrbio, &fuzz_conn);
}

#endif
