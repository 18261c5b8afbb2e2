// tessera/timing/kernel_query.hpp: what the timing model is asked about one kernel invocation.
//
// A kernel_query names a kernel (the same names the tile programs use: "linear", "attention",
// ...), its integer shape parameters by name, the per-sequence lengths for attention, and the
// dtype. The functional code builds one per kernel it runs; the estimators turn it into cycles.
//
// The built-in kernels (tessera/models/kernel_list.hpp) and their shapes (all integers > 0):
//   copy, add, scale, gelu   elements_shape    elements
//   reduce_sum               reduce_shape      elements, outputs (optional, default 1)
//   matmul                   matmul_shape      m, n, k: [m x k] * [k x n]
//   linear                   linear_shape      tokens, in, out: y = x W + b
//   layer_norm, embed        rows_shape        tokens, hidden (embed: word + position + type lookups)
//   softmax                  softmax_shape     rows, cols
//   attention                attention_shape   heads, head_dim; seq_lens (per sequence, no cross-sequence)
//   classifier               classifier_shape  seqs, hidden, labels: pooler (dense + tanh), dense
//
// The built-in kernels' parameters are typed shapes (below); make_query and read_shape turn a
// shape into a query and back, so no caller spells a parameter name. A kernel registered by a
// user (estimator_registry::add) may take any named parameters.
//
// Usage:
//   using tessera::models::kernel_id;
//   auto q = make_query(kernel_id::linear, linear_shape{.tokens = 128, .in = 768, .out = 768});
//   auto a = make_query(kernel_id::attention, attention_shape{.heads = 12, .head_dim = 64, .seq_lens = {128, 64}});
//   auto s = read_shape<linear_shape>(q);    // s->tokens == 128; a missing or <= 0 one is invalid
//   auto r = tessera::timing::kernel_query("relu", {{"elements", 40}});   // by name
#pragma once

#include <cstdint>
#include <array>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/kernel_list.hpp"
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

// ---- typed shapes of the built-in kernels ----

struct elements_shape {  ///< copy, add, scale, gelu
  int64_t elements = 0;
};
struct reduce_shape {  ///< reduce_sum: `elements` summed into `outputs` values
  int64_t elements = 0;
  int64_t outputs = 1;
};
struct matmul_shape {  ///< [m x k] * [k x n]
  int64_t m = 0, n = 0, k = 0;
};
struct linear_shape {  ///< y = x W + b, x [tokens x in]
  int64_t tokens = 0, in = 0, out = 0;
};
struct rows_shape {  ///< layer_norm, embed: `tokens` rows of `hidden`
  int64_t tokens = 0, hidden = 0;
};
struct softmax_shape {
  int64_t rows = 0, cols = 0;
};
struct attention_shape {  ///< per-sequence attention, no cross-sequence work
  int64_t heads = 0, head_dim = 0;
  std::vector<int64_t> seq_lens;
};
struct classifier_shape {  ///< pooler (dense + tanh), then a dense to the labels
  int64_t seqs = 0, hidden = 0, labels = 0;
};

/// A shape's parameters, listed once: the name in a query, the member, whether it may be absent.
template <class S>
struct shape_param {
  std::string_view name;
  int64_t S::*member;
  bool optional = false;
};
constexpr auto shape_params(const elements_shape*) {
  return std::array{shape_param<elements_shape>{"elements", &elements_shape::elements}};
}
constexpr auto shape_params(const reduce_shape*) {
  return std::array{shape_param<reduce_shape>{"elements", &reduce_shape::elements},
                    shape_param<reduce_shape>{"outputs", &reduce_shape::outputs, true}};
}
constexpr auto shape_params(const matmul_shape*) {
  return std::array{shape_param<matmul_shape>{"m", &matmul_shape::m}, shape_param<matmul_shape>{"n", &matmul_shape::n},
                    shape_param<matmul_shape>{"k", &matmul_shape::k}};
}
constexpr auto shape_params(const linear_shape*) {
  return std::array{shape_param<linear_shape>{"tokens", &linear_shape::tokens},
                    shape_param<linear_shape>{"in", &linear_shape::in},
                    shape_param<linear_shape>{"out", &linear_shape::out}};
}
constexpr auto shape_params(const rows_shape*) {
  return std::array{shape_param<rows_shape>{"tokens", &rows_shape::tokens},
                    shape_param<rows_shape>{"hidden", &rows_shape::hidden}};
}
constexpr auto shape_params(const softmax_shape*) {
  return std::array{shape_param<softmax_shape>{"rows", &softmax_shape::rows},
                    shape_param<softmax_shape>{"cols", &softmax_shape::cols}};
}
constexpr auto shape_params(const attention_shape*) {
  return std::array{shape_param<attention_shape>{"heads", &attention_shape::heads},
                    shape_param<attention_shape>{"head_dim", &attention_shape::head_dim}};
}
constexpr auto shape_params(const classifier_shape*) {
  return std::array{shape_param<classifier_shape>{"seqs", &classifier_shape::seqs},
                    shape_param<classifier_shape>{"hidden", &classifier_shape::hidden},
                    shape_param<classifier_shape>{"labels", &classifier_shape::labels}};
}

/// "m, n, k"; "elements, outputs (optional)"; attention adds "; seq_lens".
template <class S>
std::string shape_param_names() {
  std::string out;
  for (const auto& p : shape_params(static_cast<const S*>(nullptr)))
    out += (out.empty() ? "" : ", ") + std::string(p.name) + (p.optional ? " (optional)" : "");
  if constexpr (std::is_same_v<S, attention_shape>) out += "; seq_lens";
  return out;
}

/// The query of kernel `id` with shape `s`.
template <class S>
kernel_query make_query(models::kernel_id id, const S& s, dtype t = dtype::fp16) {
  kernel_query q;
  q.kernel = std::string(models::kernel_name(id));
  q.type = t;
  for (const auto& p : shape_params(static_cast<const S*>(nullptr))) q.params[std::string(p.name)] = s.*(p.member);
  if constexpr (std::is_same_v<S, attention_shape>) q.seq_lens = s.seq_lens;
  return q;
}

/// The shape a query carries; a missing parameter (not optional) or one <= 0 is invalid_argument
/// naming the kernel and the parameter.
template <class S>
result<S> read_shape(const kernel_query& q) {
  S s;
  for (const auto& p : shape_params(static_cast<const S*>(nullptr))) {
    auto v = p.optional ? q.get_or(p.name, s.*(p.member)) : q.get(p.name);
    if (!v.ok()) return v.error();
    s.*(p.member) = *v;
  }
  if constexpr (std::is_same_v<S, attention_shape>) s.seq_lens = q.seq_lens;
  return s;
}

}  // namespace tessera::timing
