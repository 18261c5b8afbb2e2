// libFuzzer target over GGUF files: bytes -> parse_gguf (borrowed, exactly `size` bytes so ASan
// catches a read past the end) -> every tensor to fp32 -> gguf_decoder. An error or a model, never
// a crash; a parsed file's tensors lie inside it.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tessera/models/gguf_reader.hpp"

using namespace tessera::models;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> exact(data, data + size);
  auto g = parse_gguf(exact.data(), exact.size(), "fuzz.gguf");
  if (!g) return 0;
  for (const auto& t : g->tensors) {
    if (g->data_offset + t.offset + t.bytes > size) {
      std::fprintf(stderr, "gguf_fuzz: tensor %s lies past the end\n", t.name.c_str());
      std::abort();
    }
    if (t.elements() > (1u << 20)) continue;  // a valid but large tensor: skip the copy
    auto v = gguf_tensor_f32(*g, t);
    if (v && v->size() != t.elements()) std::abort();
  }
  auto m = gguf_decoder(*g);
  (void)m;
  return 0;
}
