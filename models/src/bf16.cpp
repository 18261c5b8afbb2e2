// bf16 values and the CPU check for the bf16 forward.
#include "tessera/models/bf16.hpp"

#include <immintrin.h>

#include <oneapi/dnnl/dnnl.hpp>

namespace tessera::models {

std::string_view dtype_name(dtype d) {
  switch (d) {
    case dtype::bf16: return "bf16";
    case dtype::int8: return "int8";
    case dtype::q8_0: return "q8_0";
    case dtype::fp32: break;
  }
  return "fp32";
}

result<dtype> parse_dtype(std::string_view text, bool allow_int8, bool allow_q8_0) {
  if (text == "fp32") return dtype::fp32;
  if (text == "bf16") return dtype::bf16;
  if (text == "int8") {
    if (allow_int8) return dtype::int8;
    return status::unsupported(
        "--dtype int8 runs the BERT encoder only (tessera-models, tessera-bench-models, tessera-serve, "
        "tessera-gpu, tessera-host on tiles); use fp32 or bf16 here");
  }
  if (text == "q8_0") {
    if (allow_q8_0) return dtype::q8_0;
    return status::unsupported(
        "--dtype q8_0 (Linear matrices kept as GGUF Q8_0 blocks) runs decoders in one process only "
        "(tessera-models generate, tessera-bench-decoders); use fp32 or bf16 here");
  }
  return status::invalid("unknown dtype \"" + std::string(text) + "\": use fp32 or bf16" +
                         (allow_int8 ? " or int8" : "") + (allow_q8_0 ? " or q8_0" : ""));
}

int dtype_bytes(dtype d) {
  switch (d) {
    case dtype::bf16: return 2;
    case dtype::int8: return 1;
    case dtype::q8_0: return 1;
    case dtype::fp32: break;
  }
  return 4;
}

namespace {

// oneDNN's ISA values are supersets as bit masks: avx512_core_bf16's bits are all set in AMX's.
bool isa_has_bf16(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (static_cast<unsigned>(isa) & want) == want;
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::sse41: return "sse41";
    default: return "other";
  }
}

const bool cpu_has_avx512_bf16 = __builtin_cpu_supports("avx512bf16");

__attribute__((target("avx512f,avx512bf16,avx512vl"))) void to_bf16_avx512(const float* x, int64_t n,
                                                                             bfloat16* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(y + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// bf16 bits to float bits: zero-extend to 32 bits, shift up. (The maskz forms: GCC 12 warns of an
// uninitialised operand inside the unmasked intrinsics.)
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m512 widen(__m256i h) {
  const __mmask16 all = 0xFFFF;
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16));
}

__attribute__((target("avx512f,avx512bw,avx512vl"))) void to_float_avx512(const bfloat16* x, int64_t n, float* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, widen(_mm256_maskz_loadu_epi16(m, x + i)));
  }
}

}  // namespace

std::string bf16_isa_name() { return isa_name(dnnl::get_effective_cpu_isa()); }

namespace {

const bool cpu_has_avx512_vnni = __builtin_cpu_supports("avx512vnni");

bool isa_has_vnni(dnnl::cpu_isa isa) {
  const auto want = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_vnni);
  return (static_cast<unsigned>(isa) & want) == want;
}

}  // namespace

status check_dtype_supported(dtype d) {
  if (d == dtype::fp32 || d == dtype::q8_0) return status{};
  if (d == dtype::int8) {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    if (!cpu_has_avx512_vnni || !isa_has_vnni(isa))
      return status::unsupported(std::string("--dtype int8 needs a CPU with avx512_vnni (oneDNN's ISA here is ") +
                                 isa_name(isa) + (cpu_has_avx512_vnni ? ", lowered by ONEDNN_MAX_CPU_ISA" : "") +
                                 "); use --dtype fp32 or bf16");
    return status{};
  }
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  if (!cpu_has_avx512_bf16 || !isa_has_bf16(isa))
    return status::unsupported(std::string("--dtype bf16 needs a CPU with avx512_bf16 or AMX (oneDNN's ISA here is ") +
                               isa_name(isa) + (cpu_has_avx512_bf16 ? ", lowered by ONEDNN_MAX_CPU_ISA" : "") +
                               "); use --dtype fp32");
  return status{};
}

void to_bf16(const float* x, int64_t n, bfloat16* y) {
  if (cpu_has_avx512_bf16) return to_bf16_avx512(x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
}

void to_float(const bfloat16* x, int64_t n, float* y) {
  if (cpu_has_avx512_bf16) return to_float_avx512(x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] = to_float(x[i]);
}

}  // namespace tessera::models
