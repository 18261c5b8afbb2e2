// GGUF as a model source (models/gguf_reader.hpp): tessera's exporter -> reader round trips
// (F32 bit for bit; F16 and Q8_0 re-encoded by this test's own writer, weights equal to the
// test's dequantisation and logits within a stated bound), a file written here byte by byte from
// the spec's layout, and hostile files (truncated at every byte, lying counts, offsets and
// lengths, bad alignment, refused types, random mutations): a clean error, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <immintrin.h>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>

#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/gguf.hpp"
#include "tessera/models/gguf_reader.hpp"
#include "tessera/models/kernels_q8.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {

using testing::data_dir;
using testing::make_temp_dir;
using testing::read_file;

decoder_model seeded(const std::string& file, uint64_t seed, const nlohmann::json& overrides = {}) {
  auto j = nlohmann::json::parse(read_file(data_dir() + "/decoders/" + file));
  for (auto it = overrides.begin(); it != overrides.end(); ++it) j[it.key()] = it.value();
  auto s = parse_decoder_config_json(j.dump());
  EXPECT_TRUE(s) << s.error().to_string();
  s->name = file;
  auto m = make_seeded_decoder(*s, seed);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::move(*m);
}

std::string exported(const decoder_model& m, const std::string& tok, const std::string& name) {
  const std::string path = make_temp_dir("gguf_reader") + "/" + name + ".gguf";
  auto t = bpe_tokenizer::load(tok);
  EXPECT_TRUE(t) << t.error().to_string();
  const status st = write_gguf(m, *t, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

const std::vector<int32_t> prompt = {1, 17, 42, 99, 5, 250, 3, 77};

// Every HF tensor of `a` and `b` equal bit for bit.
void expect_same_weights(const decoder_model& a, const decoder_model& b) {
  for (const auto& spec : expected_decoder_tensors(a.shape())) {
    const tensor_view *x = a.find(spec.name), *y = b.find(spec.name);
    ASSERT_TRUE(x && y) << spec.name;
    ASSERT_EQ(x->shape, y->shape) << spec.name;
    EXPECT_EQ(std::memcmp(x->data, y->data, static_cast<size_t>(x->numel()) * 4), 0) << spec.name;
  }
}

// --- a GGUF writer of this test's own, from the spec's byte layout --------------------------------
struct writer {
  std::string kv;
  uint64_t n_kv = 0;
  uint32_t version = 3;
  uint64_t align = 32;
  struct tensor {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string data;
  };
  std::vector<tensor> tensors;

  template <class T>
  static void pod(std::string& s, T v) { s.append(reinterpret_cast<const char*>(&v), sizeof v); }
  static void str(std::string& s, const std::string& v) { pod<uint64_t>(s, v.size()); s += v; }
  void key(const std::string& k, uint32_t type) { str(kv, k); pod(kv, type); ++n_kv; }
  void u32(const std::string& k, uint32_t v) { key(k, 4); pod(kv, v); }
  void f32(const std::string& k, float v) { key(k, 6); pod(kv, v); }
  void text(const std::string& k, const std::string& v) { key(k, 8); str(kv, v); }
  void strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9); pod<uint32_t>(kv, 8); pod<uint64_t>(kv, v.size());
    for (const auto& s : v) str(kv, s);
  }
  template <class T>
  void array(const std::string& k, uint32_t elem, const std::vector<T>& v) {
    key(k, 9); pod(kv, elem); pod<uint64_t>(kv, v.size());
    kv.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void add(std::string name, std::vector<uint64_t> ne, uint32_t type, std::string data) {
    tensors.push_back({std::move(name), std::move(ne), type, std::move(data)});
  }
  std::string bytes() const {
    std::string out = "GGUF";
    pod(out, version);
    pod<uint64_t>(out, tensors.size());
    pod<uint64_t>(out, n_kv);
    out += kv;
    uint64_t off = 0;
    for (const auto& t : tensors) {
      str(out, t.name);
      pod<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) pod(out, d);
      pod(out, t.type);
      pod(out, off);
      off += (t.data.size() + align - 1) / align * align;
    }
    out.resize((out.size() + align - 1) / align * align, '\0');
    for (const auto& t : tensors) {
      out += t.data;
      out.resize((out.size() + align - 1) / align * align, '\0');
    }
    return out;
  }
  void save(const std::string& path) const {
    std::ofstream f(path, std::ios::binary);
    const std::string b = bytes();
    f.write(b.data(), static_cast<std::streamsize>(b.size()));
  }
};

// IEEE binary16 by round to nearest even, in double: the test's own conversion (normal range only,
// which the seeded weights are in).
uint16_t to_half(float x) {
  if (x == 0) return std::signbit(x) ? 0x8000 : 0;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(x));
  int e = 0;
  const double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 15;
  if (exp <= 0) {  // subnormal: units of 2^-24
    const double q = std::nearbyint(a * std::ldexp(1.0, 24));
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(q));
  }
  double mant = std::nearbyint((m * 2 - 1) * 1024);  // round half to even (default rounding mode)
  if (mant == 1024) { mant = 0; ++exp; }
  EXPECT_LT(exp, 31) << x << " overflows binary16";
  return static_cast<uint16_t>(sign | (exp << 10) | static_cast<uint16_t>(mant));
}
double from_half(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
  return (h & 0x8000) ? -v : v;
}

// Re-encodes every 2-d tensor of an F32 GGUF as `type` (1 = F16, 8 = Q8_0, 30 = BF16); vectors stay
// F32 as llama.cpp's quantiser leaves them. `expect` gets each tensor's values as this test decodes them.
std::string reencode(const std::string& path, uint32_t type, std::map<std::string, std::vector<float>>& expect) {
  auto g = map_gguf(path);
  EXPECT_TRUE(g) << g.error().to_string();
  writer w;
  // Copy the metadata bytes verbatim: they sit between the 24-byte header and the first tensor info.
  const uint8_t* b = g->base;
  uint64_t pos = 24;
  for (uint64_t k = 0; k < g->metadata.size(); ++k) {  // skip over each kv to find where they end
    uint64_t n; std::memcpy(&n, b + pos, 8); pos += 8 + n;
    uint32_t t; std::memcpy(&t, b + pos, 4); pos += 4;
    auto skip = [&](uint32_t ty, auto& self) -> void {
      static const uint64_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
      if (ty == 8) { uint64_t l; std::memcpy(&l, b + pos, 8); pos += 8 + l; }
      else if (ty == 9) {
        uint32_t et; std::memcpy(&et, b + pos, 4); uint64_t l; std::memcpy(&l, b + pos + 4, 8); pos += 12;
        for (uint64_t i = 0; i < l; ++i) self(et, self);
      } else pos += sz[ty];
    };
    skip(t, skip);
  }
  w.kv.assign(reinterpret_cast<const char*>(b) + 24, pos - 24);
  w.n_kv = g->metadata.size();
  for (const auto& t : g->tensors) {
    auto v = gguf_tensor_f32(*g, t);
    EXPECT_TRUE(v);
    std::string data;
    std::vector<float>& e = expect[t.name];
    if (t.ne.size() == 1 || (type == 8 && t.ne[0] % 32)) {
      data.assign(reinterpret_cast<const char*>(v->data()), v->size() * 4);
      e = *v;
      w.add(t.name, t.ne, 0, data);
      continue;
    }
    for (size_t i = 0; i < v->size(); ++i) {
      if (type == 1) {
        const uint16_t h = to_half((*v)[i]);
        writer::pod(data, h);
        e.push_back(static_cast<float>(from_half(h)));
      } else if (type == 30) {  // bf16 by round to nearest even on the bits
        uint32_t bits; std::memcpy(&bits, &(*v)[i], 4);
        const uint16_t h = static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
        writer::pod(data, h);
        const uint32_t back = uint32_t{h} << 16; float f; std::memcpy(&f, &back, 4);
        e.push_back(f);
      } else if (i % 32 == 0) {  // Q8_0: d = max|x| / 127 (as fp16), q = round(x / d)
        double amax = 0;
        for (size_t j = i; j < i + 32; ++j) amax = std::max(amax, std::fabs(static_cast<double>((*v)[j])));
        const uint16_t dh = to_half(static_cast<float>(amax / 127));
        const double d = from_half(dh);
        writer::pod(data, dh);
        for (size_t j = i; j < i + 32; ++j) {
          const double q = d == 0 ? 0 : std::clamp(std::nearbyint((*v)[j] / d), -127.0, 127.0);
          writer::pod(data, static_cast<int8_t>(q));
          e.push_back(static_cast<float>(static_cast<float>(d) * static_cast<float>(q)));
        }
      }
    }
    w.add(t.name, t.ne, type, data);
  }
  const std::string out = path + "." + std::to_string(type) + ".gguf";
  w.save(out);
  return out;
}

