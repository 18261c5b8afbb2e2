// tessera-timing: prints the timing model's validation table, or estimates one BERT batch on a preset.
//
//   tessera-timing --validate
//   tessera-timing --preset a100-40gb --model-shape bert-base --batch 32 --seq 128 --dtype fp16
//   tessera-timing --preset ipu-c600 --seq-lens 384,200,17 --tiles-used 1472 --tp-width 736
//   tessera-timing --preset ipu-mk2 --batch 8 --seq 128 --format json
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <variant>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "tessera/common/cli.hpp"
#include "tessera/timing/anchors.hpp"
#include "tessera/timing/bert_model.hpp"
#include "tessera/timing/estimator.hpp"
#include "tessera/timing/llm_validation.hpp"
#include "tessera/timing/preset.hpp"
#include "tessera/timing/superstep.hpp"
#include "tessera/timing/validation.hpp"

namespace po = boost::program_options;
using namespace tessera::timing;

namespace {

int fail(const tessera::status& s) { return tessera::exit_refused(s.to_string(), "tessera-timing"); }

tessera::result<std::vector<int64_t>> parse_lens(const std::string& csv) {
  std::vector<int64_t> lens;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      lens.push_back(std::stoll(item));
    } catch (const std::exception&) {
      return tessera::status::invalid("--seq-lens: '" + item + "' is not an integer; pass e.g. 128,64,300");
    }
  }
  return lens;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description opts("tessera-timing: modelled device time of BERT batches on hardware presets");
  opts.add_options()("help", "show this help")("validate", "print the calibration and held-out validation tables (markdown) and exit")(
      "validate-llm", "print the LLM step model against published LLM figures (all held out; markdown) and exit")(
      "list-presets", "list the presets in the presets folder")("list-kernels", "list the registered kernel estimators")(
      "preset", po::value<std::string>(), "preset name (in $TESSERA_PRESETS_DIR or the built-in folder) or path")(
      "model-shape", po::value<std::string>()->default_value("bert-base"), "bert-tiny ... bert-large")(
      "batch", po::value<int64_t>()->default_value(1), "sequences in the batch")(
      "seq", po::value<int64_t>()->default_value(128), "sequence length of every sequence")(
      "seq-lens", po::value<std::string>(), "comma-separated lengths (overrides --batch/--seq)")(
      "pad-to", po::value<int64_t>()->default_value(0), "IPU: pad every sequence to this length (0: packed)")(
      "dtype", po::value<std::string>()->default_value("fp16"), "fp16 or fp32")(
      "tiles-used", po::value<int64_t>()->default_value(0), "IPU: tiles in use (0: all)")(
      "tp-width", po::value<int64_t>()->default_value(0), "IPU: tiles per model copy (0: tiles-used)")(
      "emulated-tiles", po::value<int64_t>()->default_value(0), "IPU: also print the share N emulated tiles model")(
      "ops", "print the per-kernel breakdown")(
      "format", po::value<std::string>()->default_value("text"), "text or json");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const std::exception& e) {
    std::cerr << "tessera-timing: " << e.what() << "; see --help\n";
    return 2;
  }
  if (vm.count("help") || argc == 1) {
    std::cout << opts << "\npresets folder: " << presets_dir().string() << "\n";
    return 0;
  }
  const std::string format = vm["format"].as<std::string>();
  if (format != "text" && format != "json")
    return fail(tessera::status::invalid("--format must be text or json, got '" + format + "'"));
  const bool json_out = format == "json";
  if (vm.count("validate-llm")) {
    auto rep = validate_llm_timing();
    if (!rep) return fail(rep.error());
    std::cout << "# tessera timing model: LLM figures (held out)\n\n" << llm_validation_markdown(*rep);
    return 0;
  }
  if (vm.count("validate")) {
    auto rep = validate_timing_model();
    if (!rep) return fail(rep.error());
    if (!json_out) {
      std::cout << "# tessera timing model: calibration and held-out validation\n\nanchors: " << anchors_path().string()
                << "\n\n"
                << validation_report_markdown(*rep);
      return 0;
    }
    auto table = [](const std::vector<validation_row>& rows) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& r : rows)
        out.push_back({{"case", r.name}, {"unit", r.unit}, {"model", r.model}, {"reference", r.reference},
                       {"error_percent", r.error_percent()}, {"tolerance_percent", r.tolerance_percent},
                       {"within_tolerance", r.within_tolerance()}, {"source", r.source}});
      return out;
    };
    nlohmann::json loo = nlohmann::json::array();
    for (const auto& l : rep->leave_one_out)
      loo.push_back({{"left_out", l.left_out}, {"tensor_core_efficiency", l.fit.tensor_core_efficiency},
                     {"launch_overhead_s", l.fit.launch_overhead_s}, {"left_out_error_percent", l.left_out_error_percent},
                     {"held_out_max_abs_error_percent", l.held_out_max_abs_error_percent}});
    nlohmann::json out = {
        {"anchors", anchors_path().string()},
        {"fitted", {{"a100-40gb", {{"tensor_core_efficiency", rep->a100_fit.tensor_core_efficiency},
                                   {"launch_overhead_s", rep->a100_fit.launch_overhead_s},
                                   {"calibration_rows", rep->a100_fit.rows_used}}},
                    {"ipu-c600", {{"amp_efficiency", rep->ipu_amp_fit}}}}},
        {"calibration", table(rep->calibration)},
        {"held_out", table(rep->held_out)},
        {"leave_one_out", loo},
        {"preset_checks", table(rep->preset_checks)}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  if (vm.count("list-presets")) {
    for (const auto& n : list_presets()) std::cout << n << "\n";
    return 0;
  }
  if (vm.count("list-kernels")) {
    const auto& r = estimator_registry::builtin();
    for (const auto& n : r.names()) std::cout << n << " (" << (*r.find(n))->params << ")\n";
    return 0;
  }
  if (!vm.count("preset")) return fail(tessera::status::invalid("pass --preset NAME (see --list-presets) or --validate"));

  auto preset = load_preset(vm["preset"].as<std::string>());
  if (!preset) return fail(preset.error());
  auto shape = tessera::models::shape_preset(vm["model-shape"].as<std::string>());
  if (!shape) return fail(shape.error());
  auto type = parse_dtype(vm["dtype"].as<std::string>());
  if (!type) return fail(type.error());
  bert_batch batch = bert_batch::uniform(vm["batch"].as<int64_t>(), vm["seq"].as<int64_t>());
  if (vm.count("seq-lens")) {
    auto lens = parse_lens(vm["seq-lens"].as<std::string>());
    if (!lens) return fail(lens.error());
    batch.seq_lens = *lens;
  }
  batch.pad_to = vm["pad-to"].as<int64_t>();
  if (auto s = batch.validate(); !s.ok()) return fail(s);

  if (auto* gpu = std::get_if<gpu_preset>(&*preset)) {
    auto est = model_gpu_batch(*gpu, *shape, batch, *type);
    if (!est) return fail(est.error());
    if (json_out) {
      nlohmann::json out = {{"preset", gpu->name}, {"kind", "gpu"}, {"model_shape", shape->name},
                            {"dtype", dtype_name(*type)}, {"sequences", batch.seq_lens.size()},
                            {"padded_to", batch.padded_to_longest().pad_to}, {"fused", est->fused},
                            {"seconds", est->seconds}, {"launches", est->launches}, {"flops", est->flops},
                            {"hbm_bytes", est->hbm_bytes},
                            {"sequences_per_s", double(batch.seq_lens.size()) / est->seconds}};
      if (vm.count("ops"))
        for (const auto& k : est->kernels)
          out["kernels"].push_back({{"name", k.name}, {"seconds", k.seconds}, {"memory_bound", k.memory_bound}});
      std::cout << out.dump(2) << "\n";
      return 0;
    }
    std::printf("%s on %s, %zu sequences padded to %lld, %s%s\n", shape->name.c_str(), gpu->name.c_str(),
                batch.seq_lens.size(), (long long)batch.padded_to_longest().pad_to, std::string(dtype_name(*type)).c_str(),
                est->fused ? ", fused kernels" : ", unfused");
    std::printf("modelled time: %.3f ms (%lld launches, %.1f GFLOP, %.1f MB HBM)\n", est->seconds * 1e3,
                (long long)est->launches, est->flops / 1e9, est->hbm_bytes / 1e6);
    std::printf("throughput: %.0f sequences/s\n", double(batch.seq_lens.size()) / est->seconds);
    if (vm.count("ops"))
      for (const auto& k : est->kernels)
        std::printf("  %-28s %9.2f us %s\n", k.name.c_str(), k.seconds * 1e6, k.memory_bound ? "memory" : "compute");
    return 0;
  }
  const auto& ipu = std::get<ipu_preset>(*preset);
  ipu_mapping m{vm["tiles-used"].as<int64_t>(), vm["tp-width"].as<int64_t>()};
  auto est = model_ipu_batch(ipu, *shape, batch, *type, m);
  if (!est) return fail(est.error());
  if (json_out) {
    nlohmann::json out = {{"preset", ipu.name}, {"kind", "ipu"}, {"model_shape", shape->name},
                          {"dtype", dtype_name(*type)}, {"sequences", batch.seq_lens.size()},
                          {"padded_to", batch.pad_to}, {"seconds", est->seconds}, {"compute_s", est->compute_s},
                          {"sync_s", est->sync_s}, {"exchange_s", est->exchange_s}, {"supersteps", est->supersteps},
                          {"groups", est->groups}, {"tensor_parallel_width", est->tensor_parallel_width},
                          {"tiles_used", est->tiles_used}, {"memory_bytes_per_tile", est->memory_bytes_per_tile},
                          {"note", est->note}, {"sequences_per_s", double(batch.seq_lens.size()) / est->seconds}};
    if (int64_t n = vm["emulated-tiles"].as<int64_t>(); n > 0) {
      auto share = make_tile_share(ipu, n);
      if (!share) return fail(share.error());
      out["tile_share"] = {{"emulated_tiles", n}, {"physical_per_emulated", share->physical_per_emulated},
                           {"note", share->note}};
    }
    if (vm.count("ops"))
      for (const auto& o : est->ops)
        out["supersteps_detail"].push_back({{"kernel", o.kernel}, {"plan", o.plan}, {"compute_cycles", o.compute_cycles},
                                            {"sync_cycles", o.sync_cycles}, {"exchange_cycles", o.exchange_cycles}});
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%s\n", est->note.c_str());
  std::printf("modelled time: %.3f ms (compute %.3f, sync %.3f, exchange %.3f)\n", est->seconds * 1e3,
              est->compute_s * 1e3, est->sync_s * 1e3, est->exchange_s * 1e3);
  std::printf("throughput: %.0f sequences/s\n", double(batch.seq_lens.size()) / est->seconds);
  if (int64_t n = vm["emulated-tiles"].as<int64_t>(); n > 0) {
    auto share = make_tile_share(ipu, n);
    if (!share) return fail(share.error());
    std::printf("%s\n", share->note.c_str());
  }
  if (vm.count("ops"))
    for (const auto& o : est->ops)
      std::printf("  %-12s %-26s compute %9.0f  sync %5.0f  exchange %8.0f cycles\n", o.kernel.c_str(), o.plan.c_str(),
                  o.compute_cycles, o.sync_cycles, o.exchange_cycles);
  return 0;
}
