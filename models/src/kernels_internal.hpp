// Private helpers shared by the kernel sources.
#pragma once

#include <cmath>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

namespace tessera::models::detail {

dnnl::engine& cpu_engine();
/// One oneDNN stream per thread (primitives may run from several threads at once).
dnnl::stream& thread_stream();

/// Numerically stable softmax of one row, in place.
inline void softmax_row(float* x, int64_t n) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace tessera::models::detail