// --- round trips ------------------------------------------------------------------------------------

TEST(gguf_reader, f32_round_trip_is_bit_for_bit) {
  for (const auto& [file, tok] : std::vector<std::pair<std::string, std::string>>{
           {"llama-odd.config.json", "llama"}, {"llama-tied.config.json", "llama"}, {"gpt2-odd.config.json", "gpt2"}}) {
    SCOPED_TRACE(file);
    const auto m = seeded(file, 7);
    const std::string path = exported(m, tok, file);
    auto back = load_decoder(path);  // the hook: a .gguf path is a model source
    ASSERT_TRUE(back) << back.error().to_string();
    const model_shape &a = m.shape(), &b = back->shape();
    EXPECT_EQ(b.arch, a.arch);
    EXPECT_EQ(b.num_layers, a.num_layers);
    EXPECT_EQ(b.hidden_size, a.hidden_size);
    EXPECT_EQ(b.num_heads, a.num_heads);
    EXPECT_EQ(b.num_kv_heads, a.num_kv_heads);
    EXPECT_EQ(b.head_dim(), a.head_dim());
    EXPECT_EQ(b.intermediate_size, a.intermediate_size);
    EXPECT_EQ(b.vocab_size, a.vocab_size);
    EXPECT_EQ(b.max_position_embeddings, a.max_position_embeddings);
    EXPECT_EQ(b.norm_eps, a.norm_eps);
    EXPECT_EQ(b.rope_theta, a.rope_theta);
    EXPECT_EQ(b.rope_scaling, a.rope_scaling);
    EXPECT_EQ(b.rope_scaling_factor, a.rope_scaling_factor);
    EXPECT_EQ(b.tie_word_embeddings, a.tie_word_embeddings);
    EXPECT_EQ(b.bos_token_id, a.bos_token_id);
    EXPECT_EQ(b.eos_token_id, a.eos_token_id);
    EXPECT_EQ(b.activation, a.activation);
    expect_same_weights(m, *back);
    auto la = m.full_logits(prompt), lb = back->full_logits(prompt);
    ASSERT_TRUE(la && lb);
    for (size_t i = 0; i < la->size(); ++i)
      EXPECT_EQ(std::memcmp((*la)[i].data(), (*lb)[i].data(), (*la)[i].size() * 4), 0) << "position " << i;
  }
}

// Max |logit difference| over every position, divided by the reference's max |logit|.
double relative_logit_error(const decoder_model& ref, const decoder_model& got) {
  auto a = ref.full_logits(prompt), b = got.full_logits(prompt);
  EXPECT_TRUE(a && b);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a->size(); ++i)
    for (size_t j = 0; j < (*a)[i].size(); ++j) {
      diff = std::max(diff, std::fabs(static_cast<double>((*a)[i][j]) - (*b)[i][j]));
      scale = std::max(scale, std::fabs(static_cast<double>((*a)[i][j])));
    }
  return diff / scale;
}

// The CPU's own float -> half -> float (F16C's VCVTPS2PH, round to nearest even): an independent
// rounding to check write_gguf's against.
__attribute__((target("f16c"))) float hardware_half(float x) {
  return _cvtsh_ss(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

// write_gguf's F16 export (export-gguf --type f16): matrices F16, every value as the CPU's F16C
// conversion gives it (round to nearest even; subnormals, ties, overflow to infinity, NaN
// included), vectors F32 bit for bit, file_type 1, the chat template given; the logits stay within
// the F16 bound of the test above.
TEST(gguf_reader, f16_export_rounds_matrices_to_nearest_even_and_keeps_vectors_f32) {
  for (const auto& [file, tok] : std::vector<std::pair<std::string, std::string>>{
           {"llama-odd.config.json", "llama"}, {"gpt2-odd.config.json", "gpt2"}}) {
    SCOPED_TRACE(file);
    auto m = seeded(file, 5);
    // Hard values in token 0's embedding row (the logits below are of the unchanged model).
    const float specials[] = {0.0f, -0.0f, 1e-8f, 5.9604645e-8f, 2.9802322e-8f, 8.940697e-8f, 6.1e-5f, 6.097555e-5f,
                              0.33333334f, 65504.0f, 65519.99f, 65520.0f, -1e6f, 1.0009766f, 1.0004883f, NAN};
    auto spiked = seeded(file, 5);
    std::memcpy(const_cast<float*>(spiked.find("model.embed_tokens.weight") ? spiked.find("model.embed_tokens.weight")->data
                                                                           : spiked.find("wte.weight")->data),
                specials, sizeof specials);
    const std::string path = make_temp_dir("gguf_reader") + "/f16-" + file + ".gguf";
    auto t = bpe_tokenizer::load(tok);
    ASSERT_TRUE(t) << t.error().to_string();
    ASSERT_TRUE(write_gguf(spiked, *t, path, {.f16 = true, .chat_template = "{{ messages }}"}).ok());
    auto g = map_gguf(path);
    ASSERT_TRUE(g) << g.error().to_string();
    EXPECT_EQ(g->find("general.file_type")->i, 1);
    EXPECT_EQ(g->find("tokenizer.chat_template")->s, "{{ messages }}");
    for (const auto& ti : g->tensors) EXPECT_EQ(ti.type, ti.ne.size() == 2 ? 1u : 0u) << ti.name;
    auto back = load_decoder(path);
    ASSERT_TRUE(back) << back.error().to_string();
    for (const auto& spec : expected_decoder_tensors(spiked.shape())) {
      const tensor_view *x = spiked.find(spec.name), *y = back->find(spec.name);
      ASSERT_TRUE(x && y) << spec.name;
      for (int64_t i = 0; i < x->numel(); ++i) {
        const float want = x->shape.size() == 2 ? hardware_half(x->data[i]) : x->data[i];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(y->data[i])) << spec.name << "[" << i << "]";
        } else if (std::memcmp(&want, &y->data[i], 4) != 0) {
          ADD_FAILURE() << spec.name << "[" << i << "]: " << x->data[i] << " -> " << y->data[i] << ", want " << want;
          break;
        }
      }
    }
    // The logits of the unchanged weights through F16.
    const std::string clean = make_temp_dir("gguf_reader") + "/f16-clean-" + file + ".gguf";
    ASSERT_TRUE(write_gguf(m, *t, clean, {.f16 = true}).ok());
    auto b = load_decoder(clean);
    ASSERT_TRUE(b) << b.error().to_string();
    const double err = relative_logit_error(m, *b);
    EXPECT_LE(err, 1e-2);
    EXPECT_GT(err, 0);
  }
}

