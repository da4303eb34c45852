// A kernel-only workspace's header, as C code is usually written: C linkage for C++ readers.
#ifndef SILU_C_H
#define SILU_C_H
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
void silu_f32(const float* x, float* out, int64_t n);
#ifdef __cplusplus
}
#endif
#endif
