// Private helpers shared by the kernel sources.
#pragma once

#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>

namespace tessera::models::detail {

dnnl::engine& cpu_engine();
/// One oneDNN stream per thread (primitives may run from several threads at once).
dnnl::stream& thread_stream();

/// Numerically stable softmax of one row, in place (AVX-512 when the CPU has it: the exp of
/// attention scores is a large share of attention time). -inf entries become exactly 0.
void softmax_row(float* x, int64_t n);

}  // namespace tessera::models::detail
