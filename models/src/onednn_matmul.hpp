// What the bf16 and int8 Linear layers share (kernels_bf16.cpp, kernels_int8.cpp): oneDNN matmul
// primitives with a fixed row count, made once per shape and kept, over a weight that is packed in
// the layout brgemm picks or a plain view of rows someone else keeps alive; the row chunks a
// linear runs in; a per-thread scratchpad.
//
// oneDNN 2.6 runs a bf16 or int8 matmul on its brgemm kernels only when the row count is fixed at
// creation: with a runtime row count it takes gemm:jit (bf16: 50 GFLOP/s against 230-300 for
// brgemm on 2 threads here). A fixed-M primitive costs 1-5 ms to create, so a linear over T rows
// runs as chunks of kMatmulChunk rows, then one chunk of the remainder rounded down to a multiple
// of 32, then the last < 32 rows: at most 1 + 15 + 31 primitives per weight shape and dtype.
#pragma once

#include <omp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>

#include "tessera/models/kernel_params.hpp"  // activation

namespace tessera::models::detail {

inline constexpr int64_t kMatmulChunk = 512;

/// The packed layout oneDNN's brgemm picks for W^T [in, out] of `wei` elements under `src`
/// inputs (bf16 or s8) and `dst` outputs (the same for every row count: checked for M = 3 .. 4096
/// on BERT-base shapes), made once per (in, out, dtypes) and kept.
dnnl::memory::desc packed_weight_desc(int64_t in, int64_t out, dnnl::memory::data_type src,
                                      dnnl::memory::data_type wei, dnnl::memory::data_type dst);

/// One matmul primitive's shape: x [rows, in] (row stride ldx) times W^T into y [rows, out] (row
/// stride ldy) of dst elements, with a bias, an activation, and W packed or a view (row-major
/// [out, in], or in_major [in, out], row stride ldw).
struct matmul_key {
  int64_t in = 0, out = 0, ldx = 0, ldy = 0, rows = 0;
  bool bias = false;
  dnnl::memory::data_type dst = dnnl::memory::data_type::f32;
  activation act = activation::none;
  bool packed = true, in_major = false;
  int64_t ldw = 0;  ///< a view's row stride (0: packed)
  /// brgemm fixes its thread count when the primitive is made: one made under 1 OpenMP thread ran
  /// on 1 thread after the caller went to 2 (measured: a bf16 forward at 1.07 cores of 2).
  int threads = omp_get_max_threads();
  bool operator==(const matmul_key& o) const = default;
};
struct matmul_key_hash {
  size_t operator()(const matmul_key& k) const;
};

/// W's memory desc for `k`: packed_weight_desc, or the view's strides.
dnnl::memory::desc weight_desc(const matmul_key& k, dnnl::memory::data_type src, dnnl::memory::data_type wei);

/// The eltwise post-op of an activation (relu for none: callers append none of them).
dnnl::algorithm eltwise_of(activation act);
/// Appends act's eltwise post-op (nothing for activation::none).
void append_activation(dnnl::post_ops& ops, activation act);

/// A primitive made once per key and kept (thread-safe); Entry holds it and its descs.
template <class Entry>
class matmul_cache {
 public:
  std::shared_ptr<const Entry> get(const matmul_key& k, const std::function<std::shared_ptr<Entry>()>& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(k);
      if (it != cache_.end()) return it->second;
    }
    std::shared_ptr<const Entry> e = make();
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.emplace(k, std::move(e)).first->second;
  }

 private:
  std::mutex mu_;
  std::unordered_map<matmul_key, std::shared_ptr<const Entry>, matmul_key_hash> cache_;
};

/// Runs `prim` on this thread's stream with `args` and this thread's scratchpad of `scratchpad`'s
/// size (the primitives are made with scratchpad_mode::user: with the library's, two threads
/// running matmuls at once corrupted each other's results), and waits.
void execute_matmul(const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
                    std::unordered_map<int, dnnl::memory>& args);

/// Calls run(first_row, rows) over [0, T) in the chunks above.
template <class F>
void for_each_row_chunk(int64_t T, F&& run) {
  int64_t row = 0;
  while (T - row >= kMatmulChunk) {
    run(row, kMatmulChunk);
    row += kMatmulChunk;
  }
  if (const int64_t rest32 = (T - row) / 32 * 32; rest32 > 0) {
    run(row, rest32);
    row += rest32;
  }
  if (T - row > 0) run(row, T - row);
}

/// A 64-byte aligned buffer of `bytes` (rounded up), freed with the returned owner.
std::shared_ptr<void> aligned_buffer(size_t bytes);

}  // namespace tessera::models::detail
