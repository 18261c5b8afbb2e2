// Loading presets: JSON -> ipu_preset / gpu_preset, every error naming the file and the field.
#include "tessera/timing/preset.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#ifndef TESSERA_TIMING_DEFAULT_PRESETS_DIR
#define TESSERA_TIMING_DEFAULT_PRESETS_DIR "timing/presets"
#endif

namespace tessera::timing {
namespace {

using json = nlohmann::json;

// Reads fields of one JSON object; the first error sticks and names file, object path and field.
class field_reader {
 public:
  field_reader(const json& obj, std::string origin, std::string prefix)
      : obj_(obj), origin_(std::move(origin)), prefix_(std::move(prefix)) {}

  double number(const char* field, const char* what) {
    const json* v = find(field, what, "a number");
    if (v == nullptr) return 0;
    if (!v->is_number()) return type_error(field, what, "a number", *v), 0;
    double d = v->get<double>();
    if (!(d > 0)) fail(field, "must be > 0 (" + std::string(what) + "), got " + v->dump());
    return d;
  }
  int64_t integer(const char* field, const char* what) {
    const json* v = find(field, what, "an integer");
    if (v == nullptr) return 0;
    if (!v->is_number_integer() && !(v->is_number() && v->get<double>() == std::floor(v->get<double>())))
      return type_error(field, what, "an integer", *v), 0;
    int64_t i = v->get<int64_t>();
    if (i <= 0) fail(field, "must be > 0 (" + std::string(what) + "), got " + v->dump());
    return i;
  }
  bool boolean(const char* field, const char* what) {
    const json* v = find(field, what, "true or false");
    if (v == nullptr) return false;
    if (!v->is_boolean()) return type_error(field, what, "true or false", *v), false;
    return v->get<bool>();
  }
  std::optional<double> optional_number(const char* field) {
    auto it = obj_.find(field);
    if (it == obj_.end()) return std::nullopt;
    if (!it->is_number()) {
      type_error(field, "optional", "a number", *it);
      return std::nullopt;
    }
    return it->get<double>();
  }
  const status& error() const { return error_; }

 private:
  const json* find(const char* field, const char* what, const char* type) {
    auto it = obj_.find(field);
    if (it == obj_.end()) {
      fail(field, std::string("is missing; add it as ") + type + " (" + what + ")");
      return nullptr;
    }
    return &*it;
  }
  void type_error(const char* field, const char* what, const char* type, const json& v) {
    fail(field, std::string("has the wrong type (") + v.type_name() + " " + v.dump() + "); expected " +
                    type + " (" + what + ")");
  }
  void fail(const char* field, const std::string& msg) {
    if (!error_.ok()) return;
    error_ = status::invalid(origin_ + ": field '" + prefix_ + field + "' " + msg);
  }

