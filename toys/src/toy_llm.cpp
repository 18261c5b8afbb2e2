// The toy decoder and byte tokenizer. See toy_llm.hpp.
#include "tessera/toys/toy_llm.hpp"

#include <mutex>
#include <thread>

namespace tessera::toys {

using namespace tessera::serving;

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

constexpr uint64_t start_state = 0x746573736572610aULL;

uint64_t next_state(uint64_t prev, int32_t token, int32_t pos) {
  uint64_t s = mix(prev ^ mix(static_cast<uint64_t>(token) * 0x100000001b3ULL + static_cast<uint64_t>(pos)));
  return s == 0 ? 1 : s;  // 0 marks a position never written
}

std::vector<float> logits_of(uint64_t state, float bias) {
  std::vector<float> out(toy_llm_vocab);
  for (int32_t v = 0; v < toy_llm_vocab; ++v) {
    uint64_t h = mix(state + static_cast<uint64_t>(v) * 0x9e3779b97f4a7c15ULL);
    float x = static_cast<float>(h >> 40) / static_cast<float>(1 << 24) * 8.0f - 4.0f;
    if ((v >= 32 && v <= 126) || v == '\n') x += bias;
    out[static_cast<size_t>(v)] = x;
  }
  // EOS: a little less likely than a printable byte, so that greedy texts run a while.
  out[toy_llm_eos] = out[toy_llm_eos] * 0.5f + bias - 1.5f;
  return out;
}

// Byte tokens to UTF-8 text, holding back an incomplete character.
class byte_stream : public token_stream {
 public:
  std::string push(int32_t id) override {
    if (id < 0 || id > 255) return {};  // specials have no text
    pending_.push_back(static_cast<char>(id));
    return drain(false);
  }
  std::string flush() override { return drain(true); }

