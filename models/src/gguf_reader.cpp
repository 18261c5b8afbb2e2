// GGUF reader: bounds-checked parse of the header, metadata and tensor infos; tensors to fp32;
// a decoder from llama.cpp's names and layouts (the inverse of write_gguf in gguf.cpp).
#include "tessera/models/gguf_reader.hpp"

#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

namespace tessera::models {
namespace {

// ggml tensor types this reader dequantises, and the names of the others (llama.cpp's numbering).
enum : uint32_t { ggml_f32 = 0, ggml_f16 = 1, ggml_q8_0 = 8, ggml_bf16 = 30 };
constexpr uint64_t q8_0_block = 32, q8_0_bytes = 34;  // fp16 scale + 32 int8
constexpr uint32_t max_dims = 4;                       // GGML_MAX_DIMS
constexpr uint64_t max_string = uint64_t{1} << 30;     // a key or value longer than 1 GiB is a lie

const char* const type_names[] = {
    "F32",     "F16",    "Q4_0",    "Q4_1",  "type 4", "type 5", "Q5_0",   "Q5_1",   "Q8_0",  "Q8_1",
    "Q2_K",    "Q3_K",   "Q4_K",    "Q5_K",  "Q6_K",   "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
    "IQ4_NL",  "IQ3_S",  "IQ2_S",   "IQ4_XS", "I8",    "I16",    "I32",    "I64",    "F64",   "IQ1_M",
    "BF16",    "type 31", "type 32", "type 33", "TQ1_0", "TQ2_0", "type 36", "type 37", "type 38", "MXFP4"};

using detail::half_to_float;

// Reads little-endian values from [p, end); every read checks what is left first.
class cursor {
 public:
  cursor(const uint8_t* base, uint64_t size, const std::string& source) : base_(base), size_(size), source_(source) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }
  status need(uint64_t n, std::string_view what) const {
    if (n > left())
      return status::invalid(source_ + ": truncated GGUF: " + std::string(what) + " at byte " + std::to_string(pos_) +
                             " needs " + std::to_string(n) + " bytes, the file has " + std::to_string(left()) + " left");
    return {};
  }
  // The next n bytes (need() first).
  const uint8_t* take(uint64_t n) {
    const uint8_t* p = base_ + pos_;
    pos_ += n;
    return p;
  }
  template <class T>
  result<T> pod(std::string_view what) {
    TESSERA_RETURN_IF_ERROR(need(sizeof(T), what));
    T v;
    std::memcpy(&v, base_ + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  result<std::string> str(std::string_view what) {
    auto n = pod<uint64_t>(what);
    if (!n) return n.error();
    if (*n > max_string) return status::invalid(source_ + ": " + std::string(what) + " claims " + std::to_string(*n) + " bytes");
    TESSERA_RETURN_IF_ERROR(need(*n, what));
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<size_t>(*n));
    pos_ += *n;
    return s;
  }

 private:
  const uint8_t* base_;
  uint64_t size_, pos_ = 0;
  const std::string& source_;
};

// Bytes of one scalar of a metadata type; 0 for string and array.
uint64_t scalar_size(uint32_t t) {
  switch (t) {
    case 0: case 1: case 7: return 1;
    case 2: case 3: return 2;
    case 4: case 5: case 6: return 4;
    case 10: case 11: case 12: return 8;
    default: return 0;
  }
}

// One scalar of numeric type t as an exact integer (ints) or a double (floats).
struct number {
  bool integer = true;
  int64_t i = 0;
  double f = 0;
  bool too_big = false;  // a u64 above INT64_MAX
};

number read_number(const uint8_t* p, uint32_t t) {
  number n;
  auto get = [p]<class T>(T) { T v; std::memcpy(&v, p, sizeof v); return v; };
  switch (t) {
    case 0: n.i = get(uint8_t{}); break;
    case 1: n.i = get(int8_t{}); break;
    case 2: n.i = get(uint16_t{}); break;
    case 3: n.i = get(int16_t{}); break;
    case 4: n.i = get(uint32_t{}); break;
    case 5: n.i = get(int32_t{}); break;
    case 7: n.i = get(uint8_t{}) != 0; break;
    case 10: {
      const uint64_t u = get(uint64_t{});
      n.too_big = u > static_cast<uint64_t>(INT64_MAX);
      n.i = static_cast<int64_t>(u & static_cast<uint64_t>(INT64_MAX));
      break;
    }
    case 11: n.i = get(int64_t{}); break;
    case 6: n.integer = false; n.f = get(float{}); break;
    case 12: n.integer = false; n.f = get(double{}); break;
    default: break;
  }
  return n;
}

std::string type_word(uint32_t t) {
  static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  return t < 13 ? names[t] : "type " + std::to_string(t);
}

status read_value(cursor& c, uint32_t type, gguf_value& v, const std::string& key, const std::string& source) {
  v.type = static_cast<gguf_type>(type);
  if (type == 8) {
    auto s = c.str("the string value of \"" + key + "\"");
    if (!s) return s.error();
    v.s = std::move(*s);
    return {};
  }
  if (type == 9) {
    auto et = c.pod<uint32_t>("the element type of array \"" + key + "\"");
    if (!et) return et.error();
    auto n = c.pod<uint64_t>("the length of array \"" + key + "\"");
    if (!n) return n.error();
    v.elem_type = static_cast<gguf_type>(*et);
    if (*et == 9) return status::invalid(source + ": metadata \"" + key + "\" is an array of arrays (not supported)");
    const uint64_t each = *et == 8 ? 8 : scalar_size(*et);
    if (each == 0)
      return status::invalid(source + ": metadata array \"" + key + "\" has unknown element type " + std::to_string(*et));
    // Every element takes at least `each` bytes: a length the rest of the file cannot hold is a
    // lie, refused before anything is reserved.
    if (*n > c.left() / each)
      return status::invalid(source + ": metadata array \"" + key + "\" claims " + std::to_string(*n) + " elements of " +
                             type_word(*et) + " but only " + std::to_string(c.left()) + " bytes are left in the file");
    if (*et == 8) {
      v.strings.reserve(static_cast<size_t>(*n));
      for (uint64_t i = 0; i < *n; ++i) {
        auto s = c.str("element " + std::to_string(i) + " of array \"" + key + "\"");
        if (!s) return s.error();
        v.strings.push_back(std::move(*s));
      }
    } else {
      v.numbers.resize(static_cast<size_t>(*n));
      const uint8_t* p = c.take(*n * each);  // fits: checked above
      for (uint64_t i = 0; i < *n; ++i) {
        const number x = read_number(p + i * each, *et);
        v.numbers[static_cast<size_t>(i)] = x.integer ? static_cast<double>(x.i) : x.f;
      }
    }
    return {};
  }
  const uint64_t sz = scalar_size(type);
  if (sz == 0) return status::invalid(source + ": metadata \"" + key + "\" has unknown value type " + std::to_string(type));
  TESSERA_RETURN_IF_ERROR(c.need(sz, "the value of \"" + key + "\""));
  const number x = read_number(c.take(sz), type);
  if (x.too_big) return status::invalid(source + ": metadata \"" + key + "\" is a u64 above 2^63");
  v.i = x.i;
  v.f = x.integer ? static_cast<double>(x.i) : x.f;
  return {};
}

// Bytes of `elements` values of a supported or known-size ggml type; nullopt when the type is
// unknown or ne[0] does not fill whole blocks.
std::optional<uint64_t> tensor_bytes(uint32_t type, uint64_t ne0, uint64_t elements) {
  switch (type) {
    case ggml_f32: return elements * 4;
    case ggml_f16: case ggml_bf16: return elements * 2;
    case ggml_q8_0:
      if (ne0 % q8_0_block) return std::nullopt;
      return elements / q8_0_block * q8_0_bytes;
    default: return std::nullopt;
  }
}

std::string supported_types() { return "supported F32, F16, BF16, Q8_0"; }

}  // namespace

bool gguf_value::is_integer() const {
  switch (type) {
    case gguf_type::u8: case gguf_type::i8: case gguf_type::u16: case gguf_type::i16: case gguf_type::u32:
    case gguf_type::i32: case gguf_type::u64: case gguf_type::i64: return true;
    default: return false;
  }
}

uint64_t gguf_tensor_info::elements() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;  // checked against overflow when parsed
  return n;
}

