// apps/tessera-host: what tessera-host does once its options are parsed (main.cpp only parses and wires).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tessera/exchange/fault_plan.hpp"
#include "tessera/host/placement.hpp"
#include "tessera/host/tile_group.hpp"
#include "tessera/serving/serve_options.hpp"

namespace tessera::host::app {

struct demo_options {
  std::string demo = "matmul";
  int64_t m = 512, k = 256, n = 256;
  int reps = 3;
};
/// Runs a demo program on the group and checks it against a single-process reference.
int run_demo(tile_group& g, const demo_options& o);

struct model_options {
  std::string model;          ///< preset, Hugging Face folder or (decoders) GGUF file
  uint64_t seed = 0;          ///< preset weights
  models::dtype dtype = models::dtype::fp32;  ///< --dtype: BERT on tiles in fp32 or bf16
  std::optional<plan> forced;
  collective reduce = collective::automatic;  ///< --collective: how a decoder's lanes reduce
  bool serve = false;         ///< HTTP front door until SIGINT/SIGTERM
  int check_batches = 0;      ///< run N mixed batches against the reference and exit
  double check_bound = 0;     ///< --check-bound: decoders' logit bound instead of decoder_logit_bound's (0: derived)
  bool plan_only = false;     ///< --plan-only: print the plan, the plans that fit and the memory table; start no tile
  std::string trace_path;     ///< --trace: Chrome trace (+ summary) of the --check batches
  std::string timing_preset = "ipu-mk2";  ///< --preset: IPU preset of the modelled time in the trace
  int gpu_replicas = 0;       ///< in-process GPU-style backends beside the tiles (hybrid routing)
  std::vector<std::string> gpu_endpoints;  ///< running tessera-gpu processes (remote_backend)
  int spawn_gpu = 0;          ///< local tessera-gpu processes to launch (ipc), as GPU backends
  exchange::fault_plan gpu_faults;  ///< --faults' kill_gpu faults (host_faults.hpp)
  bool tile_faults = false;         ///< --faults gave the tiles a plan: report what they injected
  serving::serve_options so;
  /// Decoders: --seeded-shards generates every shard from the preset's seed as it is streamed
  /// (no model in this process: a model larger than the host's memory); --prompt-ids with
  /// --generate N greedily generates N tokens of one sequence on the tiles and reports times and
  /// memory (--results JSON, --logits raw float32), the 7B run's tile side (scripts/llm-7b).
  bool seeded_shards = false;
  std::vector<int32_t> prompt_ids;
  int generate_tokens = 0;
  std::string results_path, logits_path;
  /// Decoders: the engine's options; --kv-blocks is blocks per replica (0 = as many as the tiles
  /// hold, up to 16384 tokens in flight), --step-token-budget and --max-running shape the step program.
  serving::llm_serve_options lo;
};
/// Compiles the model onto the group (printing the plan and memory table), streams the
/// weights, then serves or checks.
int run_model(tile_group_config group_cfg, model_options o);

/// A decoder preset (gpt2-tiny, llama-tiny, ...), a Hugging Face folder of a GPT-2 or LLaMA model, or
/// a GGUF file (or a path ending .gguf: loading it says what is wrong).
bool is_decoder_model(const std::string& name);
/// run_model for decoders (decoder_runner.cpp): --check K generates K sequences of different
/// lengths, joining and leaving between steps, greedily on the tiles and compares every token
/// and its logits with the single-process reference.
int run_decoder_model(tile_group_config group_cfg, model_options o);

}  // namespace tessera::host::app
