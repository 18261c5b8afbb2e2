// tessera/models/kernel_params.hpp: the parameters of each tile kernel as a typed struct with one
// field list. On the wire a kernel call carries its parameters as two arrays (integers and reals,
// exchange::kernel_call); both are written (to_wire) and read back (from_wire) from the struct's
// field list, so placement, which writes them, the codec, which checks them, and the tile kernel,
// which reads them, cannot disagree on positions or counts. Reading checks the exact count of
// each array and each field's range.
//
//   auto w = to_wire(dec_norm_params{{m, M}, /*rms=*/true, 1e-5f});      // w.ints = {m, M, 1}
//   dec_norm_params p;
//   if (auto err = from_wire(p, w.ints, w.reals)) ...                      // "dec_norm: ..."
//
// A new kernel with parameters: a struct here with fields(), a params_for<> line, and
// the kernel reads it with kernel_args::params_as (tile_daemon/src/kernel_util.hpp).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/models/embedding.hpp"
#include "tessera/models/kernel_list.hpp"

namespace tessera::models {

/// The rows of one micro-batch: micro-batch `micro` of `micros` (the first two fields of every
/// kernel that works on a batch's rows).
struct micro_batch {
  uint32_t micro = 0, micros = 1;
  template <class F, class S>
  static void micro_fields(F& f, S& s) {
    f(s.micro, "micro");
    f(s.micros, "micros");
  }
};

/// The activation a Linear applies to its output (kernels.hpp's linear and the tile kernel).
enum class activation : uint8_t { none, gelu_erf, gelu_tanh, relu, silu };
/// The largest value of each enum a parameter struct holds (the reader refuses anything above).
constexpr activation wire_max(activation) { return activation::silu; }

/// Rotary position embeddings as Hugging Face's rope_scaling defines them (models/src/decoder_kernels.cpp
/// rope_inv_freq computes the frequencies; rotary_tables the angles).
enum class rope_kind : uint8_t {
  none,    ///< inv_freq[i] = theta^(-2i/d)
  linear,  ///< every frequency divided by factor (positions / factor)
  llama3,  ///< Llama 3.1: long wavelengths divided by factor, short ones kept, a smooth blend between
  yarn,    ///< YaRN: NTK-by-parts blend of interpolated and kept frequencies, cos and sin scaled by attention_factor
};
constexpr rope_kind wire_max(rope_kind) { return rope_kind::yarn; }
struct rope_params {
  rope_kind kind = rope_kind::none;
  float theta = 10000.f;
  float factor = 1.f;
  float low_freq_factor = 1.f;          ///< llama3
  float high_freq_factor = 4.f;         ///< llama3
  float original_max_positions = 8192;  ///< llama3, yarn: the context the model was trained on
  float beta_fast = 32.f;               ///< yarn
  float beta_slow = 1.f;                ///< yarn
  float attention_factor = 1.f;         ///< yarn: cos and sin are multiplied by it
  template <class F, class S> static void rope_fields(F& f, S& s) {
    f(s.kind, "rope.kind");
    f(s.theta, "rope.theta");
    f(s.factor, "rope.factor");
    f(s.low_freq_factor, "rope.low_freq_factor");
    f(s.high_freq_factor, "rope.high_freq_factor");
    f(s.original_max_positions, "rope.original_max_positions");
    f(s.beta_fast, "rope.beta_fast");
    f(s.beta_slow, "rope.beta_slow");
    f(s.attention_factor, "rope.attention_factor");
  }
};

struct no_params {
  template <class F, class S> static void fields(F&, S&) {}
};
// scale: out = in * factor
struct scale_params {
  float factor = 1;
  template <class F, class S> static void fields(F& f, S& s) { f(s.factor, "factor"); }
};
// matmul: out = A x B (+ out when accumulating)
struct matmul_params {
  bool accumulate = false;
  template <class F, class S> static void fields(F& f, S& s) { f(s.accumulate, "accumulate"); }
};
// embed (BERT): word + position + type embeddings, then LayerNorm
struct embed_params : micro_batch {
  float eps = 1e-12f;
  int32_t position_pad_id = -1;  ///< RoBERTa's padding_idx: positions skip it (models::embed); -1 = BERT's
  template <class F, class S> static void fields(F& f, S& s) {
    micro_fields(f, s);
    f(s.eps, "eps");
    f(s.position_pad_id, "position_pad_id");
  }
};
// linear: y = x W^T (+ b), then an activation
struct linear_params : micro_batch {
  activation act = activation::none;
  template <class F, class S> static void fields(F& f, S& s) { micro_fields(f, s); f(s.act, "activation"); }
};
// attention (BERT): bidirectional attention within each sequence of the micro-batch
struct attention_params : micro_batch {
  uint32_t heads = 1, head_dim = 1;
  template <class F, class S> static void fields(F& f, S& s) {
    micro_fields(f, s);
    f(s.heads, "heads");
    f(s.head_dim, "head_dim");
  }
};
// bias_residual_ln (BERT) and dec_residual: the lane `part` of `parts` owns a share of the rows
struct bias_residual_ln_params : micro_batch {
  uint32_t part = 0, parts = 1;
  float eps = 1e-12f;
  template <class F, class S> static void fields(F& f, S& s) {
    micro_fields(f, s);
    f(s.part, "part");
    f(s.parts, "parts");
    f(s.eps, "eps");
  }
};
struct dec_residual_params : micro_batch {
  uint32_t part = 0, parts = 1;
  template <class F, class S> static void fields(F& f, S& s) {
    micro_fields(f, s);
    f(s.part, "part");
    f(s.parts, "parts");
  }
};
// dec_reduce (a decoder's all-reduce): the micro-batch's rows of `lanes` partial-sum inputs
struct dec_reduce_params : micro_batch {
  uint32_t lanes = 1;
  template <class F, class S> static void fields(F& f, S& s) {
    micro_fields(f, s);
    f(s.lanes, "lanes");
  }
};
// classifier, dec_embed, dec_multiply, dec_sample: the micro-batch alone
struct rows_params : micro_batch {
  template <class F, class S> static void fields(F& f, S& s) { micro_fields(f, s); }
};
// pool (an embedding model's head): each sequence's vector of the micro-batch, pooled by `mode`
constexpr pooling_mode wire_max(pooling_mode) { return pooling_mode::lasttoken; }
struct pool_params : micro_batch {
  pooling_mode mode = pooling_mode::cls;
  template <class F, class S> static void fields(F& f, S& s) { micro_fields(f, s); f(s.mode, "mode"); }
};
// dec_norm and dec_logits (the final norm before the LM head): RMSNorm or LayerNorm
struct dec_norm_params : micro_batch {
  bool rms = true;
  float eps = 1e-5f;
  template <class F, class S> static void fields(F& f, S& s) {
    micro_fields(f, s);
    f(s.rms, "rms");
    f(s.eps, "eps");
  }
};
// dec_logits: the final norm of each wanting sequence's last row, then (head) the LM head; a split
// head's out tile (plan V > 1) sets head false: every slice's dec_head computes its logits at once
struct dec_logits_params : dec_norm_params {
  bool head = true;
  template <class F, class S> static void fields(F& f, S& s) {
    dec_norm_params::fields(f, s);
    f(s.head, "head");
  }
};
// dec_sample_part and dec_sample_merge (a vocab-parallel LM head): slice `slice` of `slices`
// holds vocabulary ids [begin, begin + its rows) of `vocab`
struct dec_slice_params : micro_batch {
  uint32_t slice = 0, slices = 1, begin = 0, vocab = 0;
  template <class F, class S> static void fields(F& f, S& s) {
    micro_fields(f, s);
    f(s.slice, "slice");
    f(s.slices, "slices");
    f(s.begin, "begin");
    f(s.vocab, "vocab");
  }
};
// dec_attention: causal attention over the paged KV cache of this tile's layer and heads
struct dec_attention_params : micro_batch {
  uint32_t layer = 0;          ///< the layer's index among this tile's layers (its KV slot)
  uint32_t q0 = 0, q1 = 0;     ///< query heads [q0, q1) this tile computes
  uint32_t k0 = 0, k1 = 0;     ///< KV heads [k0, k1) it holds
  uint32_t head_dim = 1;
  uint32_t group = 1;          ///< query heads per KV head (grouped-query attention)
  bool rotary = false;         ///< RoPE on q and k
  uint32_t window = 0;         ///< sliding window in positions; 0 = none
  rope_params rope;            ///< with rotary
  template <class F, class S> static void fields(F& f, S& s) {
    micro_fields(f, s);
    f(s.layer, "layer");
    f(s.q0, "q0");
    f(s.q1, "q1");
    f(s.k0, "k0");
    f(s.k1, "k1");
    f(s.head_dim, "head_dim");
    f(s.group, "group");
    f(s.rotary, "rotary");
    f(s.window, "window");
    rope_params::rope_fields(f, s.rope);
  }
};

/// The parameter struct of each kernel.
template <kernel_id K> struct params_for { using type = no_params; };
template <> struct params_for<kernel_id::scale> { using type = scale_params; };
template <> struct params_for<kernel_id::matmul> { using type = matmul_params; };
template <> struct params_for<kernel_id::embed> { using type = embed_params; };
template <> struct params_for<kernel_id::linear> { using type = linear_params; };
template <> struct params_for<kernel_id::attention> { using type = attention_params; };
template <> struct params_for<kernel_id::bias_residual_ln> { using type = bias_residual_ln_params; };
template <> struct params_for<kernel_id::classifier> { using type = rows_params; };
template <> struct params_for<kernel_id::pool> { using type = pool_params; };
template <> struct params_for<kernel_id::dec_embed> { using type = rows_params; };
template <> struct params_for<kernel_id::dec_norm> { using type = dec_norm_params; };
template <> struct params_for<kernel_id::dec_attention> { using type = dec_attention_params; };
template <> struct params_for<kernel_id::dec_residual> { using type = dec_residual_params; };
template <> struct params_for<kernel_id::dec_reduce> { using type = dec_reduce_params; };
template <> struct params_for<kernel_id::dec_multiply> { using type = rows_params; };
template <> struct params_for<kernel_id::dec_logits> { using type = dec_logits_params; };
template <> struct params_for<kernel_id::dec_sample> { using type = rows_params; };
template <> struct params_for<kernel_id::dec_head> { using type = rows_params; };
template <> struct params_for<kernel_id::dec_sample_part> { using type = dec_slice_params; };
template <> struct params_for<kernel_id::dec_sample_merge> { using type = dec_slice_params; };
template <> struct params_for<kernel_id::dec_next_ids> { using type = rows_params; };
template <> struct params_for<kernel_id::dec_feed> { using type = rows_params; };
template <kernel_id K> using params_t = typename params_for<K>::type;

/// A kernel's parameters as they travel: integers (and booleans, enums) and reals, in field order.
struct wire_params {
  std::vector<int64_t> ints;
  std::vector<float> reals;
};

namespace detail {
struct param_writer {
  wire_params& w;
  template <class T>
  void operator()(const T& v, const char*) {
    if constexpr (std::is_floating_point_v<T>) w.reals.push_back(static_cast<float>(v));
    else w.ints.push_back(static_cast<int64_t>(v));
  }
};
struct param_counter {
  size_t ints = 0, reals = 0;
  template <class T>
  void operator()(const T&, const char*) {
    if constexpr (std::is_floating_point_v<T>) ++reals;
    else ++ints;
  }
};
struct param_reader {
  std::span<const int64_t> ints;
  std::span<const float> reals;
  size_t i = 0, r = 0;
  std::optional<std::string> error;
  template <class T>
  void operator()(T& v, const char* name) {
    if (error) return;
    if constexpr (std::is_floating_point_v<T>) {
      v = reals[r++];
    } else {
      const int64_t x = ints[i++];
      if constexpr (std::is_same_v<T, bool>) {
        if (x != 0 && x != 1) error = std::string(name) + " must be 0 or 1, not " + std::to_string(x);
        else v = x == 1;
      } else if constexpr (std::is_enum_v<T>) {
        if (x < 0 || x > static_cast<int64_t>(wire_max(T{}))) error = std::string(name) + " " + std::to_string(x) + " is out of range";
        else v = static_cast<T>(x);
      } else {
        if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            (std::numeric_limits<T>::max() < std::numeric_limits<int64_t>::max() &&
             x > static_cast<int64_t>(std::numeric_limits<T>::max())))
          error = std::string(name) + " " + std::to_string(x) + " is out of range";
        else v = static_cast<T>(x);
      }
    }
  }
};
}  // namespace detail