const gguf_value* gguf_file::find(std::string_view key) const {
  auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const gguf_tensor_info* gguf_file::tensor(std::string_view name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::string ggml_type_name(uint32_t type) {
  return type < std::size(type_names) ? type_names[type] : "type " + std::to_string(type);
}

result<gguf_file> parse_gguf(const void* data, uint64_t size, std::string source) {
  gguf_file g;
  g.source = std::move(source);
  g.base = static_cast<const uint8_t*>(data);
  g.size = size;
  const std::string& src = g.source;
  cursor c(g.base, size, src);
  TESSERA_RETURN_IF_ERROR(c.need(4, "the magic"));
  if (std::memcmp(g.base, "GGUF", 4) != 0) return status::invalid(src + ": not a GGUF file (the first 4 bytes are not \"GGUF\")");
  c.take(4);
  auto version = c.pod<uint32_t>("the version");
  if (!version) return version.error();
  if (*version == 1) return status::invalid(src + ": GGUF version 1 is not supported (versions 2 and 3 are)");
  if (*version != 2 && *version != 3) {
    if ((*version & 0xffffu) == 0 && (*version >> 16) != 0)
      return status::invalid(src + ": a big-endian GGUF file (not supported: little-endian only)");
    return status::invalid(src + ": GGUF version " + std::to_string(*version) + " is not supported (2 and 3 are)");
  }
  g.version = *version;
  auto n_tensors = c.pod<uint64_t>("the tensor count");
  if (!n_tensors) return n_tensors.error();
  auto n_kv = c.pod<uint64_t>("the metadata count");
  if (!n_kv) return n_kv.error();
  // A key-value pair takes at least 12 bytes (key length + type), a tensor info at least 28.
  if (*n_kv > c.left() / 12)
    return status::invalid(src + ": the header claims " + std::to_string(*n_kv) + " metadata entries, more than the file can hold");
  if (*n_tensors > c.left() / 28)
    return status::invalid(src + ": the header claims " + std::to_string(*n_tensors) + " tensors, more than the file can hold");
  for (uint64_t k = 0; k < *n_kv; ++k) {
    auto key = c.str("metadata key " + std::to_string(k));
    if (!key) return key.error();
    auto type = c.pod<uint32_t>("the type of \"" + *key + "\"");
    if (!type) return type.error();
    gguf_value v;
    TESSERA_RETURN_IF_ERROR(read_value(c, *type, v, *key, src));
    if (!g.metadata.emplace(*key, std::move(v)).second)
      return status::invalid(src + ": metadata key \"" + *key + "\" appears twice");
  }
  if (const gguf_value* a = g.find("general.alignment")) {
    if (a->type != gguf_type::u32)
      return status::invalid(src + ": general.alignment must be a u32, not " + type_word(static_cast<uint32_t>(a->type)));
    if (a->i == 0 || (a->i & (a->i - 1)) != 0)
      return status::invalid(src + ": general.alignment " + std::to_string(a->i) + " is not a power of two");
    g.alignment = static_cast<uint64_t>(a->i);
  }
  std::set<std::string, std::less<>> names;
  for (uint64_t t = 0; t < *n_tensors; ++t) {
    gguf_tensor_info ti;
    auto name = c.str("the name of tensor " + std::to_string(t));
    if (!name) return name.error();
    ti.name = std::move(*name);
    if (!names.insert(ti.name).second) return status::invalid(src + ": tensor \"" + ti.name + "\" appears twice");
    auto nd = c.pod<uint32_t>("the dimension count of \"" + ti.name + "\"");
    if (!nd) return nd.error();
    if (*nd == 0 || *nd > max_dims)
      return status::invalid(src + ": tensor \"" + ti.name + "\" has " + std::to_string(*nd) + " dimensions (1 to 4 allowed)");
    uint64_t elements = 1;
    for (uint32_t d = 0; d < *nd; ++d) {
      auto e = c.pod<uint64_t>("a dimension of \"" + ti.name + "\"");
      if (!e) return e.error();
      if (*e == 0 || __builtin_mul_overflow(elements, *e, &elements) || elements > (uint64_t{1} << 62))
        return status::invalid(src + ": tensor \"" + ti.name + "\" has an empty or impossibly large shape");
      ti.ne.push_back(*e);
    }
    auto type = c.pod<uint32_t>("the type of \"" + ti.name + "\"");
    if (!type) return type.error();
    ti.type = *type;
    auto off = c.pod<uint64_t>("the offset of \"" + ti.name + "\"");
    if (!off) return off.error();
    ti.offset = *off;
    if (ti.offset % g.alignment)
      return status::invalid(src + ": tensor \"" + ti.name + "\" starts at offset " + std::to_string(ti.offset) +
                             ", not a multiple of the alignment " + std::to_string(g.alignment));
    const auto bytes = tensor_bytes(ti.type, ti.ne[0], elements);
    ti.bytes = bytes ? *bytes : 0;  // unknown types are refused when read, named
    if (ti.type == ggml_q8_0 && !bytes)
      return status::invalid(src + ": Q8_0 tensor \"" + ti.name + "\" has a first dimension " + std::to_string(ti.ne[0]) +
                             ", not a multiple of 32");
    g.tensors.push_back(std::move(ti));
  }
  // The data section starts at the next multiple of the alignment.
  const uint64_t pad = (g.alignment - c.pos() % g.alignment) % g.alignment;
  if (pad > c.left()) {
    if (!g.tensors.empty()) return status::invalid(src + ": truncated GGUF: the file ends before its data section");
    g.data_offset = size;
    return g;
  }
  g.data_offset = c.pos() + pad;
  const uint64_t data_size = size - g.data_offset;
  for (const auto& t : g.tensors) {
    if (t.offset > data_size || t.bytes > data_size - t.offset)
      return status::invalid(src + ": tensor \"" + t.name + "\" (" + std::to_string(t.bytes) + " bytes at data offset " +
                             std::to_string(t.offset) + ") lies beyond the end of the file (" + std::to_string(data_size) +
                             " bytes of data)");
  }
  return g;
}

result<gguf_file> map_gguf(const std::string& path) {
  auto mapped = detail::map_file(path, 1, "empty file, not GGUF");
  if (!mapped) return mapped.error();
  auto map = *mapped;
  auto g = parse_gguf(map->addr, map->size, path);
  if (!g) return g.error();
  g->storage = map;
  return g;
}

result<std::vector<float>> gguf_tensor_f32(const gguf_file& file, const gguf_tensor_info& t) {
  if (t.type != ggml_f32 && t.type != ggml_f16 && t.type != ggml_bf16 && t.type != ggml_q8_0)
    return status::unsupported(file.source + ": tensor \"" + t.name + "\": " + ggml_type_name(t.type) +
                                 " not supported: " + supported_types());
  const uint64_t n = t.elements();
  std::vector<float> out(static_cast<size_t>(n));
  const uint8_t* p = file.base + file.data_offset + t.offset;  // in the file: checked by parse_gguf
  switch (t.type) {
    case ggml_f32: std::memcpy(out.data(), p, n * 4); break;
    case ggml_f16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = half_to_float(h);
      }
      break;
    case ggml_bf16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        const uint32_t bits = uint32_t{h} << 16;
        std::memcpy(&out[i], &bits, 4);
      }
      break;
    case ggml_q8_0:
      for (uint64_t b = 0; b < n / q8_0_block; ++b) {
        const uint8_t* blk = p + b * q8_0_bytes;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float d = half_to_float(h);
        for (uint64_t j = 0; j < q8_0_block; ++j)
          out[b * q8_0_block + j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
      }
      break;
  }
  return out;
}

bool looks_like_gguf(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0) return true;
  std::ifstream f(path, std::ios::binary);
  char m[4] = {};
  return f.read(m, 4) && std::memcmp(m, "GGUF", 4) == 0;
}

