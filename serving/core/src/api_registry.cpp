// The APIs every service serves. A new API: a file with a class deriving from `api` (api.hpp)
// and a factory, declared and listed here; nothing else in the service changes.
#include "tessera/serving/api.hpp"

namespace tessera::serving {

std::unique_ptr<api> make_tei_api(service& svc);     // encoder/src/tei_api.cpp
std::unique_ptr<api> make_kserve_api(service& svc);  // encoder/src/kserve_api.cpp
std::unique_ptr<api> make_embed_api(service& svc);   // encoder/src/embed_api.cpp
std::unique_ptr<api> make_openai_api(service& svc);  // llm/src/openai_api.cpp

std::vector<std::unique_ptr<api>> make_apis(service& svc) {
  using factory = std::unique_ptr<api> (*)(service&);
  std::vector<std::unique_ptr<api>> out;
  for (factory f : {make_tei_api, make_kserve_api, make_embed_api, make_openai_api}) out.push_back(f(svc));
  return out;
}

}  // namespace tessera::serving
