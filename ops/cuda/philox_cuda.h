/* philox_cuda.h - host entry points of ops/cuda/philox.cu (callable from C): the real kernel
 * (nvcc build) and the same source run by the SIMT emulator. */
#ifndef DFG_PHILOX_CUDA_H
#define DFG_PHILOX_CUDA_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes n Philox blocks (n x 4 uint32) for counters ctr .. ctr+n-1 in `stream` to device
 * memory (emulated: host memory); returns the launch's cudaError_t (0 on success). */
int dfg_cuda_philox_stream(uint32_t *dev_out, int64_t n, uint64_t ctr, uint64_t stream, uint32_t k0, uint32_t k1,
                           void *cuda_stream);
int dfg_emu_philox_stream(uint32_t *out, int64_t n, uint64_t ctr, uint64_t stream, uint32_t k0, uint32_t k1,
                          void *cuda_stream);

#ifdef __cplusplus
}
#endif
#endif