namespace {

// The architecture row whose GGUF name is this (mistral files say "llama": the first row wins).
const architecture_traits* traits_of_gguf(std::string_view name) {
  for (architecture a : {architecture::gpt2, architecture::llama, architecture::qwen2, architecture::mistral})
    if (traits_of(a).gguf_arch == name) return &traits_of(a);
  return nullptr;
}

std::string gguf_archs() {
  std::string out;
  for (architecture a : {architecture::gpt2, architecture::llama, architecture::qwen2})
    out += (out.empty() ? "" : ", ") + std::string(traits_of(a).gguf_arch);
  return out;
}

// Reads typed metadata, errors naming the key.
struct keys {
  const gguf_file& g;
  result<int64_t> integer(const std::string& k) const {
    const gguf_value* v = g.find(k);
    if (!v) return status::invalid(g.source + ": missing metadata \"" + k + "\"");
    if (!v->is_integer()) return status::invalid(g.source + ": metadata \"" + k + "\" must be an integer");
    if (v->i < 0 || v->i > INT32_MAX) return status::invalid(g.source + ": metadata \"" + k + "\" = " + std::to_string(v->i) + " is out of range");
    return v->i;
  }
  result<int64_t> integer_or(const std::string& k, int64_t dflt) const {
    return g.find(k) ? integer(k) : result<int64_t>(dflt);
  }
  result<double> real_or(const std::string& k, std::optional<double> dflt) const {
    const gguf_value* v = g.find(k);
    if (!v) {
      if (dflt) return *dflt;
      return status::invalid(g.source + ": missing metadata \"" + k + "\"");
    }
    if (!v->is_float() && !v->is_integer()) return status::invalid(g.source + ": metadata \"" + k + "\" must be a number");
    return v->f;
  }
  result<std::string> text(const std::string& k) const {
    const gguf_value* v = g.find(k);
    if (!v) return status::invalid(g.source + ": missing metadata \"" + k + "\"");
    if (v->type != gguf_type::string) return status::invalid(g.source + ": metadata \"" + k + "\" must be a string");
    return v->s;
  }
};

#define TESSERA_ASSIGN(lhs, expr)       \
  do {                                  \
    auto r_ = (expr);                   \
    if (!r_) return r_.error();         \
    lhs = std::move(*r_);               \
  } while (0)

}  // namespace