// F16, BF16 and Q8_0: every weight equals this test's own decoding of what it wrote, and the logits
// stay within a bound of the F32 model's (measured: see the bounds' comments).
TEST(gguf_reader, f16_bf16_q8_0_dequantise_exactly_and_logits_stay_close) {
  struct cse { std::string file, tok; nlohmann::json over; };
  const std::vector<cse> cases = {
      {"llama-odd.config.json", "llama", {{"hidden_size", 128}, {"intermediate_size", 256}}},
      {"gpt2-odd.config.json", "gpt2", {{"n_embd", 96}, {"n_inner", 192}}}};
  // type, bound on relative_logit_error. Measured (seeds as here, 3 layers, the logits of 8 positions):
  // F16 6.1e-3 (llama) / 2.6e-3 (gpt2), BF16 2.7e-2 / 2.7e-2, Q8_0 6.6e-2 / 3.4e-2; the bounds
  // leave 1.5x or more. The weights themselves are checked exactly above.
  const std::vector<std::pair<uint32_t, double>> types = {{1, 1e-2}, {30, 4e-2}, {8, 1e-1}};
  for (const auto& c : cases) {
    const auto m = seeded(c.file, 3, c.over);
    const std::string path = exported(m, c.tok, c.file + "-q");
    for (const auto& [type, bound] : types) {
      SCOPED_TRACE(c.file + " as " + ggml_type_name(type));
      std::map<std::string, std::vector<float>> expect;
      const std::string q = reencode(path, type, expect);
      auto g = map_gguf(q);
      ASSERT_TRUE(g) << g.error().to_string();
      int quantised = 0;
      for (const auto& t : g->tensors) {
        auto v = gguf_tensor_f32(*g, t);
        ASSERT_TRUE(v) << v.error().to_string();
        EXPECT_EQ(*v, expect[t.name]) << t.name;
        quantised += t.type == type;
      }
      EXPECT_GT(quantised, 3 * 4);  // the layers' matrices are in that type, not F32
      auto back = load_decoder(q);
      ASSERT_TRUE(back) << back.error().to_string();
      const double err = relative_logit_error(m, *back);
      EXPECT_LE(err, bound);
      EXPECT_GT(err, 0);  // the weights did change
      std::printf("%s %s: max |logit diff| / max |logit| = %.3g (bound %.1g)\n", c.file.c_str(),
                  ggml_type_name(type).c_str(), err, bound);
    }
  }
}

// --- Q8_0 blocks kept (load with dtype::q8_0) against the same file dequantised -----------------------

// max |logit diff| / max(1, max |reference logit|) over rows.
double bounded_error(const std::vector<std::vector<float>>& ref, const std::vector<std::vector<float>>& got) {
  double diff = 0, scale = 1;
  for (size_t i = 0; i < ref.size(); ++i)
    for (size_t j = 0; j < ref[i].size(); ++j) {
      diff = std::max(diff, std::fabs(static_cast<double>(ref[i][j]) - got[i][j]));
      scale = std::max(scale, std::fabs(static_cast<double>(ref[i][j])));
    }
  return diff / scale;
}

// One mixed batch of 8 sequences (prefill of 5 tokens each, 40 rows), then one decode step of 8 rows.
std::vector<std::vector<float>> batched_steps(const decoder_model& m) {
  kv_layout layout{4, 8 * 3, m.default_kv_dtype()};
  auto cache = paged_kv_cache::make(m.shape(), layout);
  EXPECT_TRUE(cache);
  step_batch b;
  for (int s = 0; s < 8; ++s) {
    seq_step st;
    st.seq_id = static_cast<uint64_t>(s);
    for (int i = 0; i < 5; ++i) st.tokens.push_back((s * 37 + i * 11 + 3) % m.shape().vocab_size);
    st.block_table = {3 * s, 3 * s + 1, 3 * s + 2};
    b.seqs.push_back(st);
  }
  auto pre = m.step(b, *cache);
  EXPECT_TRUE(pre) << pre.error().to_string();
  for (int s = 0; s < 8; ++s) {
    b.seqs[s].tokens = {(s * 13 + 7) % m.shape().vocab_size};
    b.seqs[s].start_pos = 5;
  }
  auto dec = m.step(b, *cache);
  EXPECT_TRUE(dec) << dec.error().to_string();
  std::vector<std::vector<float>> all = *pre;
  all.insert(all.end(), dec->begin(), dec->end());
  return all;
}