/// The wire form of `p`.
template <class P>
wire_params to_wire(const P& p) {
  wire_params w;
  detail::param_writer out{w};
  P::fields(out, p);
  return w;
}

/// Fills `p` from the wire form; an error message (without the kernel's name) when the counts
/// or a field's range are wrong.
template <class P>
std::optional<std::string> from_wire(P& p, std::span<const int64_t> ints, std::span<const float> reals) {
  detail::param_counter c;
  P::fields(c, p);
  if (ints.size() != c.ints || reals.size() != c.reals)
    return "takes " + std::to_string(c.ints) + " integer and " + std::to_string(c.reals) + " real parameters, got " +
           std::to_string(ints.size()) + " and " + std::to_string(reals.size());
  detail::param_reader in{ints, reals};
  P::fields(in, p);
  return in.error;
}

namespace detail {
template <size_t... I>
std::optional<std::string> check_params_impl(kernel_id k, std::span<const int64_t> ints, std::span<const float> reals,
                                             std::index_sequence<I...>) {
  std::optional<std::string> out;
  (void)((static_cast<size_t>(k) == I
              ? (out = [&] {
                   params_t<static_cast<kernel_id>(I)> p;
                   return from_wire(p, ints, reals);
                 }(),
                 true)
              : false) ||
         ...);
  return out;
}
}  // namespace detail

/// Checks the parameters of a call of kernel `k` (what the codec does for every call it decodes).
inline std::optional<std::string> check_params(kernel_id k, std::span<const int64_t> ints, std::span<const float> reals) {
  if (static_cast<size_t>(k) >= all_kernels.size()) return "unknown kernel id " + std::to_string(static_cast<int>(k));
  return detail::check_params_impl(k, ints, reals, std::make_index_sequence<all_kernels.size()>{});
}

}  // namespace tessera::models
