// The route table of the service's APIs. See api.hpp.
#include <algorithm>
#include <stdexcept>

#include "tessera/serving/api.hpp"

namespace tessera::serving {

void route_table::add(std::string_view method, std::string path, route_handler h) {
  auto& methods = exact_[path];
  if (!methods.emplace(std::string(method), std::move(h)).second)
    throw std::logic_error("route " + std::string(method) + " " + path + " registered twice");
}

void route_table::add_prefix(std::string prefix, route_handler h) {
  for (const auto& [p, _] : prefixes_)
    if (p == prefix) throw std::logic_error("route prefix " + prefix + " registered twice");
  prefixes_.emplace_back(std::move(prefix), std::move(h));
  std::stable_sort(prefixes_.begin(), prefixes_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

route_table::outcome route_table::dispatch(const route_call& call, std::string& allow) const {
  if (auto it = exact_.find(call.path); it != exact_.end()) {
    if (auto m = it->second.find(call.method); m != it->second.end()) {
      m->second(call);
      return outcome::handled;
    }
    // A prefix below which this exact path also lies still answers its other methods.
    bool prefixed = false;
    for (const auto& [p, _] : prefixes_)
      prefixed |= call.path == p || (call.path.size() > p.size() && call.path.substr(0, p.size()) == p &&
                                     call.path[p.size()] == '/');
    if (!prefixed) {
      allow.clear();
      for (const auto& [method, _] : it->second) allow += (allow.empty() ? "" : ", ") + method;
      return outcome::wrong_method;
    }
  }
  for (const auto& [p, h] : prefixes_) {
    const std::string_view path = call.path;
    if (path == p || (path.size() > p.size() && path.substr(0, p.size()) == p && path[p.size()] == '/')) {
      h(call);
      return outcome::handled;
    }
  }
  return outcome::no_route;
}

std::vector<std::string> route_table::paths() const {
  std::vector<std::string> out;
  for (const auto& [p, _] : exact_) out.push_back(p);
  for (const auto& [p, _] : prefixes_) out.push_back(p + "/...");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace tessera::serving
