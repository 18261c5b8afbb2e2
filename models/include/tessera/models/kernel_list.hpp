// tessera/models/kernel_list.hpp: the kernels of tessera's tile programs, listed once. The tile's
// kernel registry, the timing model's estimators and host::program_timing (which turns a
// program's kernel calls into timing queries) all name kernels through this list.
//
// Each entry: X(name, runs_on_tiles, has_estimator)
//   runs_on_tiles   a tile registers a kernel of that name (tile_daemon/src/*_kernels.cpp) and
//                   program_timing maps its calls to timing queries (its switch covers every id)
//   has_estimator   the timing model has a cycle estimator of that name (timing/src/builtin_kernels.cpp)
// A kernel with runs_on_tiles but no estimator is timed as the estimated kernels it is made of
// (bias_residual_ln: two adds and a layer_norm); one with an estimator but no tile kernel is a
// part of a fused tile kernel (layer_norm, gelu, softmax) or a GPU-only form.
// docs/conventions.md ("Adding a kernel") says what else a new entry needs; the compiler and
// tests/tile_daemon/kernel_list_test.cpp point at whatever is missing.
//
//   auto id = tessera::models::find_kernel("linear");        // kernel_id::linear
//   std::string_view n = kernel_name(kernel_id::attention);   // "attention"
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#define TESSERA_KERNELS(X)                \
  X(copy, true, true)                     \
  X(add, true, true)                      \
  X(scale, true, true)                    \
  X(reduce_sum, true, true)               \
  X(matmul, true, true)                   \
  X(embed, true, true)                    \
  X(linear, true, true)                   \
  X(attention, true, true)                \
  X(bias_residual_ln, true, false)        \
  X(classifier, true, true)               \
  X(pool, true, false)                    \
  X(dec_embed, true, false)               \
  X(dec_norm, true, false)                \
  X(dec_attention, true, false)           \
  X(dec_residual, true, false)            \
  X(dec_multiply, true, false)            \
  X(dec_logits, true, false)              \
  X(dec_sample, true, false)              \
  X(dec_head, true, false)                \
  X(dec_sample_part, true, false)         \
  X(dec_sample_merge, true, false)        \
  X(dec_reduce, true, false)              \
  X(dec_next_ids, true, false)            \
  X(dec_feed, true, false)                \
  X(layer_norm, false, true)              \
  X(gelu, false, true)                    \
  X(softmax, false, true)

namespace tessera::models {

enum class kernel_id : uint8_t {
#define TESSERA_KERNEL_ID(name, tiles, estimator) name,
  TESSERA_KERNELS(TESSERA_KERNEL_ID)
#undef TESSERA_KERNEL_ID
};

struct kernel_traits {
  kernel_id id;
  std::string_view name;
  bool runs_on_tiles;
  bool has_estimator;
};

/// Every kernel, in list order.
inline constexpr std::array all_kernels = {
#define TESSERA_KERNEL_TRAITS(name, tiles, estimator) kernel_traits{kernel_id::name, #name, tiles, estimator},
    TESSERA_KERNELS(TESSERA_KERNEL_TRAITS)
#undef TESSERA_KERNEL_TRAITS
};

constexpr const kernel_traits& traits(kernel_id id) { return all_kernels[static_cast<size_t>(id)]; }
/// The name tile programs and estimators use, e.g. "layer_norm".
constexpr std::string_view kernel_name(kernel_id id) { return traits(id).name; }
/// The kernel called `name`, or nothing.
constexpr std::optional<kernel_id> find_kernel(std::string_view name) {
  for (const auto& k : all_kernels)
    if (k.name == name) return k.id;
  return std::nullopt;
}

}  // namespace tessera::models
