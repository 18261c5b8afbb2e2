// tessera/timing/kernel_query.hpp: what the timing model is asked about one kernel invocation.
//
// A kernel_query names a kernel (the same names the tile programs use: "linear", "attention",
// ...), its integer shape parameters by name, the per-sequence lengths for attention, and the
// dtype. The functional code builds one per kernel it runs; the estimators turn it into cycles.
//
// Kernels and their parameters (all integers > 0 unless noted):
//   copy        elements
//   add         elements
//   scale       elements
//   reduce_sum  elements, outputs (optional, default 1)
//   matmul      m, n, k                    [m x k] * [k x n]
//   linear      tokens, in, out            y = x W + b
//   layer_norm  tokens, hidden
//   gelu        elements
//   softmax     rows, cols
//   attention   heads, head_dim; seq_lens  per-sequence softmax(Q K^T / sqrt(d)) V, no cross-sequence
//   embed       tokens, hidden             word + position + type lookups, summed
//   classifier  seqs, hidden, labels       pooler (dense + tanh) then a dense to the labels
//
// Usage:
//   auto q = tessera::timing::kernel_query("linear", {{"tokens", 128}, {"in", 768}, {"out", 768}});
//   auto a = tessera::timing::kernel_query("attention", {{"heads", 12}, {"head_dim", 64}})
//                .with_seq_lens({128, 64});
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/dtype.hpp"

namespace tessera::timing {

/// One kernel invocation, as the timing model sees it: a name, named shapes, a dtype.
struct kernel_query {
  std::string kernel;                                  ///< registered estimator name
  std::map<std::string, int64_t, std::less<>> params;  ///< named integer shape parameters
  std::vector<int64_t> seq_lens;                       ///< per-sequence lengths (attention)
  dtype type = dtype::fp16;

  kernel_query() = default;
  kernel_query(std::string name, std::initializer_list<std::pair<const std::string, int64_t>> p,
               dtype t = dtype::fp16)
      : kernel(std::move(name)), params(p), type(t) {}

  /// Sets a parameter (chainable).
  kernel_query& set(std::string key, int64_t value) {
    params[std::move(key)] = value;
    return *this;
  }
  /// Sets the per-sequence lengths (chainable).
  kernel_query& with_seq_lens(std::vector<int64_t> lens) {
    seq_lens = std::move(lens);
    return *this;
  }
  /// The parameter `key`, which must be present and > 0; else invalid_argument naming kernel and key.
  result<int64_t> get(std::string_view key) const;
  /// The parameter `key` if present (must be > 0), else `fallback`.
  result<int64_t> get_or(std::string_view key, int64_t fallback) const;
  /// "linear{in=768,out=768,tokens=128} fp16".
  std::string to_string() const;
};

}  // namespace tessera::timing