result<model_shape> gguf_decoder_shape(const gguf_file& g) {
  const keys k{g};
  std::string arch;
  TESSERA_ASSIGN(arch, k.text("general.architecture"));
  const architecture_traits* t = traits_of_gguf(arch);
  if (!t) return status::unsupported(g.source + ": general.architecture \"" + arch + "\" is not supported (" + gguf_archs() + ")");
  const gguf_tensor_info* embd = g.tensor("token_embd.weight");
  if (!embd || embd->ne.size() != 2) return status::invalid(g.source + ": needs a 2-d tensor \"token_embd.weight\"");
  if (embd->ne[1] > INT32_MAX) return status::invalid(g.source + ": token_embd.weight has too many rows");
  const std::string a = arch + ".";
  nlohmann::json j;
  j["model_type"] = std::string(t->model_type);
  int64_t hidden = 0, layers = 0, heads = 0, ffn = 0, ctx = 0;
  TESSERA_ASSIGN(hidden, k.integer(a + "embedding_length"));
  TESSERA_ASSIGN(layers, k.integer(a + "block_count"));
  TESSERA_ASSIGN(heads, k.integer(a + "attention.head_count"));
  TESSERA_ASSIGN(ffn, k.integer(a + "feed_forward_length"));
  TESSERA_ASSIGN(ctx, k.integer(a + "context_length"));
  if (t->conv1d_weights) {
    double eps = 0;
    TESSERA_ASSIGN(eps, k.real_or(a + "attention.layer_norm_epsilon", std::nullopt));
    j["n_embd"] = hidden;
    j["n_layer"] = layers;
    j["n_head"] = heads;
    j["n_inner"] = ffn;
    j["n_positions"] = ctx;
    j["layer_norm_epsilon"] = static_cast<float>(eps);
    j["activation_function"] = "gelu_new";  // llama.cpp's gpt2 graph runs the tanh GELU
  } else {
    int64_t kv_heads = 0, key_len = 0, value_len = 0, rope_dims = 0;
    TESSERA_ASSIGN(kv_heads, k.integer_or(a + "attention.head_count_kv", heads));
    const int64_t plain_dim = heads > 0 ? hidden / heads : 0;
    TESSERA_ASSIGN(key_len, k.integer_or(a + "attention.key_length", plain_dim));
    TESSERA_ASSIGN(value_len, k.integer_or(a + "attention.value_length", key_len));
    TESSERA_ASSIGN(rope_dims, k.integer_or(a + "rope.dimension_count", key_len));
    if (value_len != key_len)
      return status::unsupported(g.source + ": attention.value_length " + std::to_string(value_len) + " differs from key_length " +
                                 std::to_string(key_len) + " (not supported)");
    if (rope_dims != key_len)
      return status::unsupported(g.source + ": rope.dimension_count " + std::to_string(rope_dims) + " is not the head size " +
                                 std::to_string(key_len) + " (partial rotary embeddings are not supported)");
    double eps = 0, theta = 0;
    TESSERA_ASSIGN(eps, k.real_or(a + "attention.layer_norm_rms_epsilon", std::nullopt));
    TESSERA_ASSIGN(theta, k.real_or(a + "rope.freq_base", 10000.0));
    j["hidden_size"] = hidden;
    j["num_hidden_layers"] = layers;
    j["num_attention_heads"] = heads;
    j["num_key_value_heads"] = kv_heads;
    j["head_dim"] = key_len;
    j["intermediate_size"] = ffn;
    j["max_position_embeddings"] = ctx;
    j["rms_norm_eps"] = static_cast<float>(eps);
    j["rope_theta"] = static_cast<float>(theta);
    j["hidden_act"] = "silu";
    if (g.find(a + "rope.scaling.type")) {
      std::string type;
      TESSERA_ASSIGN(type, k.text(a + "rope.scaling.type"));
      if (type == "linear") {
        double factor = 0;
        TESSERA_ASSIGN(factor, k.real_or(a + "rope.scaling.factor", std::nullopt));
        j["rope_scaling"] = {{"type", "linear"}, {"factor", static_cast<float>(factor)}};
      } else if (type != "none") {
        return status::unsupported(g.source + ": rope.scaling.type \"" + type + "\" is not supported (none, linear)");
      }
    }
    if (g.find(a + "attention.sliding_window")) {
      int64_t w = 0;
      TESSERA_ASSIGN(w, k.integer(a + "attention.sliding_window"));
      if (!t->sliding_window && w > 0)
        return status::unsupported(g.source + ": attention.sliding_window is not supported for " + arch);
      if (t->sliding_window) j["sliding_window"] = w;
    }
  }
  j["vocab_size"] = static_cast<int64_t>(embd->ne[1]);
  j["tie_word_embeddings"] = g.tensor("output.weight") == nullptr;
  for (const char* id : {"bos", "eos"}) {
    const std::string key = std::string("tokenizer.ggml.") + id + "_token_id";
    if (!g.find(key)) continue;
    int64_t v = 0;
    TESSERA_ASSIGN(v, k.integer(key));
    if (v < static_cast<int64_t>(embd->ne[1])) j[std::string(id) + "_token_id"] = v;
  }
  auto s = parse_decoder_config_json(j.dump());
  if (!s) return s.error().with_context(g.source);
  if (const gguf_value* n = g.find("general.name"); n && n->type == gguf_type::string) s->name = n->s;
  else s->name = g.source;
  return s;
}