 private:
  static int length_of(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;  // a continuation byte or an invalid lead
  }
  static bool valid(const std::string& s, size_t at, int n) {
    auto b = [&](int i) { return static_cast<unsigned char>(s[at + static_cast<size_t>(i)]); };
    for (int i = 1; i < n; ++i)
      if ((b(i) & 0xC0) != 0x80) return false;
    if (n == 3 && ((b(0) == 0xE0 && b(1) < 0xA0) || (b(0) == 0xED && b(1) >= 0xA0))) return false;
    if (n == 4 && ((b(0) == 0xF0 && b(1) < 0x90) || (b(0) == 0xF4 && b(1) >= 0x90))) return false;
    return true;
  }
  std::string drain(bool all) {
    std::string out;
    size_t i = 0;
    while (i < pending_.size()) {
      int n = length_of(static_cast<unsigned char>(pending_[i]));
      if (n == 0) {
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      if (i + static_cast<size_t>(n) > pending_.size()) {
        // Incomplete: wait for more, unless what is there is already wrong.
        bool so_far = true;
        for (size_t j = i + 1; j < pending_.size(); ++j)
          so_far &= (static_cast<unsigned char>(pending_[j]) & 0xC0) == 0x80;
        if (so_far && !all) break;
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      if (!valid(pending_, i, n)) {
        out += "\xEF\xBF\xBD";
        ++i;
        continue;
      }
      out.append(pending_, i, static_cast<size_t>(n));
      i += static_cast<size_t>(n);
    }
    pending_.erase(0, i);
    return out;
  }
  std::string pending_;
};

class byte_tokenizer : public llm_tokenizer {
 public:
  result<std::vector<int32_t>> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    ids.reserve(text.size() + 1);
    if (add_special) ids.push_back(toy_llm_bos);
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    byte_stream s;
    std::string out;
    for (int32_t id : ids) out += s.push(id);
    return out + s.flush();
  }
  std::unique_ptr<token_stream> stream() const override { return std::make_unique<byte_stream>(); }
  std::string token_bytes(int32_t id) const override {
    return id >= 0 && id < 256 ? std::string(1, static_cast<char>(id)) : std::string();
  }
  int32_t bos_id() const override { return toy_llm_bos; }
  int32_t eos_id() const override { return toy_llm_eos; }
  int32_t vocab_size() const override { return toy_llm_vocab; }
};

}  // namespace

std::shared_ptr<const llm_tokenizer> make_byte_tokenizer() { return std::make_shared<byte_tokenizer>(); }

std::vector<float> toy_llm_logits(const std::vector<int32_t>& tokens, float printable_bias) {
  uint64_t s = start_state;
  for (size_t p = 0; p < tokens.size(); ++p) s = next_state(s, tokens[p], static_cast<int32_t>(p));
  return logits_of(s, printable_bias);
}

std::vector<int32_t> toy_llm_generate(std::vector<int32_t> prompt, int32_t new_tokens,
                                      bool stop_at_eos, float printable_bias) {
  uint64_t s = start_state;
  for (size_t p = 0; p < prompt.size(); ++p) s = next_state(s, prompt[p], static_cast<int32_t>(p));
  std::vector<int32_t> out;
  for (int32_t i = 0; i < new_tokens; ++i) {
    auto l = logits_of(s, printable_bias);
    int32_t t = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(t);
    if (stop_at_eos && t == toy_llm_eos) break;
    s = next_state(s, t, static_cast<int32_t>(prompt.size() + out.size() - 1));
  }
  return out;
}

std::shared_ptr<backends::step_fn_backend> make_toy_llm_backend(toy_llm_options o) {
  backends::llm_backend_info info{.name = o.name, .kind = "toy", .block_tokens = o.block_tokens,
                                  .num_blocks = o.num_blocks, .vocab_size = toy_llm_vocab,
                                  .max_positions = o.max_positions};
  auto cache = std::make_shared<std::vector<uint64_t>>(
      static_cast<size_t>(o.num_blocks) * static_cast<size_t>(o.block_tokens), 0);
  auto step = [o, cache](const backends::step_batch& batch) -> result<std::vector<std::vector<float>>> {
    std::vector<std::vector<float>> out;
    int64_t tokens = 0;
    const auto bt = static_cast<size_t>(o.block_tokens);
    for (const auto& s : batch.seqs) {
      auto slot = [&](int32_t pos) -> result<size_t> {
        size_t b = static_cast<size_t>(pos) / bt;
        if (b >= s.block_table.size())
          return status::invalid("sequence " + std::to_string(s.seq_id) + ": block table of " +
                                 std::to_string(s.block_table.size()) + " blocks too short for position " +
                                 std::to_string(pos));
        int32_t block = s.block_table[b];
        if (block < 0 || block >= o.num_blocks) return status::invalid("block id out of range");
        return static_cast<size_t>(block) * bt + static_cast<size_t>(pos) % bt;
      };
      if (s.start_pos < 0 || s.start_pos + static_cast<int64_t>(s.tokens.size()) > o.max_positions)
        return status::invalid("position beyond max_positions");
      uint64_t state = start_state;
      if (s.start_pos > 0) {
        auto at = slot(s.start_pos - 1);
        if (!at) return at.error();
        state = (*cache)[*at];
        if (state == 0)
          return status::invalid("sequence " + std::to_string(s.seq_id) + ": position " +
                                 std::to_string(s.start_pos - 1) + " not in the cache");
      }
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        int32_t t = s.tokens[i];
        if (t < 0 || t >= toy_llm_vocab) return status::invalid("token id out of range");
        int32_t pos = s.start_pos + static_cast<int32_t>(i);
        state = next_state(state, t, pos);
        auto at = slot(pos);
        if (!at) return at.error();
        (*cache)[*at] = state;
      }
      tokens += static_cast<int64_t>(s.tokens.size());
      if (s.want_logits) out.push_back(logits_of(state, o.printable_bias));
    }
    auto cost = o.per_step + o.per_token * tokens;
    if (cost.count() > 0) std::this_thread::sleep_for(cost);
    return out;
  };
  return std::make_shared<backends::step_fn_backend>(info, step);
}

}  // namespace tessera::toys