// The file loaded with its Q8_0 blocks kept runs the weights of the file dequantised: full logits
// within q8_0_decoder_logit_bound, greedy tokens equal up to the first near-tie, and the batched
// steps (4..48 rows, the kernel fp32 shares) bit for bit.
void expect_q8_matches_dequantised(const std::string& path, int expect_kept) {
  auto f = load_decoder(path);                  // every tensor dequantised at load
  auto q = load_decoder(path, 0, dtype::q8_0);  // Q8_0 matrices kept as blocks
  ASSERT_TRUE(f) << f.error().to_string();
  ASSERT_TRUE(q) << q.error().to_string();
  EXPECT_EQ(q->compute_dtype(), dtype::q8_0);
  EXPECT_EQ(q->default_kv_dtype(), dtype::fp32);
  EXPECT_FALSE(q->holds_fp32_matrices());  // the blocks were never dequantised
  EXPECT_LT(q->matrix_bytes(), f->matrix_bytes());
  auto g = map_gguf(path);
  ASSERT_TRUE(g);
  int kept = 0;
  for (const auto& t : g->tensors) kept += t.type == 8 && t.name != "token_embd.weight" && t.name != "position_embd.weight";
  EXPECT_EQ(kept, expect_kept);
  // 60 positions: the prefill's panels through oneDNN (over 48 rows), fp32 sums in another order.
  std::vector<int32_t> longer(60);
  for (size_t i = 0; i < longer.size(); ++i) longer[i] = static_cast<int32_t>((i * 7 + 1) % f->shape().vocab_size);
  auto lf = f->full_logits(longer), lq = q->full_logits(longer);
  ASSERT_TRUE(lf && lq);
  const double err = bounded_error(*lf, *lq);
  EXPECT_LE(err, q8_0_decoder_logit_bound);
  const auto bf = batched_steps(*f), bq = batched_steps(*q);
  ASSERT_EQ(bf.size(), bq.size());
  for (size_t i = 0; i < bf.size(); ++i)
    EXPECT_EQ(std::memcmp(bf[i].data(), bq[i].data(), bf[i].size() * 4), 0) << "batched row " << i;
  generate_options o;
  o.max_tokens = 12;
  o.keep_logits = true;
  auto gf = greedy_generate(*f, prompt, o), gq = greedy_generate(*q, prompt, o);
  ASSERT_TRUE(gf && gq);
  size_t same = 0;
  double step_err = 0;  // the decode steps: one row, the Q8_0 kernel's own sums
  for (; same < gf->tokens.size() && gf->tokens[same] == gq->tokens[same]; ++same) {
    step_err = std::max(step_err, bounded_error({gf->logits[same]}, {gq->logits[same]}));
    EXPECT_LE(step_err, q8_0_decoder_logit_bound) << "step " << same;
  }
  if (same < gf->tokens.size()) {  // only at a near-tie of the reference
    double mx = 1;
    for (float v : gf->logits[same]) mx = std::max(mx, std::fabs(static_cast<double>(v)));
    EXPECT_LT(gf->top2_margin[same], 2 * q8_0_decoder_logit_bound * mx) << "tokens differ at step " << same;
  }
  std::printf("%s: %d Q8_0 matrices kept, %.1f KB vs %.1f KB fp32; error (bound %.0e): 60-position full logits "
              "%.2g, greedy steps %.2g; greedy equal for %zu of %zu tokens\n", path.c_str(), kept,
              q->matrix_bytes() / 1e3, f->matrix_bytes() / 1e3, q8_0_decoder_logit_bound, err, step_err, same,
              gf->tokens.size());
}

// export-gguf --type q8_0: every matrix whose rows are whole blocks Q8_0 (others and vectors F32),
// file_type 7, each value the quantisation of the model's (scales checked against the CPU's F16C
// rounding by kernels_q8_test); the file loaded with blocks kept matches it loaded dequantised.
TEST(gguf_reader, q8_0_export_and_its_blocks_kept_match_the_dequantised_fp32_run) {
  struct cse { std::string file, tok; nlohmann::json over; int kept; };
  // kept: the layers' Q8_0 Linear matrices (and output.weight / a tied head's token_embd).
  const std::vector<cse> cases = {
      {"llama-odd.config.json", "llama", {{"hidden_size", 128}, {"intermediate_size", 256}}, 3 * 7 + 1},
      {"llama-odd.config.json", "llama", {}, 3 * 1},  // hidden 100: only o_proj (in 96) is Q8_0
      {"llama-tied.config.json", "llama", {}, 2 * 6},  // ffn 136: down_proj stays F32
      {"gpt2-odd.config.json", "gpt2", {{"n_embd", 96}, {"n_inner", 192}}, 3 * 4},
      {"qwen2-odd.config.json", "gpt2", {}, 3 * 6}};  // Q/K/V with biases, ffn 200: down F32
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file + " " + c.over.dump());
    const auto m = seeded(c.file, 4, c.over);
    const std::string path = make_temp_dir("gguf_reader") + "/q8-" + c.file + ".gguf";
    auto t = bpe_tokenizer::load(c.tok);
    ASSERT_TRUE(t) << t.error().to_string();
    ASSERT_TRUE(write_gguf(m, *t, path, {.q8_0 = true}).ok());
    auto g = map_gguf(path);
    ASSERT_TRUE(g) << g.error().to_string();
    EXPECT_EQ(g->find("general.file_type")->i, 7);
    for (const auto& ti : g->tensors)
      EXPECT_EQ(ti.type, ti.ne.size() == 2 && ti.ne[0] % 32 == 0 ? 8u : 0u) << ti.name;
    auto f = load_decoder(path);
    ASSERT_TRUE(f) << f.error().to_string();
    if (!m.shape().traits().conv1d_weights)  // [out, in] rows: the file's values are the rows quantised
      for (const auto& spec : expected_decoder_tensors(m.shape())) {
        if (spec.shape.size() != 2 || spec.shape[1] % 32) continue;
        const q8_0_weight w = q8_0_weight::quantize(m.find(spec.name)->data, spec.shape[0], spec.shape[1]);
        std::vector<float> want(static_cast<size_t>(spec.shape[0] * spec.shape[1]));
        w.dequantize_rows(0, spec.shape[0], want.data());
        EXPECT_EQ(std::memcmp(want.data(), f->find(spec.name)->data, want.size() * 4), 0) << spec.name;
      }
    expect_q8_matches_dequantised(path, c.kept);
  }
}

// A Q8_0 file written by this test's own writer (reencode: not tessera's quantiser) runs on its own
// blocks, matching the same file dequantised.
TEST(gguf_reader, q8_0_file_from_another_writer_keeps_its_blocks) {
  for (const auto& [file, tok, over, kept] : std::vector<std::tuple<std::string, std::string, nlohmann::json, int>>{
           {"llama-odd.config.json", "llama", {{"hidden_size", 128}, {"intermediate_size", 256}}, 3 * 7 + 1},
           {"gpt2-odd.config.json", "gpt2", {{"n_embd", 96}, {"n_inner", 192}}, 3 * 4}}) {
    SCOPED_TRACE(file);
    const auto m = seeded(file, 6, over);
    std::map<std::string, std::vector<float>> expect;
    const std::string q = reencode(exported(m, tok, file + "-w"), 8, expect);
    expect_q8_matches_dequantised(q, kept);
  }
}

// A model holding only the file's blocks refuses what needs fp32 matrices, naming the dtype.
TEST(gguf_reader, a_model_of_kept_q8_0_blocks_refuses_what_needs_fp32) {
  const auto m = seeded("llama-tied.config.json", 2);
  const std::string path = make_temp_dir("gguf_reader") + "/q8-refusals.gguf";
  auto t = bpe_tokenizer::load("llama");
  ASSERT_TRUE(t);
  ASSERT_TRUE(write_gguf(m, *t, path, {.q8_0 = true}).ok());
  EXPECT_FALSE(write_gguf(m, *t, path + ".x", {.f16 = true, .q8_0 = true}).ok());
  auto q = load_gguf_decoder(path, dtype::q8_0);
  ASSERT_TRUE(q) << q.error().to_string();
  for (dtype d : {dtype::fp32, dtype::bf16}) {
    const status st = q->set_dtype(d);
    EXPECT_EQ(st.code(), errc::unsupported);
    EXPECT_NE(st.message().find("load it with --dtype " + std::string(dtype_name(d))), std::string::npos) << st.message();
  }
  EXPECT_EQ(q->set_dtype(dtype::int8).code(), errc::unsupported);
  EXPECT_TRUE(q->set_dtype(dtype::q8_0).ok());
  const status w = write_gguf(*q, *t, path + ".again");
  EXPECT_NE(w.message().find("only in q8_0"), std::string::npos) << w.message();
  const status s = save_decoder(*q, make_temp_dir("gguf_reader") + "/q8-save");
  EXPECT_NE(s.message().find("only in q8_0"), std::string::npos) << s.message();
  // The same model quantised in memory (set_dtype(q8_0) of fp32) keeps its fp32 matrices and returns to fp32.
  auto mem = load_decoder(path);
  ASSERT_TRUE(mem);
  ASSERT_TRUE(mem->set_dtype(dtype::q8_0).ok());
  EXPECT_EQ(mem->compute_dtype(), dtype::q8_0);
  EXPECT_TRUE(mem->holds_fp32_matrices());
  ASSERT_TRUE(mem->set_dtype(dtype::fp32).ok());
  EXPECT_EQ(mem->compute_dtype(), dtype::fp32);
}

