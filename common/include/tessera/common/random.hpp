// tessera/common/random.hpp: the portable PRNG (splitmix64) behind seeded weights, workloads,
// arrivals and texts, and the seed's length mix drawn from it. The same seed gives the same
// numbers on every machine and compiler (integer arithmetic; reals from the top 53 or 24 bits).
//
//   tessera::splitmix64 rng(7);
//   int64_t id = rng.uniform(1000, 30521);             // inclusive bounds
//   tessera::length_mix mix{.long_share = 0.4};        // the seed's mix: 40% long
//   int32_t tokens = mix.draw(rng);                    // U[200,512] with p 0.4, else U[8,64]
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

namespace tessera {

/// splitmix64 (Steele, Lea and Flood's generator): one 64-bit state, one multiply-xorshift output.
struct splitmix64 {
  uint64_t state;
  explicit splitmix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 bits.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [0, 1) with 24 bits, exactly representable as float.
  float unit_float() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }
  /// Uniform integer in [lo, hi] (inclusive); the modulo bias is below 2^-40 for tessera's ranges.
  int64_t uniform(int64_t lo, int64_t hi) {
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  /// An inter-arrival time of a Poisson process at `rate` per second (1 - unit() is in (0, 1]).
  double exponential(double rate) { return -std::log(1.0 - unit()) / rate; }
};

/// Request lengths in tokens ([CLS]/[SEP] included): long from U[long_min, long_max] with
/// probability long_share, else short from U[short_min, short_max]. The defaults are the seed's
/// mix (long_share 0.4 is its "seed-40").
struct length_mix {
  std::string name;
  double long_share = 0.0;
  int32_t short_min = 8, short_max = 64;
  int32_t long_min = 200, long_max = 512;
  /// One length: a 53-bit coin against long_share, then the length (two draws from `rng`).
  int32_t draw(splitmix64& rng) const {
    const bool is_long = rng.unit() < long_share;
    return static_cast<int32_t>(is_long ? rng.uniform(long_min, long_max) : rng.uniform(short_min, short_max));
  }
};

}  // namespace tessera
