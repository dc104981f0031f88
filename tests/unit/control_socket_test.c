/* Unit tests of the USRBIO control socket address and the ring layout. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/control_socket.h"
#include "core/ring.h"

Test(control_socket, abstract_name_of_a_mount)
{
	struct sockaddr_un addr;
	socklen_t len;
	kvc_control_socket_address("/mnt/kvc", &addr, &len);
	cr_assert_eq(addr.sun_path[0], '\0', "abstract namespace");
	cr_assert_eq(memcmp(addr.sun_path + 1, "kvc-usrbio:/mnt/kvc", 19), 0);
	cr_assert_eq(len, offsetof(struct sockaddr_un, sun_path) + 1 + 19);
}

Test(control_socket, long_mounts_hash_and_differ)
{
	char a[300], b[300];
	memset(a, 'x', sizeof(a));
	a[0] = '/';
	a[299] = '\0';
	memcpy(b, a, sizeof(b));
	b[200] = 'y';
	struct sockaddr_un sa, sb;
	socklen_t la, lb;
	kvc_control_socket_address(a, &sa, &la);
	kvc_control_socket_address(b, &sb, &lb);
	cr_assert_leq(la, sizeof(sa));
	cr_assert_eq(memcmp(sa.sun_path + 1, "kvc-usrbio:#", 12), 0);
	cr_assert_neq(memcmp(sa.sun_path, sb.sun_path, la - offsetof(struct sockaddr_un, sun_path)), 0);
}

Test(ring_layout, sizes_and_offsets)
{
	cr_assert_eq(kvc_ring_bytes(8) % 4096, 0);
	cr_assert_geq(kvc_ring_bytes(4096), KVC_RING_HEADER + 4096 * (48 + 24));
	static _Alignas(4096) uint8_t memory[8192];
	struct kvc_ring_shared *r = (struct kvc_ring_shared *)memory;
	cr_assert_eq((uint8_t *)kvc_ring_sqes(r) - memory, 512);
	cr_assert_eq((uint8_t *)kvc_ring_cqes(r, 16) - memory, 512 + 16 * 48);
}
