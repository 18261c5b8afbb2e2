// safetensors reading (memory-mapped, validated) and writing.
#include "tessera/models/safetensors.hpp"

#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tessera::models {
namespace {

using detail::half_to_float;

}  // namespace

result<safetensors_file> map_safetensors(const std::string& path) {
  auto mapped = detail::map_file(path, 8, "truncated safetensors file (the 8-byte header length is missing)");
  if (!mapped) return mapped.error();
  auto map = *mapped;
  const auto* bytes = static_cast<const unsigned char*>(map->addr);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > map->size - 8)
    return status::invalid(path + ": truncated safetensors file: header claims " + std::to_string(header_len) +
                           " bytes but the file has " + std::to_string(map->size - 8) + " after the length");
  const size_t data_start = 8 + header_len, data_size = map->size - data_start;
  safetensors_file out;
  try {
    const auto j = nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(bytes + 8), header_len));
    if (!j.is_object()) return status::invalid(path + ": safetensors header is not a JSON object");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      const std::string& name = it.key();
      const auto& t = it.value();
      auto bad = [&](const std::string& what) {
        return status::invalid(path + ": tensor \"" + name + "\": " + what);
      };
      if (!t.is_object() || !t.contains("dtype") || !t.contains("shape") || !t.contains("data_offsets"))
        return bad("header entry needs dtype, shape and data_offsets");
      const std::string dtype = t["dtype"].get<std::string>();
      std::vector<int64_t> shape = t["shape"].get<std::vector<int64_t>>();
      const auto offs = t["data_offsets"].get<std::vector<uint64_t>>();
      if (offs.size() != 2 || offs[0] > offs[1]) return bad("data_offsets must be [begin, end]");
      if (offs[1] > data_size)
        return bad("data [" + std::to_string(offs[0]) + ", " + std::to_string(offs[1]) +
                   ") runs past the end of the file (" + std::to_string(data_size) +
                   " data bytes): the file is truncated");
      uint64_t numel = 1;
      for (int64_t d : shape) {
        if (d < 0) return bad("negative dimension in shape " + shape_string(shape));
        numel *= static_cast<uint64_t>(d);
      }
      const size_t elem = dtype == "F32" ? 4 : (dtype == "F16" || dtype == "BF16") ? 2 : 0;
      if (elem == 0) {
        // Integer buffers (e.g. position_ids) are not weights; anything else is unusable.
        if (dtype == "I64" || dtype == "I32" || dtype == "U8" || dtype == "BOOL") continue;
        return bad("dtype " + dtype + " is not supported (use F32, F16 or BF16)");
      }
      if (numel * elem != offs[1] - offs[0])
        return bad("shape " + shape_string(shape) + " of " + dtype + " needs " + std::to_string(numel * elem) +
                   " bytes but data_offsets span " + std::to_string(offs[1] - offs[0]));
      const unsigned char* src = bytes + data_start + offs[0];
      const float* data = nullptr;
      if (elem == 4 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0) {
        data = reinterpret_cast<const float*>(src);  // zero copy
      } else {
        std::vector<float> v(numel);
        for (uint64_t i = 0; i < numel; ++i) {
          if (elem == 4) {
            std::memcpy(&v[i], src + 4 * i, 4);
          } else {
            uint16_t x;
            std::memcpy(&x, src + 2 * i, 2);
            if (dtype == "F16") {
              v[i] = half_to_float(x);
            } else {
              const uint32_t bits = uint32_t{x} << 16;
              std::memcpy(&v[i], &bits, 4);
            }
          }
        }
        map->converted.push_back(std::move(v));
        data = map->converted.back().data();
      }
      out.tensors[name] = tensor_view{std::move(shape), data};
    }
  } catch (const nlohmann::json::exception& e) {
    return status::invalid(path + ": corrupt safetensors header: " + e.what());
  }
  out.storage = map;
  return out;
}

status write_safetensors(const std::string& path, const std::map<std::string, tensor_view>& tensors) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const auto& [name, t] : tensors) {
    const uint64_t n = static_cast<uint64_t>(t.numel()) * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h += ' ';  // keep the data 8-byte aligned, as HF does
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return status::io_error(path + ": cannot create: " + std::strerror(errno));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((uint64_t{h.size()} >> (8 * i)) & 0xff);
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors)
    f.write(reinterpret_cast<const char*>(t.data), static_cast<std::streamsize>(t.numel() * 4));
  if (!f) return status::io_error(path + ": write failed");
  return {};
}

}  // namespace tessera::models
