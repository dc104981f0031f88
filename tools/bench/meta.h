/* bench meta: the page pools over HTTP and the binary protocol (meta.c). */
#ifndef KVC_BENCH_META_H
#define KVC_BENCH_META_H

int bench_meta_main(int argc, char **argv);

#endif
