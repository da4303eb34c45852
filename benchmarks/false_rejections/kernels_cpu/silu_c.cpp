#include "silu_c.h"

#include <cmath>

static inline float silu_one(float v) { return v / (1.0f + std::exp(-v)); }

extern "C" {

void silu_f32(const float* x, float* out, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = silu_one(x[i]);
}

}  // extern "C"
