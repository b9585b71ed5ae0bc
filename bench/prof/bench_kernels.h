/* bench_kernels.h: CUDA side of bench_prof (an empty kernel and its launch loop). */
#ifndef PD_BENCH_KERNELS_H
#define PD_BENCH_KERNELS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PD_BENCH_EMPTY_KERNEL "pd_bench_empty_kernel"

/* Launches the empty kernel n times on the default stream, then synchronizes. Returns 0,
 * or -1 with the CUDA error in err. */
int pd_bench_launch_empty(int n, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
