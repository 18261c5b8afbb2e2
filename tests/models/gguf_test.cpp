// GGUF export and the second decoder oracle: the file write_gguf makes, read back by an independent
// little reader here (header, metadata, tensor layout incl. LLaMA's Q/K row order and GPT-2's fused
// QKV), its errors; and tessera's tokenizers and greedy generation against llama.cpp's outputs on
// the same weights (tests/data/models/decoders/llamacpp_goldens.json, written by
// models/scripts/make_llamacpp_goldens.sh; CI needs no llama.cpp).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <variant>

#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/gguf.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/test/run_tool.hpp"
#include "util.hpp"

namespace tessera::models {
namespace {

using testing::data_dir;
using testing::make_temp_dir;
using testing::read_file;

decoder_model config_model(const std::string& file, uint64_t seed) {
  auto s = parse_decoder_config_json(read_file(data_dir() + "/decoders/" + file));
  EXPECT_TRUE(s) << file << ": " << s.error().to_string();
  s->name = file;
  auto m = make_seeded_decoder(*s, seed);
  EXPECT_TRUE(m) << m.error().to_string();
  return std::move(*m);
}

bpe_tokenizer tokenizer(const std::string& name) {
  auto t = bpe_tokenizer::load(name);
  EXPECT_TRUE(t) << t.error().to_string();
  return *t;
}

// A GGUF v3 reader written from the format's description, only as far as the test needs.
struct gguf_file {
  using value = std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<std::string>,
                             std::vector<double>>;
  std::map<std::string, value> kv;
  struct tensor {
    std::vector<uint64_t> ne;
    uint32_t type;
    uint64_t offset;
  };
  std::map<std::string, tensor> tensors;
  std::string bytes;
  size_t data_start = 0;