  const json& obj_;
  std::string origin_;
  std::string prefix_;
  status error_;
};

const json& sub_object(const json& root, const char* key, const std::string& origin, status& err) {
  static const json empty = json::object();
  auto it = root.find(key);
  if (it == root.end()) {
    if (err.ok())
      err = status::invalid(origin + ": field '" + key + "' is missing; add it as an object");
    return empty;
  }
  if (!it->is_object()) {
    if (err.ok())
      err = status::invalid(origin + ": field '" + key + "' has the wrong type (" + it->type_name() +
                            "); expected an object");
    return empty;
  }
  return *it;
}

void read_common(const json& root, std::string& name, std::string& description,
                 std::map<std::string, std::string>& sources, published_figures& published,
                 const std::string& origin, const std::string& fallback_name, status& err) {
  name = root.value("name", fallback_name);
  description = root.value("description", "");
  if (auto it = root.find("sources"); it != root.end() && it->is_object()) {
    for (auto& [k, v] : it->items()) sources[k] = v.is_string() ? v.get<std::string>() : v.dump();
  }
  if (auto it = root.find("published"); it != root.end()) {
    if (!it->is_object()) {
      if (err.ok()) err = status::invalid(origin + ": field 'published' must be an object");
      return;
    }
    field_reader r(*it, origin, "published.");
    published.fp16_flops_per_s = r.optional_number("fp16_flops_per_s");
    published.fp32_flops_per_s = r.optional_number("fp32_flops_per_s");
    published.memory_bytes = r.optional_number("memory_bytes");
    published.exchange_bytes_per_s = r.optional_number("exchange_bytes_per_s");
    published.hbm_bytes_per_s = r.optional_number("hbm_bytes_per_s");
    published.tdp_watts = r.optional_number("tdp_watts");
    published.list_price_usd = r.optional_number("list_price_usd");
    if (err.ok()) err = r.error();
  }
}

// A preset of kind P: the fields every preset has, `fields(r, p)` read from the root, and
// `calibration(c, p.calibration)` from its "calibration" object, returning the efficiencies that
// must lie in (0, 1].
template <class P, class Fields, class Calibration>
result<hardware_preset> parse_kind(const json& root, const std::string& origin, const std::string& stem, Fields fields,
                                   Calibration calibration) {
  P p;
  p.source_file = origin;
  status err;
  read_common(root, p.name, p.description, p.sources, p.published, origin, stem, err);
  field_reader r(root, origin, "");
  fields(r, p);
  if (err.ok()) err = r.error();
  const json& cal = sub_object(root, "calibration", origin, err);
  field_reader c(cal, origin, "calibration.");
  const std::vector<double> efficiencies = calibration(c, p.calibration);
  if (err.ok()) err = c.error();
  if (err.ok() && std::any_of(efficiencies.begin(), efficiencies.end(), [](double e) { return e > 1; }))
    err = status::invalid(origin + ": calibration efficiencies must be in (0, 1]");
  if (!err.ok()) return err;
  return hardware_preset{std::move(p)};
}

result<hardware_preset> parse_ipu(const json& root, const std::string& origin, const std::string& stem) {
  return parse_kind<ipu_preset>(
      root, origin, stem,
      [](field_reader& r, ipu_preset& p) {
        p.tiles = r.integer("tiles", "tiles per chip");
        p.memory_bytes_per_tile = r.integer("memory_bytes_per_tile", "SRAM bytes per tile");
        p.clock_hz = r.number("clock_hz", "tile clock in Hz");
        p.fp16_flops_per_cycle_per_tile = r.number("fp16_flops_per_cycle_per_tile", "AMP fp16 FLOPs per cycle");
        p.fp32_flops_per_cycle_per_tile = r.number("fp32_flops_per_cycle_per_tile", "AMP fp32 FLOPs per cycle");
        p.exchange_bytes_per_cycle = r.number("exchange_bytes_per_cycle", "exchange bytes per cycle per tile");
        p.global_sync_cycles = r.integer("global_sync_cycles", "cycles of one chip-wide sync");
        p.worker_contexts = r.integer("worker_contexts", "worker threads per tile");
      },
      [](field_reader& c, ipu_calibration& cal) {
        cal.compute_set_overhead_cycles = c.number("compute_set_overhead_cycles", "cycles per compute set");
        cal.amp_efficiency = c.number("amp_efficiency", "fraction of AMP peak, 0..1");
        cal.exchange_efficiency = c.number("exchange_efficiency", "fraction of exchange peak, 0..1");
        cal.vector_bytes_per_cycle = c.number("vector_bytes_per_cycle", "vector datapath bytes per cycle");
        return std::vector<double>{cal.amp_efficiency, cal.exchange_efficiency};
      });
}

result<hardware_preset> parse_gpu(const json& root, const std::string& origin, const std::string& stem) {
  return parse_kind<gpu_preset>(
      root, origin, stem,
      [](field_reader& r, gpu_preset& p) {
        p.sms = r.integer("sms", "streaming multiprocessors");
        p.clock_hz = r.number("clock_hz", "boost clock in Hz");
        p.fp16_tensor_flops_per_s = r.number("fp16_tensor_flops_per_s", "dense fp16 tensor peak");
        p.fp32_flops_per_s = r.number("fp32_flops_per_s", "fp32 CUDA-core peak");
        p.hbm_bytes_per_s = r.number("hbm_bytes_per_s", "HBM bandwidth in bytes/s");
        p.l2_bytes = r.integer("l2_bytes", "L2 cache bytes");
        p.launch_overhead_s = r.number("launch_overhead_s", "fixed seconds per kernel");
        p.fusion = r.boolean("fusion", "fuse epilogues and attention, TensorRT-like");
      },
      [](field_reader& c, gpu_calibration& cal) {
        cal.tensor_core_efficiency = c.number("tensor_core_efficiency", "fraction of tensor peak, 0..1");
        cal.fp32_efficiency = c.number("fp32_efficiency", "fraction of fp32 peak, 0..1");
        cal.hbm_efficiency = c.number("hbm_efficiency", "fraction of HBM peak, 0..1");
        return std::vector<double>{cal.tensor_core_efficiency, cal.fp32_efficiency, cal.hbm_efficiency};
      });
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

}  // namespace

double ipu_preset::flops_per_cycle_per_tile(dtype t) const {
  return t == dtype::fp16 ? fp16_flops_per_cycle_per_tile : fp32_flops_per_cycle_per_tile;
}
double ipu_preset::peak_flops_per_s(dtype t) const {
  return static_cast<double>(tiles) * flops_per_cycle_per_tile(t) * clock_hz;
}
double gpu_preset::peak_flops_per_s(dtype t) const {
  return t == dtype::fp16 ? fp16_tensor_flops_per_s : fp32_flops_per_s;
}

std::filesystem::path presets_dir() {
  if (const char* env = std::getenv("TESSERA_PRESETS_DIR"); env != nullptr && *env != '\0') return env;
  return TESSERA_TIMING_DEFAULT_PRESETS_DIR;
}

std::vector<std::string> list_presets(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

result<hardware_preset> parse_preset(std::string_view json_text, const std::string& origin) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    return status::invalid(origin + ": not valid JSON: " + e.what());
  }
  if (!root.is_object()) return status::invalid(origin + ": a preset must be a JSON object");
  std::string stem = std::filesystem::path(origin).stem().string();
  auto kind = root.find("kind");
  if (kind == root.end() || !kind->is_string())
    return status::invalid(origin + ": field 'kind' is missing or not a string; add \"kind\": \"ipu\" or \"gpu\"");
  try {
    if (*kind == "ipu") return parse_ipu(root, origin, stem);
    if (*kind == "gpu") return parse_gpu(root, origin, stem);
  } catch (const json::exception& e) {
    return status::invalid(origin + ": " + e.what());
  }
  return status::invalid(origin + ": field 'kind' is " + kind->dump() + "; use \"ipu\" or \"gpu\"");
}

result<hardware_preset> load_preset(std::string_view name_or_path) {
  std::string arg(name_or_path);
  std::filesystem::path path;
  bool is_path = arg.find('/') != std::string::npos || arg.ends_with(".json");
  if (is_path) {
    path = arg;
  } else {
    path = presets_dir() / (arg + ".json");
  }
  std::ifstream in(path);
  if (!in) {
    if (is_path) return status::not_found("preset file " + path.string() + " cannot be opened");
    return status::not_found("unknown preset '" + arg + "' (no " + path.string() + "); known presets: " +
                             join(list_presets()) + "; or pass a path to a .json file, or set TESSERA_PRESETS_DIR");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_preset(ss.str(), path.string());
}

result<ipu_preset> load_ipu_preset(std::string_view name_or_path) {
  auto p = load_preset(name_or_path);
  if (!p) return p.error();
  if (auto* ipu = std::get_if<ipu_preset>(&*p)) return std::move(*ipu);
  return status::invalid("preset '" + std::string(name_or_path) + "' is a GPU preset; an IPU preset is needed here");
}

result<gpu_preset> load_gpu_preset(std::string_view name_or_path) {
  auto p = load_preset(name_or_path);
  if (!p) return p.error();
  if (auto* gpu = std::get_if<gpu_preset>(&*p)) return std::move(*gpu);
  return status::invalid("preset '" + std::string(name_or_path) + "' is an IPU preset; a GPU preset is needed here");
}

}  // namespace tessera::timing
