/* bench ring: USRBIO rings against FUSE and the TCP ceiling (ring.c). */
#ifndef KVC_BENCH_RING_H
#define KVC_BENCH_RING_H

int bench_ring_main(int argc, char **argv);

#endif
