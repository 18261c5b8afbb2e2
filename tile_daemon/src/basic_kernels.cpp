// The elementary kernels: copy, add, scale, reduce_sum, matmul (GEMM through oneDNN).
#include <oneapi/dnnl/dnnl.h>

#include <cstring>

#include "tessera/tile/kernel_registry.hpp"

namespace tessera::tile {
namespace {

status same_elements(const tile_tensor& a, const tile_tensor& b) {
  if (a.elements() != b.elements())
    return status::invalid("'" + a.desc.name + "' has " + std::to_string(a.elements()) + " elements, '" +
                           b.desc.name + "' has " + std::to_string(b.elements()));
  return ok_status();
}

// out = in
status copy_kernel(const kernel_args& a) {
  TESSERA_RETURN_IF_ERROR(same_elements(*a.inputs[0], *a.outputs[0]));
  std::memcpy(a.outputs[0]->data, a.inputs[0]->data, a.inputs[0]->desc.bytes());
  return ok_status();
}

// out = in0 + in1
status add_kernel(const kernel_args& a) {
  TESSERA_RETURN_IF_ERROR(same_elements(*a.inputs[0], *a.outputs[0]));
  TESSERA_RETURN_IF_ERROR(same_elements(*a.inputs[1], *a.outputs[0]));
  const float* x = a.inputs[0]->f32();
  const float* y = a.inputs[1]->f32();
  float* o = a.outputs[0]->f32();
  for (uint64_t i = 0, n = a.outputs[0]->elements(); i < n; ++i) o[i] = x[i] + y[i];
  return ok_status();
}

// out = in * factor
status scale_kernel(const kernel_args& a) {
  auto p = a.params_as<models::scale_params>();
  if (!p) return p.error();
  TESSERA_RETURN_IF_ERROR(same_elements(*a.inputs[0], *a.outputs[0]));
  const float* x = a.inputs[0]->f32();
  float* o = a.outputs[0]->f32();
  const float s = p->factor;
  for (uint64_t i = 0, n = a.outputs[0]->elements(); i < n; ++i) o[i] = x[i] * s;
  return ok_status();
}

// out = sum of all inputs (elementwise)
status reduce_sum_kernel(const kernel_args& a) {
  float* o = a.outputs[0]->f32();
  const uint64_t n = a.outputs[0]->elements();
  for (auto* in : a.inputs) TESSERA_RETURN_IF_ERROR(same_elements(*in, *a.outputs[0]));
  std::memcpy(o, a.inputs[0]->data, n * 4);
  for (size_t k = 1; k < a.inputs.size(); ++k) {
    const float* x = a.inputs[k]->f32();
    for (uint64_t i = 0; i < n; ++i) o[i] += x[i];
  }
  return ok_status();
}

// out[M,N] = A[M,K] x B[K,N] (+ out when accumulating). Rank-2 tensors.
status matmul_kernel(const kernel_args& a) {
  auto p = a.params_as<models::matmul_params>();
  if (!p) return p.error();
  const auto& A = *a.inputs[0];
  const auto& B = *a.inputs[1];
  auto& C = *a.outputs[0];
  if (A.desc.shape.size() != 2 || B.desc.shape.size() != 2 || C.desc.shape.size() != 2)
    return status::invalid("matmul needs rank-2 tensors");
  const int64_t M = A.desc.shape[0], K = A.desc.shape[1], N = B.desc.shape[1];
  if (B.desc.shape[0] != K || C.desc.shape[0] != M || C.desc.shape[1] != N)
    return status::invalid("matmul shapes do not agree: [" + std::to_string(M) + "," + std::to_string(K) + "] x [" +
                           std::to_string(B.desc.shape[0]) + "," + std::to_string(N) + "] -> [" +
                           std::to_string(C.desc.shape[0]) + "," + std::to_string(C.desc.shape[1]) + "]");
  const float beta = p->accumulate ? 1.f : 0.f;
  if (M == 0 || N == 0) return ok_status();
  dnnl_status_t st = dnnl_sgemm('N', 'N', M, N, K, 1.f, A.f32(), K, B.f32(), N, beta, C.f32(), N);
  if (st != dnnl_success) return status::internal("oneDNN sgemm failed with status " + std::to_string(st));
  return ok_status();
}

}  // namespace

void register_basic_kernels(kernel_registry& reg) {
  reg.add(models::kernel_id::copy, {1, 1, 1, 1}, copy_kernel);
  reg.add(models::kernel_id::add, {2, 2, 1, 1}, add_kernel);
  reg.add(models::kernel_id::scale, {1, 1, 1, 1}, scale_kernel);
  reg.add(models::kernel_id::reduce_sum, {1, 64, 1, 1}, reduce_sum_kernel);
  reg.add(models::kernel_id::matmul, {2, 2, 1, 1}, matmul_kernel);
}

}  // namespace tessera::tile