// --- a file from the spec's layout, not from tessera's exporter ---------------------------------------

TEST(gguf_reader, hand_written_llama_file) {
  // llama: 2 layers, hidden 8, 2 heads of 4 (1 kv head), ffn 16, vocab 6, untied, alignment 64.
  writer w;
  w.align = 64;
  w.version = 2;
  w.text("general.architecture", "llama");
  w.u32("general.alignment", 64);
  w.text("general.name", "hand");
  w.u32("llama.context_length", 32);
  w.u32("llama.embedding_length", 8);
  w.u32("llama.block_count", 2);
  w.u32("llama.feed_forward_length", 16);
  w.u32("llama.attention.head_count", 2);
  w.u32("llama.attention.head_count_kv", 1);
  w.f32("llama.attention.layer_norm_rms_epsilon", 1e-6f);
  w.f32("llama.rope.freq_base", 500000.0f);
  w.u32("llama.rope.dimension_count", 4);
  w.text("tokenizer.ggml.model", "llama");
  w.strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xe2\x96\x81" "a", "b", "\xe2\x96\x81" "ab"});
  w.array<float>("tokenizer.ggml.scores", 6, {0, 0, 0, -1, -2, -3});
  w.array<int32_t>("tokenizer.ggml.token_type", 5, {2, 3, 3, 1, 1, 1});
  w.array<uint8_t>("test.u8s", 0, {1, 2, 255});
  w.array<int16_t>("test.i16s", 3, {-5, 7});
  w.array<double>("test.f64s", 12, {0.25, -1e300});
  w.u32("tokenizer.ggml.bos_token_id", 1);
  w.u32("tokenizer.ggml.eos_token_id", 2);
  w.text("tokenizer.chat_template", "{{ messages }}");
  // Values: tensor k, element i = k + i / 1024 (exact in f32); Q rows as llama.cpp stores them.
  int k = 0;
  auto f32 = [&](const std::string& name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (auto d : ne) n *= d;
    std::vector<float> v(n);
    for (uint64_t i = 0; i < n; ++i) v[i] = static_cast<float>(k) + static_cast<float>(i) / 1024.0f;
    ++k;
    w.add(name, ne, 0, std::string(reinterpret_cast<const char*>(v.data()), n * 4));
  };
  f32("token_embd.weight", {8, 6});
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    f32(b + "attn_norm.weight", {8});
    f32(b + "attn_q.weight", {8, 8});
    f32(b + "attn_k.weight", {8, 4});
    f32(b + "attn_v.weight", {8, 4});
    f32(b + "attn_output.weight", {8, 8});
    f32(b + "ffn_norm.weight", {8});
    f32(b + "ffn_gate.weight", {8, 16});
    f32(b + "ffn_up.weight", {8, 16});
    f32(b + "ffn_down.weight", {16, 8});
  }
  f32("output_norm.weight", {8});
  f32("output.weight", {8, 6});
  const std::string path = make_temp_dir("gguf_reader") + "/hand.gguf";
  w.save(path);

  auto g = map_gguf(path);
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(g->version, 2u);
  EXPECT_EQ(g->alignment, 64u);
  EXPECT_EQ(g->data_offset % 64, 0u);
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->strings[5], "\xe2\x96\x81" "ab");
  EXPECT_EQ(g->find("tokenizer.ggml.scores")->numbers, (std::vector<double>{0, 0, 0, -1, -2, -3}));
  EXPECT_EQ(g->find("test.u8s")->numbers, (std::vector<double>{1, 2, 255}));
  EXPECT_EQ(g->find("test.i16s")->numbers, (std::vector<double>{-5, 7}));
  EXPECT_EQ(g->find("test.f64s")->numbers, (std::vector<double>{0.25, -1e300}));
  EXPECT_EQ(g->find("tokenizer.chat_template")->s, "{{ messages }}");
  EXPECT_EQ(g->tensors.size(), 21u);

  auto m = load_decoder(path);
  ASSERT_TRUE(m) << m.error().to_string();
  const model_shape& s = m->shape();
  EXPECT_EQ(s.arch, architecture::llama);
  EXPECT_EQ(s.name, "hand");
  EXPECT_EQ(s.num_layers, 2);
  EXPECT_EQ(s.hidden_size, 8);
  EXPECT_EQ(s.num_heads, 2);
  EXPECT_EQ(s.num_kv_heads, 1);
  EXPECT_EQ(s.head_dim(), 4);
  EXPECT_EQ(s.intermediate_size, 16);
  EXPECT_EQ(s.vocab_size, 6);
  EXPECT_EQ(s.max_position_embeddings, 32);
  EXPECT_EQ(s.norm_eps, 1e-6f);
  EXPECT_EQ(s.rope_theta, 500000.0f);
  EXPECT_FALSE(s.tie_word_embeddings);
  EXPECT_EQ(s.bos_token_id, 1);
  EXPECT_EQ(s.eos_token_id, 2);
  // Embedding: tensor 0, row r col c = (8r + c) / 1024.
  EXPECT_EQ(m->weights().token_embedding[8 * 5 + 3], (8 * 5 + 3) / 1024.0f);
  // Layer 0's Q is tensor 2: GGUF row 2i + s of head hd is HF row hd*4 + s*2 + i. HF row 1 (hd 0,
  // s 0, i 1) is GGUF row 2; HF row 6 (hd 1, s 1, i 0) is GGUF row 5.
  const float* q = m->weights().layers[0].q_w;
  EXPECT_EQ(q[1 * 8 + 0], 2 + (2 * 8) / 1024.0f);
  EXPECT_EQ(q[6 * 8 + 7], 2 + (5 * 8 + 7) / 1024.0f);
  // K (tensor 3, one head): HF row 2 (s 1, i 0) is GGUF row 1.
  EXPECT_EQ(m->weights().layers[0].k_w[2 * 8], 3 + 8 / 1024.0f);
  // V is not permuted: tensor 4 row 3.
  EXPECT_EQ(m->weights().layers[0].v_w[3 * 8 + 1], 4 + 25 / 1024.0f);
  // Layer 1's down projection is tensor 1 + 9 + 8: [8 rows, 16 cols].
  EXPECT_EQ(m->weights().layers[1].down_w[16 * 7 + 15], 18 + 127 / 1024.0f);
  EXPECT_EQ(m->weights().lm_head[0], 20.0f);
  auto logits = m->full_logits({1, 3, 4});
  ASSERT_TRUE(logits);
  for (float x : logits->back()) EXPECT_TRUE(std::isfinite(x));
}

