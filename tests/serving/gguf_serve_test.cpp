// A GGUF file served end to end, from the user's side. `tessera-models export-gguf
// --chat-template-file` writes gpt2-tiny with ChatML's template and llama-tiny with Llama-3's,
// Llama-2-chat's and Zephyr's (tests/data/models/decoders/chat_templates); against
// chat_template_goldens.json (models/scripts/make_chat_template_goldens.sh: each file's template
// rendered by Jinja, the text tokenized by llama.cpp, llama.cpp's greedy tokens):
//  - the chat format tessera detects renders the Jinja text exactly (less the BOS text, which the
//    tokenizer adds), and the file's own tokenizer turns it into llama.cpp's prompt ids;
//  - the weights load_decoder reads from the file greedy-decode llama.cpp's tokens (up to a near tie);
//  - real tessera-serve (one process) and tessera-host (2 tile processes) started with --model x.gguf
//    answer /v1/chat/completions with the text their /v1/completions gives for llama.cpp's prompt ids,
//    prompt_tokens equal to their count, and the tiles' answers equal the one-process reference's;
//  - a truncated file, a lying header, a Q4_0 tensor and a missing x.gguf stop both programs at
//    start-up with a message naming the problem, before any tile or port.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/models/bpe_tokenizer.hpp"
#include "tessera/models/decoder.hpp"
#include "tessera/models/gguf_reader.hpp"
#include "tessera/serving/chat_template.hpp"
#include "tessera/test/child_process.hpp"
#include "tessera/test/json_post.hpp"

using namespace tessera;
using namespace tessera::test_support;
using json = nlohmann::json;

