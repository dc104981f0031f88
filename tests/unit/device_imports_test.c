/* Unit tests of kvc-fuse's CUDA IPC import table (fuse/device_imports.c),
 * with fake import calls: no CUDA or GPU needed. The point: an allocation
 * imported for one owner (uid and connection) is never handed to another. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "fuse/device_imports.h"

static int opens, closes;
static char memory[4][4096]; /* what each fake import "maps" */

static int fake_open(void *ctx, int device, const uint8_t handle[KVC_WIRE_IPC_HANDLE_SIZE],
                     void **allocation, size_t *size)
{
	(void)ctx, (void)device;
	if (handle[0] == 0xff)
		return -EINVAL; /* a handle CUDA refuses */
	*allocation = memory[handle[0] % 4];
	*size = sizeof(memory[0]);
	opens++;
	return 0;
}

static void fake_close(void *ctx, int device, void *allocation)
{
	(void)ctx, (void)device, (void)allocation;
	closes++;
}

static struct kvc_device_imports *imports;
static const struct kvc_device_owner alice = {.uid = 1000, .client = 1};
static const struct kvc_device_owner alice_again = {.uid = 1000, .client = 2};
static const struct kvc_device_owner bob = {.uid = 1001, .client = 3};

static void setup(void)
{
	struct kvc_device_import_ops ops = {fake_open, fake_close, NULL};
	opens = closes = 0;
	imports = kvc_device_imports_create(&ops);
	cr_assert_not_null(imports);
}

static void teardown(void)
{
	kvc_device_imports_destroy(imports);
}

TestSuite(device_imports, .init = setup, .fini = teardown);

static uint8_t handle_a[KVC_WIRE_IPC_HANDLE_SIZE] = {1, 2, 3};

Test(device_imports, one_owner_shares_its_import)
{
	void *a, *b;
	size_t size;
	cr_assert_eq(kvc_device_imports_acquire(imports, &alice, 0, handle_a, &a, &size), 0);
	cr_assert_eq(kvc_device_imports_acquire(imports, &alice, 0, handle_a, &b, &size), 0);
	cr_assert_eq(a, b);
	cr_assert_eq(opens, 1, "one import per allocation and owner");
	cr_assert_eq(kvc_device_imports_release(imports, &alice, a), 0);
	cr_assert_eq(closes, 0);
	cr_assert_eq(kvc_device_imports_release(imports, &alice, b), 0);
	cr_assert_eq(closes, 1, "closed with its last user");
	cr_assert_eq(kvc_device_imports_count(imports), 0);
}

Test(device_imports, another_uid_presenting_the_handle_is_refused)
{
	void *a, *b = NULL;
	size_t size;
	cr_assert_eq(kvc_device_imports_acquire(imports, &alice, 0, handle_a, &a, &size), 0);
	cr_assert_eq(kvc_device_imports_acquire(imports, &bob, 0, handle_a, &b, &size), -EACCES);
	cr_assert_null(b, "nothing of alice's is handed out");
	cr_assert_eq(opens, 1);
	/* Bob cannot release what he never got either. */
	cr_assert_eq(kvc_device_imports_release(imports, &bob, a), -ENOENT);
	cr_assert_eq(kvc_device_imports_count(imports), 1);
}

Test(device_imports, another_process_of_the_same_uid_is_refused)
{
	void *a, *b = NULL;
	size_t size;
	cr_assert_eq(kvc_device_imports_acquire(imports, &alice, 0, handle_a, &a, &size), 0);
	cr_assert_eq(kvc_device_imports_acquire(imports, &alice_again, 0, handle_a, &b, &size),
	             -EACCES);
	cr_assert_null(b);
}

Test(device_imports, the_same_handle_on_another_gpu_is_another_key)
{
	void *a, *b;
	size_t size;
	cr_assert_eq(kvc_device_imports_acquire(imports, &alice, 0, handle_a, &a, &size), 0);
	cr_assert_eq(kvc_device_imports_acquire(imports, &bob, 1, handle_a, &b, &size), 0);
	cr_assert_eq(opens, 2);
}

Test(device_imports, after_the_owner_let_go_another_may_import_it)
{
	void *a, *b;
	size_t size;
	cr_assert_eq(kvc_device_imports_acquire(imports, &alice, 0, handle_a, &a, &size), 0);
	cr_assert_eq(kvc_device_imports_release(imports, &alice, a), 0);
	cr_assert_eq(kvc_device_imports_acquire(imports, &bob, 0, handle_a, &b, &size), 0,
	             "a fresh import: CUDA itself decides whether bob may open it");
	cr_assert_eq(opens, 2);
}

Test(device_imports, a_refused_handle_leaves_nothing)
{
	uint8_t bad[KVC_WIRE_IPC_HANDLE_SIZE] = {0xff};
	void *a;
	size_t size;
	cr_assert_eq(kvc_device_imports_acquire(imports, &alice, 0, bad, &a, &size), -EINVAL);
	cr_assert_eq(kvc_device_imports_count(imports), 0);
}
