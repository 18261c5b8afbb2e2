// libFuzzer target over the decoders' inputs from outside: the first byte picks what the rest is.
//   0: a config.json text -> parse_decoder_config_json; a parsed shape writes a config.json that
//      parses back to the same text.
//   1: a safetensors file (in a memfd) -> map_safetensors -> decoder_model::bind to a tiny LLaMA
//      shape: an error or a model, never a crash.
//   2: a step batch for a tiny GPT-2 or LLaMA (GQA, explicit head_dim) over a small paged cache:
//      step() succeeds exactly when an independent check says the batch is valid, and then
//      returns one finite logits row per sequence that wants them.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tessera/models/decoder.hpp"
#include "tessera/models/kernels.hpp"
#include "tessera/models/safetensors.hpp"
#include "../models/step_oracle.hpp"

using namespace tessera::models;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "decoder_fuzz: %s\n", what.c_str());
  std::abort();
}

model_shape tiny(architecture a) {
  model_shape s = *shape_preset(a == architecture::gpt2 ? "gpt2-tiny" : "llama-tiny");
  s.name = "fuzz";
  s.num_layers = 1;
  s.hidden_size = 20;
  s.num_heads = a == architecture::gpt2 ? 4 : 6;
  s.num_kv_heads = a == architecture::gpt2 ? 4 : 2;
  s.explicit_head_dim = a == architecture::gpt2 ? 0 : 4;
  s.intermediate_size = 24;
  s.vocab_size = 40;
  s.max_position_embeddings = 40;
  s.bos_token_id = s.eos_token_id = 1;
  return s;
}

struct reader {
  const uint8_t* p;
  size_t n;
  int next(int lo, int hi) {  // inclusive; 0-filled past the end
    const int v = n ? *p++ : 0;
    if (n) --n;
    return lo + v % (hi - lo + 1);
  }
};

void fuzz_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto s = parse_decoder_config_json(text);
  if (!s) return;
  const std::string out = decoder_config_json(*s);
  auto back = parse_decoder_config_json(out);
  if (!back) fail("a parsed config does not parse back: " + back.error().to_string());
  if (decoder_config_json(*back) != out) fail("config round trip changed the text");
}

void fuzz_safetensors(const uint8_t* data, size_t size) {
  const int fd = memfd_create("decoder_fuzz", MFD_CLOEXEC);
  if (fd < 0) return;
  if (size && ::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return;
  }
  auto st = map_safetensors("/proc/self/fd/" + std::to_string(fd));
  ::close(fd);
  if (!st) return;
  static const model_shape shape = tiny(architecture::llama);
  auto m = decoder_model::bind(shape, st->tensors, st->storage, "fuzz.safetensors");
  if (m) {
    auto l = m->full_logits({1, 2, 3});
    if (!l || l->size() != 3) fail("a bound model's full_logits failed");
  }
}

void fuzz_step(const uint8_t* data, size_t size) {
  static const decoder_model models[2] = {*make_seeded_decoder(tiny(architecture::gpt2)),
                                          *make_seeded_decoder(tiny(architecture::llama))};
  static paged_kv_cache caches[2] = {*paged_kv_cache::make(models[0].shape(), {4, 8}),
                                     *paged_kv_cache::make(models[1].shape(), {4, 8})};
  reader r{data, size};
  const int which = r.next(0, 1);
  const auto& m = models[which];
  const auto& c = m.shape();
  const int bt = 4, nblocks = 8;
  step_batch b;
  bool valid = true;
  size_t wants = 0;
  for (int s = r.next(0, 3); s > 0; --s) {
    seq_step st;
    st.seq_id = static_cast<uint64_t>(s);
    const int n = r.next(0, 6);
    for (int i = 0; i < n; ++i) st.tokens.push_back(r.next(-1, c.vocab_size));
    st.start_pos = r.next(-1, c.max_position_embeddings);
    for (int i = r.next(0, 11); i > 0; --i) st.block_table.push_back(r.next(-1, nblocks));
    st.want_logits = r.next(0, 3) != 0;
    valid = valid && testing::step_entry_valid(st, c, bt, nblocks);
    wants += st.want_logits;
    b.seqs.push_back(std::move(st));
  }
  auto out = m.step(b, caches[which]);
  if (static_cast<bool>(out) != valid)
    fail(std::string("step ") + (out ? "accepted an invalid batch" : "refused a valid batch: " + out.error().to_string()));
  if (!out) return;
  if (out->size() != wants) fail("wrong number of logits rows");
  for (const auto& l : *out) {
    if (static_cast<int>(l.size()) != c.vocab_size) fail("a logits row of the wrong size");
    for (float v : l)
      if (!std::isfinite(v)) fail("a non-finite logit");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool once = (set_num_threads(1), true);
  (void)once;
  if (size == 0) return 0;
  switch (data[0] % 3) {
    case 0: fuzz_config(data + 1, size - 1); break;
    case 1: fuzz_safetensors(data + 1, size - 1); break;
    default: fuzz_step(data + 1, size - 1); break;
  }
  return 0;
}
