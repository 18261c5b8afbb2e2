// tessera/models/bf16.hpp: the compute data type of a forward (fp32, the reference, bf16, or int8
// for the BERT encoder's Linear layers) and bfloat16 values.
//
// bf16 keeps fp32's 8-bit exponent and 7 of its 23 mantissa bits: the emulated hardware stores
// activations and weights this way and accumulates in fp32. Conversion rounds to nearest even.
//
//   auto d = parse_dtype("bf16");                  // result<dtype>; anything else: invalid
//   if (auto st = check_dtype_supported(*d); st.code() != tessera::errc::ok) { print st; exit 2; }
//   std::vector<bfloat16> h(n);
//   to_bf16(x, n, h.data());                        // vectorised when the CPU has avx512_bf16
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/common/status.hpp"

namespace tessera::models {

/// Element type of weights and activations in a forward. fp32 is the reference. int8 is the BERT
/// encoder's Linear layers only (int8_weights.hpp): parse_dtype refuses it unless the caller
/// allows it, so a path without int8 (the decoders, the other benches) never sees it. q8_0 is
/// the single-process decoder's Linear matrices kept as GGUF Q8_0 blocks (kernels_q8.hpp) with
/// fp32 activations, refused likewise unless allowed.
enum class dtype : uint8_t { fp32, bf16, int8, q8_0 };

/// "fp32", "bf16", "int8" or "q8_0".
std::string_view dtype_name(dtype d);

/// How far a bf16 forward's logits may be from the fp32 reference's: this times
/// max(1, max |fp32 logit|) (docs/models.md, "bf16": 8x the error measured on BERT-base, and a
/// wrong layout or a stale weight moves logits by 0.1 or more).
inline constexpr double bf16_logit_bound = 0.05;
/// How far an int8 BERT forward's logits may be from the fp32 reference's: this times
/// max(1, max |fp32 logit|) (docs/models.md, "int8").
inline constexpr double int8_logit_bound = 0.15;
/// Parses "fp32" or "bf16" (and "int8" when allow_int8, "q8_0" when allow_q8_0); anything else is
/// an invalid_argument naming the choices. "int8" or "q8_0" where not allowed names the paths that
/// run it.
result<dtype> parse_dtype(std::string_view text, bool allow_int8 = false, bool allow_q8_0 = false);
/// Bytes per element: 4, 2 or 1 (int8: the Linear matrices' and their inputs'; q8_0: the matrices'
/// values, 1.125 with the block scales).
int dtype_bytes(dtype d);

/// OK when this CPU runs `d` natively (q8_0: everywhere; AVX-512 kernels where the CPU has them). int8 needs oneDNN's avx512_core_vnni ISA (or a superset)
/// and the CPU's avx512_vnni instructions. bf16 needs oneDNN's avx512_core_bf16 or AMX kernels (the
/// effective ISA, which ONEDNN_MAX_CPU_ISA may lower) and the avx512_bf16 instructions; without
/// them it is `unsupported` with a message saying so: tessera never falls back to fp32 silently,
/// and oneDNN's emulated bf16 is slower than fp32.
status check_dtype_supported(dtype d);
/// The oneDNN ISA name this process would run bf16 on ("avx512_core_bf16", "avx512_core_amx") or
/// the effective ISA when it lacks bf16 (e.g. "avx512_core").
std::string bf16_isa_name();

/// A bfloat16 value: the upper 16 bits of an IEEE float.
struct bfloat16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bfloat16) == 2);

inline float to_float(bfloat16 v) {
  const uint32_t u = uint32_t{v.bits} << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}

/// Round to nearest even; NaN stays NaN (quiet), infinities stay infinite, denormals become a
/// signed zero (as the avx512_bf16 instruction vcvtneps2bf16 does).
inline bfloat16 to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {static_cast<uint16_t>((u >> 16) | 0x40u)};
  if ((u & 0x7f800000u) == 0) return {static_cast<uint16_t>((u >> 16) & 0x8000u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}

/// y[i] = to_bf16(x[i]) for n values (bit-identical to the scalar one, vectorised).
void to_bf16(const float* x, int64_t n, bfloat16* y);
/// y[i] = to_float(x[i]) for n values.
void to_float(const bfloat16* x, int64_t n, float* y);

}  // namespace tessera::models