// --- refusals and hostile files -----------------------------------------------------------------------

std::string small_valid_file(bool extra_tensor = false) {
  writer w;
  w.text("general.architecture", "gpt2");
  w.u32("gpt2.context_length", 4);
  w.u32("gpt2.embedding_length", 4);
  w.u32("gpt2.block_count", 1);
  w.u32("gpt2.feed_forward_length", 8);
  w.u32("gpt2.attention.head_count", 2);
  w.f32("gpt2.attention.layer_norm_epsilon", 1e-5f);
  w.strings("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.array<int32_t>("tokenizer.ggml.token_type", 5, {1, 1, 1});
  auto t = [&](const std::string& n, std::vector<uint64_t> ne) {
    uint64_t c = 1;
    for (auto d : ne) c *= d;
    w.add(n, ne, 0, std::string(c * 4, '\x01'));
  };
  t("token_embd.weight", {4, 3});
  t("position_embd.weight", {4, 4});
  t("blk.0.attn_norm.weight", {4}); t("blk.0.attn_norm.bias", {4});
  t("blk.0.attn_qkv.weight", {4, 12}); t("blk.0.attn_qkv.bias", {12});
  t("blk.0.attn_output.weight", {4, 4}); t("blk.0.attn_output.bias", {4});
  t("blk.0.ffn_norm.weight", {4}); t("blk.0.ffn_norm.bias", {4});
  t("blk.0.ffn_up.weight", {4, 8}); t("blk.0.ffn_up.bias", {8});
  t("blk.0.ffn_down.weight", {8, 4}); t("blk.0.ffn_down.bias", {4});
  t("output_norm.weight", {4}); t("output_norm.bias", {4});
  if (extra_tensor) t("rope_freqs.weight", {2});
  return w.bytes();
}

// Parse, then build a decoder: either an error with a message naming the source, or a model.
bool loads(const std::string& bytes, std::string* error = nullptr) {
  auto g = parse_gguf(bytes.data(), bytes.size(), "mem.gguf");
  if (!g) {
    EXPECT_NE(g.error().to_string().find("mem.gguf"), std::string::npos) << g.error().to_string();
    if (error) *error = g.error().to_string();
    return false;
  }
  auto m = gguf_decoder(*g);
  if (!m) {
    EXPECT_FALSE(m.error().to_string().empty());
    if (error) *error = m.error().to_string();
    return false;
  }
  return true;
}

TEST(gguf_reader, the_small_file_loads_and_every_truncation_is_refused) {
  const std::string ok = small_valid_file();
  ASSERT_TRUE(loads(ok));
  for (size_t n = 0; n < ok.size(); ++n) {
    // A copy of exactly n bytes so a read past the end is caught by ASan.
    std::vector<char> cut(ok.begin(), ok.begin() + static_cast<std::ptrdiff_t>(n));
    auto g = parse_gguf(cut.data(), cut.size(), "cut.gguf");
    if (g) {  // only a cut inside the last tensor's padding can parse; the decoder then still loads
      EXPECT_GE(n, ok.size() - 32) << n;
      continue;
    }
    EXPECT_NE(g.error().to_string().find("cut.gguf"), std::string::npos);
  }
}

// Overwrites `n` bytes at `pos` of `s`.
std::string patched(std::string s, size_t pos, const void* v, size_t n) {
  s.replace(pos, n, static_cast<const char*>(v), n);
  return s;
}

TEST(gguf_reader, lies_and_refusals_name_what_is_wrong) {
  const std::string ok = small_valid_file();
  auto expect_error = [](const std::string& bytes, const std::string& part) {
    std::string err;
    EXPECT_FALSE(loads(bytes, &err));
    EXPECT_NE(err.find(part), std::string::npos) << err;
  };
  const uint64_t huge = uint64_t{1} << 62;
  expect_error(patched(ok, 8, &huge, 8), "tensors, more than the file can hold");   // tensor count
  expect_error(patched(ok, 16, &huge, 8), "metadata entries, more than the file");  // kv count
  expect_error("GGUX" + ok.substr(4), "not a GGUF file");
  const uint32_t v1 = 1, big_endian = 0x03000000;
  expect_error(patched(ok, 4, &v1, 4), "version 1 is not supported");
  expect_error(patched(ok, 4, &big_endian, 4), "big-endian");
  const uint32_t v4 = 4;
  expect_error(patched(ok, 4, &v4, 4), "GGUF version 4 is not supported (2 and 3 are)");
  {  // the metadata says ffn 16, the tensors are 8 wide
    std::string wide = ok;
    const size_t at = wide.find("gpt2.feed_forward_length") + 24 + 4;
    const uint32_t sixteen = 16;
    expect_error(patched(wide, at, &sixteen, 4), "tensor \"blk.0.ffn_up.weight\" has ne [4, 8], expected [4, 16] from the metadata");
  }
  // The first key's length: beyond the file.
  expect_error(patched(ok, 24, &huge, 8), "claims");

  // Arrays: a huge length, an array of arrays, an unknown element type.
  auto with_kv = [&](auto add) {
    writer w;
    w.text("general.architecture", "gpt2");
    add(w);
    return w.bytes();
  };
  expect_error(with_kv([](writer& w) {
                 w.key("x", 9); writer::pod<uint32_t>(w.kv, 4); writer::pod<uint64_t>(w.kv, uint64_t{1} << 60);
               }), "claims 1152921504606846976 elements");
  expect_error(with_kv([](writer& w) { w.key("x", 9); writer::pod<uint32_t>(w.kv, 9); writer::pod<uint64_t>(w.kv, 0); }),
               "array of arrays");
  expect_error(with_kv([](writer& w) { w.key("x", 9); writer::pod<uint32_t>(w.kv, 77); writer::pod<uint64_t>(w.kv, 1); }),
               "unknown element type 77");
  expect_error(with_kv([](writer& w) { w.key("x", 13); }), "unknown value type 13");
  expect_error(with_kv([](writer& w) { w.u32("general.alignment", 3); }), "not a power of two");
  expect_error(with_kv([](writer& w) { w.u32("general.alignment", 0); }), "not a power of two");
  expect_error(with_kv([](writer& w) { w.f32("general.alignment", 32); }), "must be a u32");
  expect_error(with_kv([](writer& w) { w.u32("a", 1); w.u32("a", 2); }), "appears twice");

  // Tensors: an offset beyond the file, a misaligned offset, a type refused by name, 5 dimensions.
  auto with_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data) {
    std::string out = "GGUF";
    writer::pod<uint32_t>(out, 3);
    writer::pod<uint64_t>(out, 1);
    writer::pod<uint64_t>(out, 0);
    writer::str(out, "t");
    writer::pod<uint32_t>(out, static_cast<uint32_t>(ne.size()));
    for (auto d : ne) writer::pod(out, d);
    writer::pod(out, type);
    writer::pod(out, offset);
    out.resize((out.size() + 31) / 32 * 32 + data, '\0');
    return out;
  };
  auto g = [&](const std::string& b) { auto r = parse_gguf(b.data(), b.size(), "t.gguf"); return r ? std::string() : r.error().to_string(); };
  EXPECT_EQ(g(with_tensor({4}, 0, 0, 16)), "");
  EXPECT_NE(g(with_tensor({4}, 0, 0, 15)).find("beyond the end of the file"), std::string::npos);
  EXPECT_NE(g(with_tensor({4}, 0, 64, 16)).find("beyond the end"), std::string::npos);
  EXPECT_NE(g(with_tensor({4}, 0, ~uint64_t{0} - 31, 16)).find("beyond the end"), std::string::npos);
  EXPECT_NE(g(with_tensor({4}, 0, 4, 16)).find("not a multiple of the alignment"), std::string::npos);
  EXPECT_NE(g(with_tensor({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 16)).find("impossibly large"), std::string::npos);
  EXPECT_NE(g(with_tensor({4, 0}, 0, 0, 16)).find("empty or impossibly large"), std::string::npos);
  EXPECT_NE(g(with_tensor({1, 1, 1, 1, 1}, 0, 0, 16)).find("5 dimensions"), std::string::npos);
  EXPECT_NE(g(with_tensor({33}, 8, 0, 64)).find("not a multiple of 32"), std::string::npos);
  {
    const std::string b = with_tensor({256}, 12, 0, 144);
    auto f = parse_gguf(b.data(), b.size(), "q4k.gguf");
    ASSERT_TRUE(f) << f.error().to_string();
    auto v = gguf_tensor_f32(*f, f->tensors[0]);
    ASSERT_FALSE(v);
    EXPECT_NE(v.error().to_string().find("Q4_K not supported: supported F32, F16, BF16, Q8_0"), std::string::npos)
        << v.error().to_string();
  }
  // Model level: an unknown architecture, a missing key, an extra tensor.
  std::string arch = ok;
  arch.replace(arch.find("gpt2"), 4, "mamb");
  expect_error(arch, "general.architecture \"mamb\" is not supported");
  std::string missing = ok;
  missing.replace(missing.find("gpt2.block_count"), 16, "gpt2.block_coun_");
  expect_error(missing, "missing metadata \"gpt2.block_count\"");
  expect_error(small_valid_file(true), "tensor \"rope_freqs.weight\" is not part of a gpt2 decoder");
}

TEST(gguf_reader, random_mutations_give_an_error_or_a_model_never_a_crash) {
  const std::string ok = small_valid_file();
  std::mt19937_64 rng(2024);
  int refused = 0, loaded = 0;
  for (int seed = 0; seed < 3000; ++seed) {
    std::string b = ok;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[pos] = static_cast<char>(rng()); break;
        case 1: {  // a plausible lie: a large or small 64-bit value
          const uint64_t v = rng() % 2 ? rng() : rng() % 256;
          b.replace(pos, std::min<size_t>(8, b.size() - pos), reinterpret_cast<const char*>(&v), std::min<size_t>(8, b.size() - pos));
          break;
        }
        default: b.resize(pos); break;
      }
      if (b.empty()) b = "G";
    }
    std::vector<char> exact(b.begin(), b.end());  // no slack past the end for ASan
    auto g = parse_gguf(exact.data(), exact.size(), "m.gguf");
    if (!g) { ++refused; continue; }
    auto m = gguf_decoder(*g);
    if (m) ++loaded; else ++refused;
  }
  EXPECT_GT(refused, 1000);
  std::printf("3000 mutated files: %d refused, %d loaded\n", refused, loaded);
}

