/* bench gpu: KV pages from kvcfs into GPU memory by each path (gpu.c). */
#ifndef KVC_BENCH_GPU_H
#define KVC_BENCH_GPU_H

int bench_gpu_main(int argc, char **argv);

#endif