result<decoder_model> gguf_decoder(const gguf_file& g, dtype dt) {
  const bool keep_q8 = dt == dtype::q8_0;
  auto shape = gguf_decoder_shape(g);
  if (!shape) return shape.error();
  const model_shape& c = *shape;
  const auto& t = c.traits();
  const int64_t h = c.hidden_size, f = c.intermediate_size, q = c.q_width(), kv = c.kv_width(), V = c.vocab_size;
  auto store = std::make_shared<std::vector<std::vector<float>>>();
  std::map<std::string, tensor_view> tensors;
  std::set<std::string, std::less<>> used;
  // A GGUF tensor of `rows` x `cols` (cols == 0: a vector of rows), as fp32 row-major.
  auto get = [&](const std::string& name, int64_t rows, int64_t cols) -> result<std::vector<float>> {
    const gguf_tensor_info* ti = g.tensor(name);
    if (!ti) return status::invalid(g.source + ": missing tensor \"" + name + "\"");
    const std::vector<uint64_t> want = cols ? std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)} : std::vector<uint64_t>{uint64_t(rows)};
    if (ti->ne != want) {
      std::string got, exp;
      for (uint64_t d : ti->ne) got += (got.empty() ? "" : ", ") + std::to_string(d);
      for (uint64_t d : want) exp += (exp.empty() ? "" : ", ") + std::to_string(d);
      return status::invalid(g.source + ": tensor \"" + name + "\" has ne [" + got + "], expected [" + exp + "] from the metadata");
    }
    used.insert(name);
    return gguf_tensor_f32(g, *ti);
  };
  auto put = [&](const std::string& hf, std::vector<float> v, std::vector<int64_t> shp) {
    store->push_back(std::move(v));
    tensors[hf] = tensor_view{std::move(shp), store->back().data()};
  };
  // q8_0: a Linear matrix [rows, cols] the file holds as Q8_0 keeps its blocks under `hf` (its HF
  // tensor without data); `heads` > 0 reorders the rows as `unpermuted` does. False otherwise (the
  // caller dequantises). Checks the dims as `get` does.
  std::map<std::string, q8_0_weight> blocks;
  auto keep = [&](const std::string& name, int64_t rows, int64_t cols, const std::string& hf, std::vector<int64_t> shp,
                  int64_t heads, int64_t d) -> bool {
    const gguf_tensor_info* ti = g.tensor(name);
    if (!keep_q8 || !ti || ti->type != ggml_q8_0) return false;
    if (ti->ne != std::vector<uint64_t>{uint64_t(cols), uint64_t(rows)}) return false;  // `get` names the error
    used.insert(name);
    const uint8_t* base = g.base + g.data_offset + ti->offset;  // in the file: checked by parse_gguf
    const uint64_t row_bytes = uint64_t(cols) / q8_0_block * q8_0_bytes;
    std::vector<const uint8_t*> at(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) at[static_cast<size_t>(r)] = base + uint64_t(r) * row_bytes;
    if (heads > 0)  // HF row hd*d + s*d/2 + i is GGUF row hd*d + 2i + s
      for (int64_t hd = 0; hd < heads; ++hd)
        for (int64_t i = 0; i < d / 2; ++i)
          for (int64_t s = 0; s < 2; ++s)
            at[static_cast<size_t>(hd * d + s * (d / 2) + i)] = base + uint64_t(hd * d + 2 * i + s) * row_bytes;
    blocks[hf] = q8_0_weight::from_blocks(at, cols);
    tensors[hf] = tensor_view{std::move(shp), nullptr};
    return true;
  };
  bool kept = false;
