// tessera-bench-decoder-tiles: decoders on N tile processes (tensor-parallel width W = N, or a
// forced plan): prefill tokens/s, decode tokens/s at batch 1 and 32, and per generated token the
// supersteps, barriers and bytes exchanged, with what the barriers alone cost at a ZeroMQ round
// trip each (--sync-us, ~125 us here). Prints one table.
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "tessera/host/tile_decoder.hpp"
#include "tessera/models/batch.hpp"
#include "tessera/common/cli.hpp"

namespace po = boost::program_options;
using namespace tessera;
using namespace tessera::host;

namespace {

struct row {
  std::string model, plan, phase;
  double tokens_per_s = 0, ms_per_step = 0, supersteps = 0, barriers = 0, kib_per_token = 0;
};

// Sequences of `prompt` tokens, prefilled in one step each round (blocks from `next_block`).
models::step_batch prefill_batch(int seqs, int prompt, int vocab, int block_tokens, int first_block, uint64_t seed) {
  models::splitmix64 rng(seed);
  models::step_batch b;
  const int per_seq = (prompt + 64 + block_tokens - 1) / block_tokens;
  for (int s = 0; s < seqs; ++s) {
    models::seq_step st;
    st.seq_id = static_cast<uint64_t>(s);
    for (int k = 0; k < prompt; ++k) st.tokens.push_back(static_cast<int32_t>(rng.uniform(0, vocab - 1)));
    for (int k = 0; k < per_seq; ++k) st.block_table.push_back(first_block + s * per_seq + k);
    b.seqs.push_back(std::move(st));
  }
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models_list{"llama-tiny", "gpt2-tiny"};
  std::vector<int> tiles_list{1, 2, 4};
  std::vector<int> batches{1, 32};
  int prompt = 128, decode_steps = 32, prefill_seqs = 4;
  double sync_us = 125;
  std::string memory = "256MiB";
  po::options_description opts("tessera-bench-decoder-tiles: decoders on tile processes");
  opts.add_options()("help,h", "show this help")
      ("model", po::value(&models_list)->multitoken(), "decoder presets")
      ("tiles", po::value(&tiles_list)->multitoken(), "tile counts (plan 1,1,N: tensor-parallel width N)")
      ("batch", po::value(&batches)->multitoken(), "decode batch sizes")
      ("prompt", po::value(&prompt)->default_value(prompt), "prefill tokens per sequence")
      ("prefill-seqs", po::value(&prefill_seqs)->default_value(prefill_seqs), "sequences per prefill step")
      ("decode-steps", po::value(&decode_steps)->default_value(decode_steps), "decode steps measured")
      ("sync-us", po::value(&sync_us)->default_value(sync_us), "cost of one barrier (a ZeroMQ round trip)");
  po::variables_map vm;
  if (auto done = tessera::parse_command_line("tessera-bench-decoder-tiles", argc, argv, opts, vm)) return *done;
  std::vector<row> rows;
  for (const auto& name : models_list) {
    auto loaded = models::load_decoder(name);
    if (!loaded) return std::cerr << loaded.error().to_string() << "\n", 1;
    auto model = std::make_shared<const models::decoder_model>(std::move(*loaded));
    const int vocab = model->shape().vocab_size;
    for (int n : tiles_list) {
      placement_request req;
      req.tiles = n;
      req.tile_memory = 256ull << 20;
      req.token_budget = std::max(prompt * prefill_seqs, 64);
      int max_b = 1;
      for (int b : batches) max_b = std::max(max_b, b);
      req.max_sequences = std::max(max_b, prefill_seqs);
      req.forced = plan{1, 1, n, 1};
      req.kv_blocks = 2048;
      auto c = compile_decoder(model->shape(), req);
      if (!c) return std::cerr << c.error().to_string() << "\n", 1;
      tile_group_config g;
      g.tiles = static_cast<uint32_t>(n);
      g.tile_memory = req.tile_memory;
      auto group = tile_group::start(g);
      if (!group) return std::cerr << group.error().to_string() << "\n", 1;
      auto dec = tile_decoder::deploy(**group, std::move(*c), model);
      if (!dec) return std::cerr << dec.error().to_string() << "\n", 1;
      const auto& cm = (*dec)->compiled();
      const std::string plan_text = "W=" + std::to_string(n);
      // Prefill: prefill_seqs x prompt tokens in one step, three times (the first warms up).
      {
        row r{name, plan_text, "prefill " + std::to_string(prefill_seqs) + "x" + std::to_string(prompt)};
        double wall = 0;
        uint64_t bytes = 0;
        for (int rep = 0; rep < 3; ++rep) {
          auto b = prefill_batch(prefill_seqs, prompt, vocab, cm.kv.block_tokens, 0, 100 + rep);
          const auto t0 = std::chrono::steady_clock::now();
          auto out = (*dec)->step(0, b);
          if (!out) return std::cerr << out.error().to_string() << "\n", 1;
          if (rep == 0) continue;
          wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          bytes += out->bytes_exchanged;
        }
        const double tokens = 2.0 * prefill_seqs * prompt;
        r.tokens_per_s = tokens / wall;
        r.ms_per_step = wall / 2 * 1e3;
        r.supersteps = cm.supersteps();
        r.barriers = cm.barriers();
        r.kib_per_token = bytes / 1024.0 / tokens;
        rows.push_back(r);
      }
      for (int B : batches) {
        // B sequences of 16 prompt tokens, prefilled, then decode_steps steps of B decode tokens.
        auto b = prefill_batch(B, 16, vocab, cm.kv.block_tokens, 0, 7);
        auto out = (*dec)->step(0, b);
        if (!out) return std::cerr << out.error().to_string() << "\n", 1;
        std::vector<int32_t> pos(static_cast<size_t>(B), 16);
        double wall = 0;
        uint64_t bytes = 0;
        for (int s = 0; s < decode_steps + 1; ++s) {
          models::step_batch d;
          for (int i = 0; i < B; ++i) {
            auto st = b.seqs[static_cast<size_t>(i)];
            st.tokens = {static_cast<int32_t>((s * 31 + i) % vocab)};
            st.start_pos = pos[static_cast<size_t>(i)]++;
            d.seqs.push_back(std::move(st));
          }
          const auto t0 = std::chrono::steady_clock::now();
          auto o = (*dec)->step(0, d);
          if (!o) return std::cerr << o.error().to_string() << "\n", 1;
          if (s == 0) continue;  // warm-up
          wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          bytes += o->bytes_exchanged;
        }
        row r{name, plan_text, "decode B=" + std::to_string(B)};
        const double tokens = double(B) * decode_steps;
        r.tokens_per_s = tokens / wall;
        r.ms_per_step = wall / decode_steps * 1e3;
        r.supersteps = double(cm.supersteps()) / B;
        r.barriers = double(cm.barriers()) / B;
        r.kib_per_token = bytes / 1024.0 / tokens;
        rows.push_back(r);
      }
      (*group)->shutdown();
    }
  }
  std::printf("| model | plan | phase | tokens/s | ms/step | supersteps/token | barriers/token | KiB exchanged/token | "
              "barrier floor/step (x %.0f us) | share of step |\n|---|---|---|---|---|---|---|---|---|---|\n", sync_us);
  for (const auto& r : rows) {
    const bool prefill = r.phase.rfind("prefill", 0) == 0;
    const double barriers_step = prefill ? r.barriers : r.barriers * std::stod(r.phase.substr(r.phase.find('=') + 1));
    const double floor_ms = barriers_step * sync_us / 1e3;
    std::printf("| %s | %s | %s | %.0f | %.2f | %s | %s | %.2f | %.2f ms | %.0f%% |\n", r.model.c_str(), r.plan.c_str(),
                r.phase.c_str(), r.tokens_per_s, r.ms_per_step,
                prefill ? ("per step " + std::to_string(static_cast<int>(r.supersteps))).c_str()
                        : std::to_string(r.supersteps).substr(0, 5).c_str(),
                prefill ? ("per step " + std::to_string(static_cast<int>(r.barriers))).c_str()
                        : std::to_string(r.barriers).substr(0, 5).c_str(),
                r.kib_per_token, floor_ms, 100.0 * floor_ms / r.ms_per_step);
  }
  return 0;
}
