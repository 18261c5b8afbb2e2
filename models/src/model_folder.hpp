// What the BERT and decoder loaders share: the name they are given is a model folder or a preset;
// what the savers share: the folder and its config.json.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/common/status.hpp"
#include "tessera/models/shape.hpp"

namespace tessera::models::detail {

/// `name` is one of preset_names().
inline bool is_preset_name(std::string_view name) {
  for (const auto& n : preset_names())
    if (n == name) return true;
  return false;
}

/// not_found: `name` is neither a model folder (holding `files`) nor a `kind` (one of `known`).
inline status neither_folder_nor_preset(std::string_view name, std::string_view files, std::string_view kind,
                                        const std::vector<std::string>& known) {
  std::string list;
  for (const auto& n : known) list += (list.empty() ? "" : ", ") + n;
  return status::not_found("\"" + std::string(name) + "\" is neither a model folder (" + std::string(files) +
                           ") nor a " + std::string(kind) + " (" + list + ")");
}

/// Creates the folder `dir` (and its parents) and writes `config_json` into its config.json.
inline status start_model_folder(const std::filesystem::path& dir, const std::string& config_json) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return status::io_error(dir.string() + ": cannot create: " + ec.message());
  std::ofstream f(dir / "config.json");
  f << config_json;
  if (!f) return status::io_error((dir / "config.json").string() + ": write failed");
  return ok_status();
}

}  // namespace tessera::models::detail