TEST(gguf_reader, random_bytes_are_refused) {
  std::mt19937_64 rng(99);
  for (int i = 0; i < 500; ++i) {
    std::vector<char> b(rng() % 300);
    for (auto& c : b) c = static_cast<char>(rng());
    if (i % 2 && b.size() >= 4) std::memcpy(b.data(), "GGUF", 4);
    auto g = parse_gguf(b.data(), b.size(), "r.gguf");
    if (g) { auto m = gguf_decoder(*g); EXPECT_FALSE(m); }
  }
}

}  // namespace
}  // namespace tessera::models

namespace tessera::models {
namespace {

// The fuzz seeds (tests/fuzz/corpus/gguf, written by a few lines of Python from the spec's layout:
// a third writer) load: a gpt2 in F32, a GQA llama with Q8_0 matrices and an F16 embedding.
TEST(gguf_reader, fuzz_seeds_written_by_python_load) {
  const std::string dir = data_dir() + "/../../fuzz/corpus/gguf/";
  auto g = load_decoder(dir + "gpt2-tiny-f32.gguf");
  ASSERT_TRUE(g) << g.error().to_string();
  EXPECT_EQ(g->shape().arch, architecture::gpt2);
  EXPECT_TRUE(g->shape().tie_word_embeddings);
  auto f = map_gguf(dir + "llama-tiny-q8_0.gguf");
  ASSERT_TRUE(f) << f.error().to_string();
  EXPECT_EQ(f->alignment, 64u);
  EXPECT_EQ(f->tensor("blk.0.attn_v.weight")->type, 8u);
  auto v = gguf_tensor_f32(*f, *f->tensor("blk.0.attn_v.weight"));
  ASSERT_TRUE(v);
  // Block 0: d = fp16(0.01), q_j = (5j mod 256) as int8.
  const float d = 0.01000213623046875f;  // 0.01 in binary16
  EXPECT_EQ((*v)[3], d * 15.0f);
  EXPECT_EQ((*v)[30], d * static_cast<float>(static_cast<int8_t>(150)));
  auto l = load_decoder(dir + "llama-tiny-q8_0.gguf");
  ASSERT_TRUE(l) << l.error().to_string();
  EXPECT_EQ(l->shape().num_kv_heads, 2);
  EXPECT_EQ(l->shape().head_dim(), 8);
  EXPECT_EQ(l->weights().token_embedding[6], d);  // F16 element 6: 0.01 * (6 mod 5)
  EXPECT_EQ(l->weights().token_embedding[5], 0.0f);
}

}  // namespace
}  // namespace tessera::models

#include <set>

#include "tessera/models/kernels.hpp"
#include "tessera/test/run_tool.hpp"