  const float* data(const std::string& name) const {
    return reinterpret_cast<const float*>(bytes.data() + data_start + tensors.at(name).offset);
  }
  uint64_t u(const std::string& k) const { return std::get<uint64_t>(kv.at(k)); }
  double f(const std::string& k) const { return std::get<double>(kv.at(k)); }
  const std::string& s(const std::string& k) const { return std::get<std::string>(kv.at(k)); }
};

gguf_file read_gguf(const std::string& path) {
  gguf_file g;
  g.bytes = read_file(path);
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (pos + n > g.bytes.size()) throw std::runtime_error("truncated at " + std::to_string(pos));
    std::memcpy(dst, g.bytes.data() + pos, n);
    pos += n;
  };
  auto num = [&]<class T>(T) { T v; take(&v, sizeof v); return v; };
  auto str = [&] {
    const uint64_t n = num(uint64_t{});
    std::string s(n, '\0');
    take(s.data(), n);
    return s;
  };
  auto scalar = [&](uint32_t t) -> double {
    switch (t) {
      case 0: return num(uint8_t{});
      case 1: return num(int8_t{});
      case 4: return num(uint32_t{});
      case 5: return num(int32_t{});
      case 6: return num(float{});
      case 7: return num(uint8_t{});
      case 10: return static_cast<double>(num(uint64_t{}));
      case 12: return num(double{});
    }
    throw std::runtime_error("unexpected GGUF type " + std::to_string(t));
  };
  EXPECT_EQ(g.bytes.substr(0, 4), "GGUF");
  pos = 4;
  EXPECT_EQ(num(uint32_t{}), 3u);
  const uint64_t nt = num(uint64_t{}), nkv = num(uint64_t{});
  for (uint64_t i = 0; i < nkv; ++i) {
    const std::string k = str();
    const uint32_t t = num(uint32_t{});
    if (t == 8) {
      g.kv[k] = str();
    } else if (t == 9) {
      const uint32_t et = num(uint32_t{});
      const uint64_t n = num(uint64_t{});
      if (et == 8) {
        std::vector<std::string> v;
        for (uint64_t j = 0; j < n; ++j) v.push_back(str());
        g.kv[k] = v;
      } else {
        std::vector<double> v;
        for (uint64_t j = 0; j < n; ++j) v.push_back(scalar(et));
        g.kv[k] = v;
      }
    } else if (t == 7) {
      g.kv[k] = scalar(t) != 0;
    } else if (t == 6 || t == 12) {
      g.kv[k] = scalar(t);
    } else {
      g.kv[k] = static_cast<uint64_t>(scalar(t));
    }
  }
  for (uint64_t i = 0; i < nt; ++i) {
    const std::string name = str();
    gguf_file::tensor t;
    const uint32_t nd = num(uint32_t{});
    for (uint32_t d = 0; d < nd; ++d) t.ne.push_back(num(uint64_t{}));
    t.type = num(uint32_t{});
    t.offset = num(uint64_t{});
    EXPECT_EQ(t.offset % 32, 0u) << name;
    g.tensors[name] = t;
  }
  g.data_start = (pos + 31) / 32 * 32;
  for (const auto& [name, t] : g.tensors) {
    uint64_t n = 1;
    for (uint64_t d : t.ne) n *= d;
    EXPECT_LE(g.data_start + t.offset + n * 4, g.bytes.size()) << name << " runs past the end";
  }
  return g;
}

void expect_rows(const float* got, const float* want, int64_t cols, const std::string& what) {
  for (int64_t i = 0; i < cols; ++i)
    if (got[i] != want[i]) {
      ADD_FAILURE() << what << " differs at column " << i;
      return;
    }
}

// `m` written as GGUF with the tokenizer preset `tok` into a fresh folder, read back.
gguf_file exported(const decoder_model& m, const std::string& tok) {
  const std::string path = make_temp_dir("gguf") + "/" + tok + ".gguf";
  EXPECT_TRUE(write_gguf(m, tokenizer(tok), path).ok());
  return read_gguf(path);
}

void expect_uints(const gguf_file& g, std::initializer_list<std::pair<const char*, uint64_t>> want) {
  for (const auto& [key, value] : want) EXPECT_EQ(g.u(key), value) << key;
}

TEST(gguf_export, llama_metadata_and_rotary_row_order) {
  const auto m = config_model("llama-odd.config.json", 0);
  const auto& c = m.shape();
  const auto g = exported(m, "llama");
  EXPECT_EQ(g.s("general.architecture"), "llama");
  expect_uints(g, {{"llama.embedding_length", 100}, {"llama.block_count", 3}, {"llama.feed_forward_length", 200},
                   {"llama.attention.head_count", 6}, {"llama.attention.head_count_kv", 2},
                   {"llama.attention.key_length", 16}, {"llama.rope.dimension_count", 16},
                   {"llama.context_length", 128}});
  EXPECT_EQ(g.s("llama.rope.scaling.type"), "linear");
  EXPECT_FLOAT_EQ(g.f("llama.rope.scaling.factor"), 2.0);
  EXPECT_FLOAT_EQ(g.f("llama.rope.freq_base"), 10000.0);
  EXPECT_FLOAT_EQ(g.f("llama.attention.layer_norm_rms_epsilon"), 1e-5);
  EXPECT_EQ(g.s("tokenizer.ggml.model"), "llama");
  const auto& toks = std::get<std::vector<std::string>>(g.kv.at("tokenizer.ggml.tokens"));
  ASSERT_EQ(toks.size(), 300u);  // LLaMA's vocabulary cut to the model's 300 ids
  EXPECT_EQ(toks[1], "<s>");
  EXPECT_EQ(toks[3], "<0x00>");
  EXPECT_EQ(std::get<std::vector<double>>(g.kv.at("tokenizer.ggml.token_type"))[3], 6.0);  // byte
  EXPECT_EQ(std::get<std::vector<double>>(g.kv.at("tokenizer.ggml.scores")).size(), 300u);
  EXPECT_EQ(g.u("tokenizer.ggml.bos_token_id"), 1u);
  // Q: [6 heads * 16, 100]; GGUF row h*16 + 2i + s is HF row h*16 + s*8 + i.
  const auto& q = g.tensors.at("blk.1.attn_q.weight");
  EXPECT_EQ(q.ne, (std::vector<uint64_t>{100, 96}));
  EXPECT_EQ(q.type, 0u);
  const int d = c.head_dim();
  for (const auto& [name, heads, hf] : {std::tuple{"blk.1.attn_q.weight", c.num_heads, m.weights().layers[1].q_w},
                                        std::tuple{"blk.1.attn_k.weight", c.num_kv_heads, m.weights().layers[1].k_w}})
    for (int h = 0; h < heads; ++h)
      for (int i = 0; i < d / 2; ++i)
        for (int s = 0; s < 2; ++s)
          expect_rows(g.data(name) + (int64_t{h} * d + 2 * i + s) * 100, hf + (int64_t{h} * d + s * d / 2 + i) * 100,
                      100, std::string(name) + " head " + std::to_string(h) + " pair " + std::to_string(i));
  EXPECT_EQ(g.tensors.at("blk.2.attn_v.weight").ne, (std::vector<uint64_t>{100, 32}));
  EXPECT_EQ(g.tensors.at("blk.0.attn_output.weight").ne, (std::vector<uint64_t>{96, 100}));
  EXPECT_EQ(g.tensors.at("blk.0.ffn_gate.weight").ne, (std::vector<uint64_t>{100, 200}));
  EXPECT_EQ(g.tensors.at("blk.0.ffn_down.weight").ne, (std::vector<uint64_t>{200, 100}));
  expect_rows(g.data("blk.2.ffn_down.weight"), m.weights().layers[2].down_w, 200 * 100, "ffn_down");
  expect_rows(g.data("output.weight"), m.weights().lm_head, 300 * 100, "output");
  EXPECT_EQ(g.tensors.size(), 1u + 3u * 9u + 2u);
}

TEST(gguf_export, gpt2_fused_qkv_and_tied_head) {
  const auto m = config_model("gpt2-odd.config.json", 0);
  const auto g = exported(m, "gpt2");
  EXPECT_EQ(g.s("general.architecture"), "gpt2");
  expect_uints(g, {{"gpt2.embedding_length", 72}, {"gpt2.attention.head_count", 6},
                   {"gpt2.feed_forward_length", 200}, {"gpt2.context_length", 96}});
  EXPECT_FLOAT_EQ(g.f("gpt2.attention.layer_norm_epsilon"), 1e-5);
  EXPECT_EQ(g.s("tokenizer.ggml.model"), "gpt2");
  const auto& merges = std::get<std::vector<std::string>>(g.kv.at("tokenizer.ggml.merges"));
  EXPECT_EQ(merges.size(), 300u - 256u);  // the merges that make ids below the cut
  EXPECT_EQ(merges.front(), "\xC4\xA0 t");  // GPT-2's first merge, "Ġ t"
  const auto& l = m.weights().layers[1];
  EXPECT_EQ(g.tensors.at("blk.1.attn_qkv.weight").ne, (std::vector<uint64_t>{72, 216}));
  const float* qkv = g.data("blk.1.attn_qkv.weight");
  expect_rows(qkv, l.q_w, 72 * 72, "qkv q part");
  expect_rows(qkv + 72 * 72, l.k_w, 72 * 72, "qkv k part");
  expect_rows(qkv + 2 * 72 * 72, l.v_w, 72 * 72, "qkv v part");
  const float* bias = g.data("blk.1.attn_qkv.bias");
  expect_rows(bias + 72, l.k_b, 72, "qkv bias k part");
  EXPECT_EQ(g.tensors.at("position_embd.weight").ne, (std::vector<uint64_t>{72, 96}));
  EXPECT_EQ(g.tensors.count("output.weight"), 0u);  // tied: llama.cpp uses token_embd
  EXPECT_EQ(g.tensors.count("output_norm.bias"), 1u);
}

TEST(gguf_export, errors_name_what_does_not_fit_and_leave_no_file) {
  const std::string dir = make_temp_dir("gguf");
  const auto llama = config_model("llama-odd.config.json", 0);
  auto st = write_gguf(llama, tokenizer("gpt2"), dir + "/a.gguf");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("SentencePiece"), std::string::npos) << st.to_string();
  auto big = make_preset_decoder("llama-tiny");
  ASSERT_TRUE(big);
  auto small = bpe_tokenizer::from_vocab_merges(R"({"a": 0, "b": 1, "ab": 2})", "#version: 0.2\na b\n");
  ASSERT_TRUE(small);
  auto gpt = make_preset_decoder("gpt2-tiny");
  ASSERT_TRUE(gpt);
  st = write_gguf(*gpt, *small, dir + "/b.gguf");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("the tokenizer has 3 tokens but the model's vocab_size is 50257"), std::string::npos)
      << st.to_string();
  st = write_gguf(llama, tokenizer("llama"), dir + "/no/such/dir/c.gguf");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("cannot open"), std::string::npos) << st.to_string();
  EXPECT_TRUE(std::filesystem::is_empty(dir));
}