namespace {

std::string source_dir() {
  const char* s = std::getenv("TESSERA_SOURCE_DIR");
  return s ? s : TESSERA_TEST_SOURCE_DIR;
}
std::string data_dir() { return source_dir() + "/tests/data/models/decoders"; }

const json& goldens() {
  static const json g = json::parse(slurp(data_dir() + "/chat_template_goldens.json"));
  return g;
}

// The GGUF files of the goldens, written once per test binary by the real CLI into a temporary
// folder (removed at exit).
class gguf_files : public testing::Environment {
 public:
  static inline std::filesystem::path dir;
  void SetUp() override {
    dir = std::filesystem::temp_directory_path() / ("tessera-gguf-serve-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    for (const auto& [name, m] : goldens()["models"].items()) {
      auto r = run_to_end({bin("tessera-models"), "export-gguf", "--model", m["preset"].get<std::string>(), "--seed",
                           std::to_string(m["seed"].get<uint64_t>()), "--chat-template-file",
                           data_dir() + "/chat_templates/" + m["template_file"].get<std::string>(), "--out",
                           path(name)},
                          120);
      ASSERT_EQ(r.rc, 0) << r.out << r.err;
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  static std::string path(const std::string& name) { return (dir / (name + ".gguf")).string(); }
};
const auto* const env = testing::AddGlobalTestEnvironment(new gguf_files);

std::vector<serving::chat_message> messages_of(const json& j) {
  std::vector<serving::chat_message> out;
  for (const auto& m : j) out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  return out;
}

TEST(GgufChatTemplate, RendersAsJinjaAndTokenizesAsLlamaCpp) {
  ASSERT_EQ(goldens()["models"].size(), 4u);
  std::set<std::string> formats;
  for (const auto& [name, m] : goldens()["models"].items()) {
    auto tok = models::load_gguf_tokenizer(gguf_files::path(name));
    ASSERT_TRUE(tok) << tok.error().to_string();
    ASSERT_EQ(tok->chat_template(), m["template"].get<std::string>()) << name << ": the file's template, as written";
    const auto format = serving::detect_chat_format(tok->chat_template());
    formats.insert(std::string(serving::chat_format_name(format)));
    for (const auto& c : m["conversations"]) {
      std::string jinja = c["rendered"].get<std::string>();
      const std::string bos = m["bos_text"].get<std::string>();
      if (!bos.empty() && jinja.starts_with(bos)) jinja.erase(0, bos.size());  // tessera's tokenizer adds BOS
      const std::string mine = serving::render_chat(format, messages_of(c["messages"]));
      EXPECT_EQ(mine, jinja) << name << ": tessera's " << serving::chat_format_name(format) << " rendering vs Jinja's";
      auto ids = tok->encode(mine);
      ASSERT_TRUE(ids) << ids.error().to_string();
      EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << name << ": prompt ids vs llama.cpp's of " << c["rendered"];
    }
  }
  EXPECT_EQ(formats, (std::set<std::string>{"chatml", "llama3", "llama2", "zephyr"}));
}

// The file's weights against llama.cpp's greedy tokens on the same prompt ids: equal step for step
// until the first step where tessera's top-2 margin is below 1e-3 and the two differ (a near tie).
TEST(GgufChatTemplate, FileWeightsGreedyDecodeAsLlamaCpp) {
  for (const auto& [name, m] : goldens()["models"].items()) {
    auto model = models::load_decoder(gguf_files::path(name));
    ASSERT_TRUE(model) << model.error().to_string();
    for (const auto& c : m["conversations"]) {
      const auto want = c["tokens"].get<std::vector<int32_t>>();
      auto got = models::greedy_generate(*model, c["ids"].get<std::vector<int32_t>>(),
                                         {.max_tokens = static_cast<int>(want.size())});
      ASSERT_TRUE(got) << got.error().to_string();
      ASSERT_EQ(got->tokens.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        if (got->tokens[i] == want[i]) continue;
        EXPECT_LT(got->top2_margin[i], 1e-3f) << name << ": greedy step " << i << " is " << got->tokens[i]
                                              << ", llama.cpp's " << want[i];
        break;
      }
    }
  }
}

struct answer {
  std::string text;
  int prompt_tokens = -1, completion_tokens = -1;
};

// The chat answer to `messages` and the completion of `ids` by the server on `port` (greedy, 12
// tokens; the model id from /v1/models).
std::pair<answer, answer> ask(uint16_t port, const std::string& model_id, const json& messages, const json& ids) {
  std::pair<answer, answer> out;
  unsigned st = 0;
  json chat = post_json(port, "/v1/chat/completions",
                        {{"model", model_id}, {"messages", messages}, {"max_tokens", 12}, {"temperature", 0}}, &st);
  EXPECT_EQ(st, 200u) << chat.dump();
  if (st == 200u) {
    out.first.text = chat["choices"][0]["message"]["content"].get<std::string>();
    out.first.prompt_tokens = chat["usage"]["prompt_tokens"].get<int>();
    out.first.completion_tokens = chat["usage"]["completion_tokens"].get<int>();
  }
  json comp = post_json(port, "/v1/completions",
                        {{"model", model_id}, {"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}}, &st);
  EXPECT_EQ(st, 200u) << comp.dump();
  if (st == 200u) {
    out.second.text = comp["choices"][0]["text"].get<std::string>();
    out.second.prompt_tokens = comp["usage"]["prompt_tokens"].get<int>();
    out.second.completion_tokens = comp["usage"]["completion_tokens"].get<int>();
  }
  return out;
}

std::string served_model_id(uint16_t port) {
  http_connection c("127.0.0.1", port);
  auto j = json::parse(c.request("GET", "/v1/models").body, nullptr, false);
  return j.is_object() && j.contains("data") && !j["data"].empty() ? j["data"][0]["id"].get<std::string>() : "";
}

std::vector<std::string> serve_args(const std::string& gguf) {
  return {bin("tessera-serve"), "--model", gguf, "--port", "0", "--kv-blocks", "256"};
}
std::vector<std::string> host_args(const std::string& gguf) {
  return {bin("tessera-host"), "--model", gguf, "--tiles", "2", "--serve", "--port", "0", "--tile-memory", "128MiB",
          "--step-token-budget", "64", "--max-running", "8", "--kv-blocks", "128"};
}

TEST(GgufServe, ChatCompletionsFollowTheFileTemplateInOneProcessAndOnTiles) {
  // Every file in one process; ChatML on gpt2-tiny and Llama-2's template on llama-tiny on tiles too.
  for (const auto& [name, m] : goldens()["models"].items()) {
    const std::string gguf = gguf_files::path(name);
    served_process ref(serve_args(gguf));
    ASSERT_NE(ref.port(), 0) << name << ": " << ref.line();
    const std::string id = served_model_id(ref.port());
    EXPECT_EQ(id, name + ".gguf");
    std::vector<answer> ref_chats;
    for (const auto& c : m["conversations"]) {
      auto [chat, comp] = ask(ref.port(), id, c["messages"], c["ids"]);
      EXPECT_EQ(chat.text, comp.text) << name << ": the chat answer is the completion of llama.cpp's prompt ids";
      EXPECT_EQ(chat.prompt_tokens, static_cast<int>(c["ids"].size())) << name;
      EXPECT_EQ(comp.prompt_tokens, static_cast<int>(c["ids"].size())) << name;
      EXPECT_EQ(chat.completion_tokens, comp.completion_tokens) << name;
      EXPECT_GT(chat.completion_tokens, 0) << name;
      ref_chats.push_back(chat);
    }
    EXPECT_EQ(ref.stop(), 0);
    if (name != "gpt2-tiny-chatml" && name != "llama-tiny-llama2") continue;
    served_process tiles(host_args(gguf));
    ASSERT_NE(tiles.port(), 0) << name << ": " << tiles.line();
    size_t i = 0;
    for (const auto& c : m["conversations"]) {
      auto [chat, comp] = ask(tiles.port(), served_model_id(tiles.port()), c["messages"], c["ids"]);
      EXPECT_EQ(chat.text, ref_chats[i].text) << name << " conversation " << i << ": tiles vs one process";
      EXPECT_EQ(chat.prompt_tokens, ref_chats[i].prompt_tokens) << name;
      EXPECT_EQ(comp.text, chat.text) << name;
      ++i;
    }
    EXPECT_EQ(tiles.stop(), 0);
  }
}

// ---- Hostile and unsupported files at start-up.

std::string bytes_of(const std::string& path) { return slurp(path); }
void write_bytes(const std::string& path, const std::string& b) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(b.data(), static_cast<std::streamsize>(b.size()));
}

// The type field of tensor `tensor`'s info in GGUF `b` (after its name, n_dims and dims).
size_t tensor_type_offset(const std::string& b, const std::string& tensor) {
  const size_t at = b.find(tensor);
  if (at == std::string::npos) return std::string::npos;
  size_t pos = at + tensor.size();
  uint32_t dims = 0;
  std::memcpy(&dims, b.data() + pos, 4);
  return pos + 4 + 8 * dims;
}

TEST(GgufServe, HostileFilesStopBothProgramsAtStartUpNamingTheProblem) {
  const std::string good = bytes_of(gguf_files::path("llama-tiny-llama2"));
  ASSERT_GT(good.size(), 4096u);
  const auto dir = gguf_files::dir;
  struct bad {
    std::string file, says;
  };
  std::vector<bad> cases;
  write_bytes((dir / "truncated.gguf").string(), good.substr(0, good.size() / 2));
  cases.push_back({(dir / "truncated.gguf").string(), "truncated.gguf"});
  std::string lying = good;
  const uint64_t many = uint64_t{1} << 40;
  std::memcpy(lying.data() + 8, &many, 8);  // n_tensors
  write_bytes((dir / "lying.gguf").string(), lying);
  cases.push_back({(dir / "lying.gguf").string(), "lying.gguf"});
  std::string q4 = good;
  const size_t t = tensor_type_offset(q4, "blk.0.attn_q.weight");
  ASSERT_NE(t, std::string::npos);
  const uint32_t q4_0 = 2;
  std::memcpy(q4.data() + t, &q4_0, 4);
  write_bytes((dir / "q4.gguf").string(), q4);
  cases.push_back({(dir / "q4.gguf").string(), "Q4_0"});
  cases.push_back({(dir / "missing.gguf").string(), "missing.gguf"});
  for (const auto& c : cases) {
    for (bool host : {false, true}) {
      auto args = host ? host_args(c.file) : serve_args(c.file);
      auto r = run_to_end(args, 120);
      // tessera-serve exits 2 on any start-up error; tessera-host 2 for bad input, 1 for unsupported.
      if (host)
        EXPECT_TRUE(r.rc == 1 || r.rc == 2) << args[0] << " " << c.file << ": rc " << r.rc << ": " << r.out << r.err;
      else
        EXPECT_EQ(r.rc, 2) << args[0] << " " << c.file << ": " << r.out << r.err;
      EXPECT_NE(r.err.find(c.says), std::string::npos) << args[0] << " " << c.file << " must name " << c.says << ": "
                                                       << r.err;
      EXPECT_EQ(r.out.find("listening on"), std::string::npos) << r.out;
    }
  }
}

}  // namespace
