#include "tessera/exchange/fault_plan.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tessera::exchange {

namespace {
static_assert(static_cast<size_t>(fault_kind::kill_gpu) + 1 == fault_kind_count);
constexpr std::pair<fault_kind, const char*> kinds[] = {
    {fault_kind::kill, "kill"},       {fault_kind::stall, "stall"},         {fault_kind::slow, "slow"},
    {fault_kind::delay, "delay"},     {fault_kind::drop, "drop"},           {fault_kind::duplicate, "duplicate"},
    {fault_kind::reorder, "reorder"}, {fault_kind::corrupt, "corrupt"},     {fault_kind::partition, "partition"},
    {fault_kind::kill_gpu, "kill_gpu"}};
}  // namespace

std::string_view fault_kind_name(fault_kind k) {
  for (auto& [kind, name] : kinds)
    if (kind == k) return name;
  return "unknown";
}

bool applied_by_tile(fault_kind k) { return k != fault_kind::kill_gpu; }

std::string describe_fault_counts(const fault_counts& c) {
  std::string out;
  for (auto& [kind, name] : kinds)
    if (const uint64_t n = c[static_cast<size_t>(kind)])
      out += (out.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(n);
  return out.empty() ? "none" : out;
}

fault_plan fault_plan::for_tile(int tile) const {
  fault_plan p;
  p.seed = seed;
  for (const auto& f : faults) {
    if (!applied_by_tile(f.kind)) continue;
    if (f.kind == fault_kind::partition || f.tile == -1 || f.tile == tile) p.faults.push_back(f);
  }
  return p;
}

fault_plan fault_plan::tile_side() const {
  fault_plan p;
  p.seed = seed;
  for (const auto& f : faults)
    if (applied_by_tile(f.kind)) p.faults.push_back(f);
  return p;
}

fault_plan fault_plan::host_side() const {
  fault_plan p;
  p.seed = seed;
  for (const auto& f : faults)
    if (!applied_by_tile(f.kind)) p.faults.push_back(f);
  return p;
}

status fault_plan::check_tiles(int tiles) const {
  for (size_t i = 0; i < faults.size(); ++i) {
    const fault& f = faults[i];
    std::vector<int> named = f.tiles;
    if (applied_by_tile(f.kind)) named.push_back(f.tile);
    if (f.kind == fault_kind::delay) named.push_back(f.to);
    for (int t : named)
      if (t >= tiles)
        return status::invalid("fault " + std::to_string(i) + " (" + std::string(fault_kind_name(f.kind)) +
                               ") names tile " + std::to_string(t) + ", but the group has " + std::to_string(tiles) +
                               " tiles (0.." + std::to_string(tiles - 1) + ")");
  }
  return ok_status();
}

std::string fault_plan::to_json() const {
  nlohmann::json j;
  j["seed"] = seed;
  j["faults"] = nlohmann::json::array();
  for (const auto& f : faults) {
    nlohmann::json x{{"kind", std::string(fault_kind_name(f.kind))}, {"tile", f.tile}, {"to", f.to}, {"batch", f.batch},
                     {"batches", f.batches}, {"superstep", f.superstep}, {"seconds", f.seconds}, {"factor", f.factor},
                     {"ms", f.ms}, {"jitter_ms", f.jitter_ms}, {"fraction", f.fraction}, {"tiles", f.tiles}, {"gpu", f.gpu}};
    if (f.kind == fault_kind::delay) x["from"] = f.tile;
    j["faults"].push_back(x);
  }
  return j.dump();
}

result<fault_plan> parse_fault_plan(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& ex) {
    return status::invalid(std::string("fault plan is not valid JSON: ") + ex.what());
  }
  if (!j.is_object() || !j.contains("faults") || !j["faults"].is_array())
    return status::invalid("fault plan must be an object with a \"faults\" array");
  fault_plan p;
  try {
    if (j.contains("seed")) p.seed = j["seed"].get<uint64_t>();
    size_t index = 0;
    for (const auto& x : j["faults"]) {
      const std::string where = "fault " + std::to_string(index++);
      if (!x.is_object() || !x.contains("kind") || !x["kind"].is_string())
        return status::invalid(where + ": needs a \"kind\" string");
      fault f;
      const std::string kind = x["kind"].get<std::string>();
      bool known = false;
      for (auto& [k, name] : kinds)
        if (kind == name) f.kind = k, known = true;
      if (!known) {
        std::string names;
        for (auto& [k, name] : kinds) names += std::string(names.empty() ? "" : ", ") + name;
        return status::invalid(where + ": unknown kind '" + kind + "'; use one of " + names);
      }
      auto num = [&](const char* field, auto& out) -> status {
        if (!x.contains(field)) return ok_status();
        if (!x[field].is_number()) return status::invalid(where + " (" + kind + "): \"" + field + "\" must be a number");
        out = x[field].get<std::decay_t<decltype(out)>>();
        return ok_status();
      };
      TESSERA_RETURN_IF_ERROR(num("tile", f.tile));
      TESSERA_RETURN_IF_ERROR(num("from", f.tile));
      TESSERA_RETURN_IF_ERROR(num("to", f.to));
      TESSERA_RETURN_IF_ERROR(num("batch", f.batch));
      TESSERA_RETURN_IF_ERROR(num("batches", f.batches));
      TESSERA_RETURN_IF_ERROR(num("superstep", f.superstep));
      TESSERA_RETURN_IF_ERROR(num("seconds", f.seconds));
      TESSERA_RETURN_IF_ERROR(num("factor", f.factor));
      TESSERA_RETURN_IF_ERROR(num("ms", f.ms));
      TESSERA_RETURN_IF_ERROR(num("jitter_ms", f.jitter_ms));
      TESSERA_RETURN_IF_ERROR(num("fraction", f.fraction));
      TESSERA_RETURN_IF_ERROR(num("gpu", f.gpu));
      if (x.contains("tiles")) {
        if (!x["tiles"].is_array()) return status::invalid(where + ": \"tiles\" must be an array of tile ids");
        for (const auto& t : x["tiles"]) f.tiles.push_back(t.get<int>());
      }
      if (f.fraction < 0 || f.fraction > 1) return status::invalid(where + ": \"fraction\" must be within [0, 1]");
      if (f.seconds < 0 || f.ms < 0 || f.jitter_ms < 0 || f.batches < 1 || f.batch < 0 || f.superstep < 0)
        return status::invalid(where + ": durations, batches and supersteps must not be negative");
      if (f.kind == fault_kind::slow && f.factor < 1) return status::invalid(where + ": \"factor\" must be >= 1");
      if ((f.kind == fault_kind::kill || f.kind == fault_kind::stall) && f.tile < 0)
        return status::invalid(where + ": " + kind + " needs a \"tile\"");
      if (f.kind == fault_kind::stall && f.seconds <= 0)
        return status::invalid(where + ": stall needs \"seconds\" (> 0), how long the tile stays silent");
      if (f.kind == fault_kind::kill_gpu && (f.batch < 1 || f.gpu < 0))
        return status::invalid(where + ": kill_gpu needs a \"batch\" >= 1 (the GPU process dies once it answered that "
                               "many batches) and a \"gpu\" >= 0 (its --spawn-gpu index)");
      if (f.kind == fault_kind::partition && f.tiles.empty())
        return status::invalid(where + ": partition needs \"tiles\" (one side of the cut)");
      p.faults.push_back(f);
    }
  } catch (const std::exception& ex) {
    return status::invalid(std::string("fault plan: ") + ex.what());
  }
  return p;
}

result<fault_plan> load_fault_plan(const std::string& spec) {
  if (!spec.empty() && spec[0] == '{') return parse_fault_plan(spec);
  std::ifstream f(spec);
  if (!f) return status::not_found("cannot read fault plan file " + spec);
  std::stringstream ss;
  ss << f.rdbuf();
  auto p = parse_fault_plan(ss.str());
  if (!p) return p.error().with_context(spec);
  return p;
}

}  // namespace tessera::exchange