#define TESSERA_KEEP(...) kept = keep(__VA_ARGS__)
  // Row-major [rows, cols] -> [cols, rows].
  auto transposed = [](const std::vector<float>& src, int64_t rows, int64_t cols) {
    std::vector<float> d(src.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t cc = 0; cc < cols; ++cc) d[static_cast<size_t>(cc * rows + r)] = src[static_cast<size_t>(r * cols + cc)];
    return d;
  };
  // llama.cpp's adjacent rotary pairs back to HF's rotate_half order: HF row hd*d + s*d/2 + i is
  // GGUF row hd*d + 2i + s (the inverse of the exporter's and convert_hf_to_gguf's permute).
  auto unpermuted = [](const std::vector<float>& src, int64_t heads, int64_t d, int64_t in) {
    std::vector<float> out(src.size());
    for (int64_t hd = 0; hd < heads; ++hd)
      for (int64_t i = 0; i < d / 2; ++i)
        for (int64_t s = 0; s < 2; ++s)
          std::copy_n(src.data() + (hd * d + 2 * i + s) * in, in, out.data() + (hd * d + s * (d / 2) + i) * in);
    return out;
  };
  std::vector<float> v;
  if (t.conv1d_weights) {
    TESSERA_ASSIGN(v, get("token_embd.weight", V, h));
    put("wte.weight", std::move(v), {V, h});
    TESSERA_ASSIGN(v, get("position_embd.weight", c.max_position_embeddings, h));
    put("wpe.weight", std::move(v), {c.max_position_embeddings, h});
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".", p = "h." + std::to_string(l) + ".";
      TESSERA_ASSIGN(v, get(b + "attn_norm.weight", h, 0)); put(p + "ln_1.weight", std::move(v), {h});
      TESSERA_ASSIGN(v, get(b + "attn_norm.bias", h, 0)); put(p + "ln_1.bias", std::move(v), {h});
      TESSERA_KEEP(b + "attn_qkv.weight", q + 2 * kv, h, p + "attn.c_attn.weight", {h, q + 2 * kv}, 0, 0);
      if (!kept) {
        TESSERA_ASSIGN(v, get(b + "attn_qkv.weight", q + 2 * kv, h));
        put(p + "attn.c_attn.weight", transposed(v, q + 2 * kv, h), {h, q + 2 * kv});
      }
      TESSERA_ASSIGN(v, get(b + "attn_qkv.bias", q + 2 * kv, 0)); put(p + "attn.c_attn.bias", std::move(v), {q + 2 * kv});
      TESSERA_KEEP(b + "attn_output.weight", h, q, p + "attn.c_proj.weight", {q, h}, 0, 0);
      if (!kept) { TESSERA_ASSIGN(v, get(b + "attn_output.weight", h, q)); put(p + "attn.c_proj.weight", transposed(v, h, q), {q, h}); }
      TESSERA_ASSIGN(v, get(b + "attn_output.bias", h, 0)); put(p + "attn.c_proj.bias", std::move(v), {h});
      TESSERA_ASSIGN(v, get(b + "ffn_norm.weight", h, 0)); put(p + "ln_2.weight", std::move(v), {h});
      TESSERA_ASSIGN(v, get(b + "ffn_norm.bias", h, 0)); put(p + "ln_2.bias", std::move(v), {h});
      TESSERA_KEEP(b + "ffn_up.weight", f, h, p + "mlp.c_fc.weight", {h, f}, 0, 0);
      if (!kept) { TESSERA_ASSIGN(v, get(b + "ffn_up.weight", f, h)); put(p + "mlp.c_fc.weight", transposed(v, f, h), {h, f}); }
      TESSERA_ASSIGN(v, get(b + "ffn_up.bias", f, 0)); put(p + "mlp.c_fc.bias", std::move(v), {f});
      TESSERA_KEEP(b + "ffn_down.weight", h, f, p + "mlp.c_proj.weight", {f, h}, 0, 0);
      if (!kept) { TESSERA_ASSIGN(v, get(b + "ffn_down.weight", h, f)); put(p + "mlp.c_proj.weight", transposed(v, h, f), {f, h}); }
      TESSERA_ASSIGN(v, get(b + "ffn_down.bias", h, 0)); put(p + "mlp.c_proj.bias", std::move(v), {h});
    }
    TESSERA_ASSIGN(v, get("output_norm.weight", h, 0)); put("ln_f.weight", std::move(v), {h});
    TESSERA_ASSIGN(v, get("output_norm.bias", h, 0)); put("ln_f.bias", std::move(v), {h});
  } else {
    // convert_hf_to_gguf permutes Q and K for LLaMA and Mistral, not for Qwen2 (NeoX rotary there).
    const bool permuted = c.arch != architecture::qwen2;
    const int64_t d = c.head_dim();
    TESSERA_ASSIGN(v, get("token_embd.weight", V, h));
    put("model.embed_tokens.weight", std::move(v), {V, h});
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string b = "blk." + std::to_string(l) + ".", p = "model.layers." + std::to_string(l) + ".";
      TESSERA_ASSIGN(v, get(b + "attn_norm.weight", h, 0)); put(p + "input_layernorm.weight", std::move(v), {h});
      TESSERA_KEEP(b + "attn_q.weight", q, h, p + "self_attn.q_proj.weight", {q, h}, permuted ? c.num_heads : 0, d);
      if (!kept) {
        TESSERA_ASSIGN(v, get(b + "attn_q.weight", q, h));
        put(p + "self_attn.q_proj.weight", permuted ? unpermuted(v, c.num_heads, d, h) : std::move(v), {q, h});
      }
      TESSERA_KEEP(b + "attn_k.weight", kv, h, p + "self_attn.k_proj.weight", {kv, h}, permuted ? c.num_kv_heads : 0, d);
      if (!kept) {
        TESSERA_ASSIGN(v, get(b + "attn_k.weight", kv, h));
        put(p + "self_attn.k_proj.weight", permuted ? unpermuted(v, c.num_kv_heads, d, h) : std::move(v), {kv, h});
      }
      TESSERA_KEEP(b + "attn_v.weight", kv, h, p + "self_attn.v_proj.weight", {kv, h}, 0, 0);
      if (!kept) { TESSERA_ASSIGN(v, get(b + "attn_v.weight", kv, h)); put(p + "self_attn.v_proj.weight", std::move(v), {kv, h}); }
      if (t.qkv_bias) {
        TESSERA_ASSIGN(v, get(b + "attn_q.bias", q, 0)); put(p + "self_attn.q_proj.bias", std::move(v), {q});
        TESSERA_ASSIGN(v, get(b + "attn_k.bias", kv, 0)); put(p + "self_attn.k_proj.bias", std::move(v), {kv});
        TESSERA_ASSIGN(v, get(b + "attn_v.bias", kv, 0)); put(p + "self_attn.v_proj.bias", std::move(v), {kv});
      }
      TESSERA_KEEP(b + "attn_output.weight", h, q, p + "self_attn.o_proj.weight", {h, q}, 0, 0);
      if (!kept) { TESSERA_ASSIGN(v, get(b + "attn_output.weight", h, q)); put(p + "self_attn.o_proj.weight", std::move(v), {h, q}); }
      TESSERA_ASSIGN(v, get(b + "ffn_norm.weight", h, 0)); put(p + "post_attention_layernorm.weight", std::move(v), {h});
      TESSERA_KEEP(b + "ffn_gate.weight", f, h, p + "mlp.gate_proj.weight", {f, h}, 0, 0);
      if (!kept) { TESSERA_ASSIGN(v, get(b + "ffn_gate.weight", f, h)); put(p + "mlp.gate_proj.weight", std::move(v), {f, h}); }
      TESSERA_KEEP(b + "ffn_up.weight", f, h, p + "mlp.up_proj.weight", {f, h}, 0, 0);
      if (!kept) { TESSERA_ASSIGN(v, get(b + "ffn_up.weight", f, h)); put(p + "mlp.up_proj.weight", std::move(v), {f, h}); }
      TESSERA_KEEP(b + "ffn_down.weight", h, f, p + "mlp.down_proj.weight", {h, f}, 0, 0);
      if (!kept) { TESSERA_ASSIGN(v, get(b + "ffn_down.weight", h, f)); put(p + "mlp.down_proj.weight", std::move(v), {h, f}); }
    }
    TESSERA_ASSIGN(v, get("output_norm.weight", h, 0)); put("model.norm.weight", std::move(v), {h});
  }
  if (!c.tie_word_embeddings) {
    TESSERA_KEEP("output.weight", V, h, "lm_head.weight", {V, h}, 0, 0);
    if (!kept) {
      TESSERA_ASSIGN(v, get("output.weight", V, h));
      put("lm_head.weight", std::move(v), {V, h});
    }
  } else if (keep_q8) {
    // The tied head runs on token_embd's own blocks (the lookups read its dequantised copy).
    const std::string embd = t.conv1d_weights ? "wte.weight" : "model.embed_tokens.weight";
    const tensor_view dequantised = tensors.at(embd);
    TESSERA_KEEP("token_embd.weight", V, h, embd, {V, h}, 0, 0);
    tensors[embd] = dequantised;
  }
#undef TESSERA_KEEP
  // A tensor the model would not use (llama 3's rope_freqs, a bias this architecture lacks) changes
  // what the file computes: refused by name rather than ignored.
  for (const auto& ti : g.tensors)
    if (!used.count(ti.name))
      return status::unsupported(g.source + ": tensor \"" + ti.name + "\" is not part of a " + std::string(t.model_type) +
                                 " decoder as tessera runs it (not supported)");
  auto m = decoder_model::bind(c, std::move(tensors), std::shared_ptr<const void>(store, store.get()), g.source);
  if (!m) return m.error();
  m->source = g.source;
  if (keep_q8) TESSERA_RETURN_IF_ERROR(m->adopt_q8_0(std::move(blocks)));
  return m;
}

result<decoder_model> load_gguf_decoder(const std::string& path, dtype d) {
  auto g = map_gguf(path);
  if (!g) return g.error();
  return gguf_decoder(*g, d);
}

}  // namespace tessera::models