int run_tool(const std::string& args, std::string& out) {
  return test_support::run_tool(test_support::tool_path("tessera-models"), args, out, "2>&1");
}

TEST(gguf_export, command_line) {
  const std::string dir = make_temp_dir("gguf-cli"), out = dir + "/odd.gguf";
  std::string text;
  ASSERT_EQ(run_tool("export-gguf --config " + data_dir() + "/decoders/llama-tied.config.json --out " + out, text), 0) << text;
  EXPECT_NE(text.find("wrote " + out), std::string::npos) << text;
  const auto g = read_gguf(out);
  EXPECT_EQ(g.tensors.count("output.weight"), 0u);  // tied
  EXPECT_FLOAT_EQ(g.f("llama.rope.freq_base"), 500000.0);
  EXPECT_EQ(g.kv.count("llama.rope.scaling.type"), 0u);
  EXPECT_EQ(run_tool("export-gguf --model llama-tiny", text), 2);
  EXPECT_NE(text.find("give --out"), std::string::npos) << text;
  EXPECT_EQ(run_tool("export-gguf --model no-such-model --out " + dir + "/x.gguf", text), 2);
  EXPECT_EQ(run_tool("export-gguf --model gpt2-tiny --tokenizer llama --out " + dir + "/y.gguf", text), 2);
  EXPECT_NE(text.find("byte-level"), std::string::npos) << text;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.gguf") || std::filesystem::exists(dir + "/y.gguf"));
}

