// tessera/timing/preset.hpp: hardware presets (IPU-like tile chips, GPUs) loaded from JSON data files.
//
// A preset is a data file in the presets folder (timing/presets/*.json, or $TESSERA_PRESETS_DIR),
// one object with "kind": "ipu" or "gpu", the numeric fields below, a "calibration" object, an
// optional "published" object (public peak figures, used by validation) and a "sources" object
// naming the public source of every value. Users add their own file and load it by name or path.
// A missing or mistyped field is an invalid_argument naming the file and the field; an unknown
// name is not_found and lists the known presets.
//
// Usage:
//   auto p = tessera::timing::load_ipu_preset("ipu-mk2");          // or a path to a .json file
//   if (!p) { std::cerr << p.error().to_string(); return 2; }
//   double peak = p->peak_flops_per_s(tessera::timing::dtype::fp16);   // ~250e12
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/timing/dtype.hpp"

namespace tessera::timing {

/// Fitted constants of the IPU cycle model (documented in docs/timing.md).
struct ipu_calibration {
  /// Cycles to start one compute set on a tile (vertex dispatch to the worker contexts, edge
  /// pointers, supervisor bookkeeping): the "fixed overhead" of every Poplar-style estimate.
  double compute_set_overhead_cycles = 0;
  /// Fraction of the AMP (matrix unit) peak that matmul inner loops sustain.
  double amp_efficiency = 1;
  /// Fraction of exchange_bytes_per_cycle a real exchange program sustains.
  double exchange_efficiency = 1;
  /// Bytes per cycle per tile of the vector datapath for elementwise kernels (64-bit loads: 8).
  double vector_bytes_per_cycle = 8;
};

/// Public figures: peaks, used only to check the preset (validation), and the device's power and
/// price, used only by cost and energy reports; never by the timing model.
struct published_figures {
  std::optional<double> fp16_flops_per_s;
  std::optional<double> fp32_flops_per_s;
  std::optional<double> memory_bytes;
  std::optional<double> exchange_bytes_per_s;
  std::optional<double> hbm_bytes_per_s;
  std::optional<double> tdp_watts;       ///< thermal design power of one device (board), W
  std::optional<double> list_price_usd;  ///< list price of one device (or its share of a system), USD
};

/// An IPU-like chip: Poplar's IPUModel parameters plus calibration.
struct ipu_preset {
  std::string name;                    ///< e.g. "ipu-mk2"
  std::string source_file;             ///< the JSON file it came from
  std::string description;
  int64_t tiles = 0;                   ///< tilesPerIPU
  int64_t memory_bytes_per_tile = 0;   ///< memoryBytesPerTile
  double clock_hz = 0;                 ///< tileClockFrequency
  double fp16_flops_per_cycle_per_tile = 0;  ///< AMP peak, fp16 in, fp32 accumulate
  double fp32_flops_per_cycle_per_tile = 0;  ///< AMP peak, fp32
  double exchange_bytes_per_cycle = 0;       ///< per tile link: exchangeBytesPerCycle
  int64_t global_sync_cycles = 0;            ///< globalSyncCycles, one per superstep
  int64_t worker_contexts = 0;               ///< numWorkerContexts
  ipu_calibration calibration;
  published_figures published;
  std::map<std::string, std::string> sources;  ///< field -> public source

  double peak_flops_per_s(dtype t) const;      ///< tiles x flops/cycle x clock
  double flops_per_cycle_per_tile(dtype t) const;
  int64_t memory_bytes() const { return tiles * memory_bytes_per_tile; }
  double exchange_bytes_per_s() const { return tiles * exchange_bytes_per_cycle * clock_hz; }
};

/// Fitted constants of the GPU roofline (documented in docs/timing.md).
struct gpu_calibration {
  double tensor_core_efficiency = 1;  ///< fraction of the fp16 tensor peak GEMMs sustain
  double fp32_efficiency = 1;         ///< fraction of the fp32 (non-tensor) peak
  double hbm_efficiency = 1;          ///< fraction of hbm_bytes_per_s a streaming kernel sustains
};

/// A GPU: roofline parameters plus calibration.
struct gpu_preset {
  std::string name;
  std::string source_file;
  std::string description;
  int64_t sms = 0;
  double clock_hz = 0;                 ///< boost clock
  double fp16_tensor_flops_per_s = 0;  ///< dense fp16 tensor-core peak (no sparsity)
  double fp32_flops_per_s = 0;         ///< fp32 CUDA-core peak (non-tensor)
  double hbm_bytes_per_s = 0;
  int64_t l2_bytes = 0;
  double launch_overhead_s = 0;        ///< fixed cost per kernel (launch + ramp-up/tail)
  bool fusion = false;                 ///< fuse epilogues, add+layer_norm and attention (TensorRT-like)
  gpu_calibration calibration;
  published_figures published;
  std::map<std::string, std::string> sources;

  /// Peak for GEMM-like work of type t (tensor cores for fp16, CUDA cores for fp32).
  double peak_flops_per_s(dtype t) const;
};

using hardware_preset = std::variant<ipu_preset, gpu_preset>;

/// The presets folder: $TESSERA_PRESETS_DIR if set, else the source folder compiled in.
std::filesystem::path presets_dir();
/// Names (file stems) of the *.json presets in `dir`, sorted.
std::vector<std::string> list_presets(const std::filesystem::path& dir = presets_dir());

/// Loads a preset by name (a file stem in presets_dir()) or by path (anything with a '/' or
/// ending in ".json").
result<hardware_preset> load_preset(std::string_view name_or_path);
/// As load_preset, but the preset must be of kind "ipu" (else invalid_argument).
result<ipu_preset> load_ipu_preset(std::string_view name_or_path);
/// As load_preset, but the preset must be of kind "gpu".
result<gpu_preset> load_gpu_preset(std::string_view name_or_path);
/// Parses preset JSON text; `origin` names the file in error messages.
result<hardware_preset> parse_preset(std::string_view json_text, const std::string& origin);

}  // namespace tessera::timing
