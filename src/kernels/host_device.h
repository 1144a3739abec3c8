// MT_HOST_DEVICE marks an inline function that the CPU kernels and the CUDA kernels share, so
// that one formula serves both backends (compiled by the host compiler and by nvcc).
#pragma once

#ifdef __CUDACC__
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif
