/*
 * bench multihost: scale-out across network namespaces (issue 12). The
 * orchestration (namespaces, bridge, tc, daemons, load, table) is the
 * Python script tools/bench/multihost.py; this command only finds it and
 * execs /usr/bin/python3 on it with its own arguments, telling it where
 * kvc-bench lives (KVC_BENCH_BIN_DIR: the default --bin). It owns nothing.
 */
#ifndef KVC_BENCH_MULTIHOST_H
#define KVC_BENCH_MULTIHOST_H

int bench_multihost_main(int argc, char **argv);

#endif