// tessera against llama.cpp on the same weights: prompt ids equal; greedy tokens equal step for step
// until the first step where tessera's top-2 margin is below 1e-3 and the two differ (a near tie
// that float rounding may break either way; the sequences part there).
TEST(gguf_oracle, llamacpp_prompt_ids_and_greedy_tokens) {
  set_num_threads(2);
  const auto g = nlohmann::json::parse(read_file(data_dir() + "/decoders/llamacpp_goldens.json"));
  ASSERT_GE(g["models"].size(), 5u);
  std::set<std::string> archs;
  for (const auto& [name, entry] : g["models"].items()) {
    decoder_model m;
    std::optional<bpe_tokenizer> tok;
    if (entry.contains("config")) {
      m = config_model(entry["config"].get<std::string>(), entry["seed"].get<uint64_t>());
    } else {
      auto p = make_preset_decoder(entry["preset"].get<std::string>(), entry["seed"].get<uint64_t>());
      ASSERT_TRUE(p) << p.error().to_string();
      m = std::move(*p);
      tok = tokenizer(entry["tokenizer"].get<std::string>());
    }
    archs.insert(std::string(m.shape().traits().gguf_arch) +
                 (m.shape().rope_scaling == rope_scaling_kind::llama3 ? " (llama3 rope_scaling)" : ""));
    size_t compared = 0, total = 0;
    for (const auto& p : entry["prompts"]) {
      const auto ids = p["ids"].get<std::vector<int32_t>>();
      if (tok) {
        auto mine = tok->encode(p["text"].get<std::string>());
        ASSERT_TRUE(mine) << mine.error().to_string();
        EXPECT_EQ(*mine, ids) << name << ": tessera's and llama.cpp's prompt ids of " << p["text"];
      }
      const auto want = p["tokens"].get<std::vector<int32_t>>();
      auto got = greedy_generate(m, ids, {.max_tokens = static_cast<int>(want.size())});
      ASSERT_TRUE(got) << got.error().to_string();
      ASSERT_EQ(got->tokens.size(), want.size());
      total += want.size();
      for (size_t i = 0; i < want.size(); ++i, ++compared) {
        if (got->tokens[i] == want[i]) continue;
        EXPECT_LT(got->top2_margin[i], 1e-3f) << name << " prompt " << p["ids"] << ": greedy step " << i << " is "
                                              << got->tokens[i] << ", llama.cpp's " << want[i];
        break;
      }
      EXPECT_GE(std::set<int32_t>(want.begin(), want.end()).size(), 8u) << name << ": generations vary";
    }
    EXPECT_GE(compared * 4, total * 3) << name << ": most steps must be comparable";
  }
  EXPECT_EQ(archs, (std::set<std::string>{"gpt2", "llama", "qwen2", "llama (llama3 rope_scaling)"}));
}

}  // namespace
}  // namespace tessera::models
