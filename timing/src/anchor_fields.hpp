// What the two anchor tables (anchors.cpp: BERT, llm_validation.cpp: LLM) share when they read a
// row: its text fields.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "tessera/common/status.hpp"

namespace tessera::timing::detail {

/// Each named field of the row `j` into its string: present, a string, not empty; else an error
/// "<where>: field '<name>' is missing or not a non-empty string".
inline status read_text_fields(const nlohmann::json& j, const std::string& where,
                               std::initializer_list<std::pair<const char*, std::string*>> fields) {
  for (auto [key, out] : fields) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_string() || it->get<std::string>().empty())
      return status::invalid(where + ": field '" + key + "' is missing or not a non-empty string");
    *out = it->get<std::string>();
  }
  return ok_status();
}

}  // namespace tessera::timing::detail