namespace tessera::models {
namespace {

const std::vector<std::string> texts = {
    "Hello, world! The quick brown fox", "Once upon a time, in a land far away,", "naïve café 東京 🙂 x = 42;",
    "  leading spaces\tand\ttabs\n\nnew lines", "</s> and <s> typed in the text", "<|endoftext|>", "", "a",
    "numbers 1234567890 and symbols !@#$%^&*()"};

// The tokenizer a GGUF file carries encodes and decodes as the preset it was exported from (the
// preset's whole vocabulary: llama-tiny 32000 SentencePiece tokens with scores, gpt2-tiny 50257
// byte-level tokens with merges).
TEST(gguf_tokenizer, encodes_and_decodes_as_the_exported_preset) {
  for (const auto& [preset, tok] : std::vector<std::pair<std::string, std::string>>{{"llama-tiny", "llama"}, {"gpt2-tiny", "gpt2"}}) {
    SCOPED_TRACE(preset);
    auto m = make_preset_decoder(preset, 0);
    ASSERT_TRUE(m) << m.error().to_string();
    const std::string path = exported(*m, tok, preset);
    auto want = bpe_tokenizer::load(tok);
    auto got = load_gguf_tokenizer(path);
    ASSERT_TRUE(want && got) << (got ? want.error().to_string() : got.error().to_string());
    EXPECT_EQ(got->vocab_size(), want->vocab_size());
    EXPECT_EQ(got->bos_id(), want->bos_id());
    EXPECT_EQ(got->eos_id(), want->eos_id());
    EXPECT_EQ(got->kind(), want->kind());
    for (const auto& t : texts) {
      auto a = want->encode(t), b = got->encode(t);
      ASSERT_TRUE(a && b) << t;
      EXPECT_EQ(*b, *a) << "\"" << t << "\"";
      auto da = want->decode(*a), db = got->decode(*a);
      ASSERT_TRUE(da && db);
      EXPECT_EQ(*db, *da);
    }
  }
}

TEST(gguf_tokenizer, other_models_are_refused_by_name) {
  writer w;
  w.text("tokenizer.ggml.model", "bert");
  w.strings("tokenizer.ggml.tokens", {"a", "b"});
  const std::string b = w.bytes();
  auto g = parse_gguf(b.data(), b.size(), "bert.gguf");
  ASSERT_TRUE(g);
  auto t = gguf_tokenizer(*g);
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().to_string().find("tokenizer.ggml.model \"bert\" is not supported (gpt2, llama)"), std::string::npos)
      << t.error().to_string();
}

// llama.cpp (node-llama-cpp's CPU build) and tessera on the same GGUF files: the goldens of
// tests/data/models/decoders/llamacpp_goldens.json were made by llama.cpp from the files
// write_gguf makes of these seeded models (models/scripts/make_llamacpp_goldens.sh; the writer is
// deterministic); here tessera imports those files: prompt ids from the file's own tokenizer equal
// llama.cpp's, greedy tokens equal step for step up to the first near tie (top-2 margin < 1e-3).
TEST(gguf_oracle_import, llamacpp_tokens_from_the_imported_file) {
  set_num_threads(2);
  const auto g = nlohmann::json::parse(read_file(data_dir() + "/decoders/llamacpp_goldens.json"));
  ASSERT_GE(g["models"].size(), 5u);
  size_t texts_checked = 0;
  for (const auto& [name, entry] : g["models"].items()) {
    SCOPED_TRACE(name);
    decoder_model src;
    if (entry.contains("config")) {
      src = seeded(entry["config"].get<std::string>(), entry["seed"].get<uint64_t>());
    } else {
      auto p = make_preset_decoder(entry["preset"].get<std::string>(), entry["seed"].get<uint64_t>());
      ASSERT_TRUE(p) << p.error().to_string();
      src = std::move(*p);
    }
    const std::string path =
        exported(src, entry.value("tokenizer", std::string(src.shape().traits().tokenizer)), name);
    auto m = load_decoder(path);
    if (src.shape().rope_scaling == rope_scaling_kind::llama3) {
      // The export is one-way: llama.cpp's rope_freqs tensor (one divisor a frequency) is not read
      // back into Hugging Face's llama3 parameters; the reader names it instead of ignoring it.
      ASSERT_FALSE(m);
      EXPECT_NE(m.error().to_string().find("rope_freqs"), std::string::npos) << m.error().to_string();
      continue;
    }
    ASSERT_TRUE(m) << m.error().to_string();
    auto tok = load_gguf_tokenizer(path);
    ASSERT_TRUE(tok) << tok.error().to_string();
    size_t compared = 0, total = 0;
    for (const auto& p : entry["prompts"]) {
      const auto ids = p["ids"].get<std::vector<int32_t>>();
      if (p.contains("text")) {
        auto mine = tok->encode(p["text"].get<std::string>());
        ASSERT_TRUE(mine) << mine.error().to_string();
        EXPECT_EQ(*mine, ids) << "prompt ids of " << p["text"];
        ++texts_checked;
      }
      const auto want = p["tokens"].get<std::vector<int32_t>>();
      auto got = greedy_generate(*m, ids, {.max_tokens = static_cast<int>(want.size())});
      ASSERT_TRUE(got) << got.error().to_string();
      ASSERT_EQ(got->tokens.size(), want.size());
      total += want.size();
      for (size_t i = 0; i < want.size(); ++i, ++compared) {
        if (got->tokens[i] == want[i]) continue;
        EXPECT_LT(got->top2_margin[i], 1e-3f) << "greedy step " << i << " is " << got->tokens[i] << ", llama.cpp's " << want[i];
        break;
      }
    }
    EXPECT_GE(compared * 4, total * 3) << "most steps must be comparable";
  }
  EXPECT_GE(texts_checked, 8u);
}

// End to end from the command line: `tessera-models generate --model x.gguf --prompt TEXT` takes
// the weights and the tokenizer from the file and prints the same ids as the source model.
TEST(gguf_tokenizer, generate_command_line_runs_a_gguf_file) {
  auto m = make_preset_decoder("llama-tiny", 0);
  ASSERT_TRUE(m);
  const std::string path = exported(*m, "llama", "cli-llama-tiny");
  auto tok = bpe_tokenizer::load("llama");
  ASSERT_TRUE(tok);
  auto ids = tok->encode("Once upon a time");
  ASSERT_TRUE(ids);
  auto want = greedy_generate(*m, *ids, {.max_tokens = 6});
  ASSERT_TRUE(want);
  std::string out;
  ASSERT_EQ(test_support::run_tool(test_support::tool_path("tessera-models"),
                                   "generate --model " + path + " --prompt 'Once upon a time' --max-tokens 6", out, "2>&1"),
            0) << out;
  std::string expect_prompt = "prompt ids:", expect_gen = "generated ids:";
  for (int32_t t : *ids) expect_prompt += " " + std::to_string(t);
  for (int32_t t : want->tokens) expect_gen += " " + std::to_string(t);
  EXPECT_NE(out.find(expect_prompt + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find(expect_gen + "\n"), std::string::npos) << out;
  EXPECT_NE(out.find("generated text: "), std::string::npos) << out;
  // A truncated file is a clean refusal naming it.
  const std::string cut = path + ".cut.gguf";
  const std::string bytes = read_file(path);
  std::ofstream(cut, std::ios::binary).write(bytes.data(), 100000);
  EXPECT_EQ(test_support::run_tool(test_support::tool_path("tessera-models"), "generate --model " + cut + " --prompt-ids 1,2", out, "2>&1"), 2);
  EXPECT_NE(out.find(cut), std::string::npos) << out;
  EXPECT_NE(out.find("\"tokenizer.ggml.tokens\" claims 32000 elements"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera::models
