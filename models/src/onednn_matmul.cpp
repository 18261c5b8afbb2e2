// oneDNN matmul primitives shared by the bf16 and int8 Linear layers (onednn_matmul.hpp).
#include "onednn_matmul.hpp"

#include <cstdlib>
#include <map>
#include <tuple>
#include <vector>

#include "kernels_internal.hpp"
#include "tessera/common/check.hpp"

namespace tessera::models::detail {

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;

dnnl::memory::desc packed_weight_desc(int64_t in, int64_t out, dt src, dt wei, dt dst) {
  static std::mutex mu;
  static std::map<std::tuple<int64_t, int64_t, dt, dt, dt>, dnnl::memory::desc> descs;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(in, out, src, wei, dst);
  auto it = descs.find(key);
  if (it != descs.end()) return it->second;
  const auto s = dnnl::memory::desc(dims{kMatmulChunk, in}, src, dims{in, 1});
  const auto w = dnnl::memory::desc(dims{in, out}, wei, dnnl::memory::format_tag::any);
  const auto d = dnnl::memory::desc(dims{kMatmulChunk, out}, dst, dims{out, 1});
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(s, w, d), cpu_engine());
  return descs.emplace(key, pd.weights_desc()).first->second;
}

size_t matmul_key_hash::operator()(const matmul_key& k) const {
  size_t h = 1469598103934665603ull;
  for (int64_t v : {k.in, k.out, k.ldx, k.ldy, k.rows, int64_t{k.bias}, int64_t(k.dst), int64_t(k.act),
                    int64_t{k.packed}, int64_t{k.in_major}, k.ldw, int64_t{k.threads}})
    h = (h ^ static_cast<size_t>(v)) * 1099511628211ull;
  return h;
}

dnnl::memory::desc weight_desc(const matmul_key& k, dt src, dt wei) {
  // W [out, in] row-major (row stride ldw) is W^T [in, out] with strides (1, ldw).
  return k.packed     ? packed_weight_desc(k.in, k.out, src, wei, src == dt::s8 ? dt::f32 : wei)
         : k.in_major ? dnnl::memory::desc(dims{k.in, k.out}, wei, dims{k.ldw, 1})
                      : dnnl::memory::desc(dims{k.in, k.out}, wei, dims{1, k.ldw});
}

dnnl::algorithm eltwise_of(activation act) {
  switch (act) {
    case activation::gelu_erf: return dnnl::algorithm::eltwise_gelu_erf;
    case activation::gelu_tanh: return dnnl::algorithm::eltwise_gelu_tanh;
    case activation::silu: return dnnl::algorithm::eltwise_swish;
    default: return dnnl::algorithm::eltwise_relu;
  }
}

void append_activation(dnnl::post_ops& ops, activation act) {
  if (act != activation::none)
    ops.append_eltwise(1.0f, eltwise_of(act), act == activation::silu ? 1.0f : 0.0f, 0.0f);
}

void execute_matmul(const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
                    std::unordered_map<int, dnnl::memory>& args) {
  thread_local std::vector<char> scratch;
  if (const size_t need = scratchpad.get_size(); need > 0) {
    if (scratch.size() < need) scratch.resize(need);
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, cpu_engine(), scratch.data()));
  }
  auto& s = thread_stream();
  prim.execute(s, args);
  s.wait();
}

std::shared_ptr<void> aligned_buffer(size_t bytes) {
  void* buf = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  TESSERA_CHECK(buf != nullptr) << "out of memory allocating " << bytes << " bytes for a packed weight";
  return std::shared_ptr<void>(buf, [](void* p) { std::free(p); });
}

}  // namespace tessera::models::detail
