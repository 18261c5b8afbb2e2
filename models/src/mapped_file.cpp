#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

namespace tessera::models::detail {

mapped_file::~mapped_file() {
  if (addr != MAP_FAILED) munmap(addr, size);
}

result<std::shared_ptr<mapped_file>> map_file(const std::string& path, size_t min_size, const std::string& too_small) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return status::not_found(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return status::io_error(path + ": fstat failed: " + std::strerror(e));
  }
  auto map = std::make_shared<mapped_file>();
  map->size = static_cast<size_t>(st.st_size);
  if (map->size < min_size || map->size == 0) {
    ::close(fd);
    return status::invalid(path + ": " + too_small);
  }
  map->addr = ::mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (map->addr == MAP_FAILED) return status::io_error(path + ": mmap failed: " + std::strerror(e));
  return map;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      uint32_t m = mant;
      do { ++e; m <<= 1; } while ((m & 0x400) == 0);
      bits = sign | ((127 - 15 - e) << 23) | ((m & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// IEEE binary16 of `f`, rounded to nearest even (overflow to infinity, NaN kept a NaN).
uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65536: inf
  if (mag < 0x38800000u) {  // a half subnormal (or zero): units of 2^-24, rounded to nearest even
    const float a = std::fabs(f) * 16777216.0f;  // exact: a power-of-two scale
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a)));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((mag >> 13) - (112u << 10));
  const uint32_t rest = mag & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry into the exponent is right
  return static_cast<uint16_t>(sign | h);
}

}  // namespace tessera::models::detail
