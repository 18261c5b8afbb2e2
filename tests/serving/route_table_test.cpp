// The service's route table (api.hpp): exact routes before prefixes, 405 with the Allow header
// from what is registered, the longest prefix wins, a path below a prefix only on a '/', and a
// route registered twice refused at start-up.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/serving/api.hpp"

using namespace tessera::serving;

namespace {

struct hit {
  std::string route, method, path;
};

route_table::outcome call(const route_table& t, std::string_view method, std::string_view path, std::string& allow) {
  request_headers h;
  reply_fn reply = [](http_reply) {};
  return t.dispatch({method, path, path, "", h, reply}, allow);
}

}  // namespace

TEST(RouteTable, ExactThenLongestPrefixThenNothing) {
  std::vector<hit> hits;
  auto rec = [&](std::string name) {
    return [&hits, name](const route_call& c) { hits.push_back({name, std::string(c.method), std::string(c.path)}); };
  };
  route_table t;
  t.add("GET", "/", rec("health"));
  t.add("POST", "/", rec("predict"));
  t.add("POST", "/embed", rec("embed"));
  t.add_prefix("/v1", rec("openai"));
  t.add_prefix("/v1/special", rec("special"));
  std::string allow;
  EXPECT_EQ(call(t, "GET", "/", allow), route_table::outcome::handled);
  EXPECT_EQ(call(t, "POST", "/", allow), route_table::outcome::handled);
  EXPECT_EQ(call(t, "POST", "/embed", allow), route_table::outcome::handled);
  EXPECT_EQ(call(t, "GET", "/v1", allow), route_table::outcome::handled);
  EXPECT_EQ(call(t, "DELETE", "/v1/models/x", allow), route_table::outcome::handled);
  EXPECT_EQ(call(t, "POST", "/v1/special/a", allow), route_table::outcome::handled);
  ASSERT_EQ(hits.size(), 6u);
  EXPECT_EQ(hits[0].route, "health");
  EXPECT_EQ(hits[1].route, "predict");
  EXPECT_EQ(hits[2].route, "embed");
  EXPECT_EQ(hits[3].route, "openai");
  EXPECT_EQ(hits[4].route, "openai");
  EXPECT_EQ(hits[4].method, "DELETE");
  EXPECT_EQ(hits[5].route, "special");

  // Not below a prefix unless a '/' follows it; nothing matched is no_route (the service's 404).
  EXPECT_EQ(call(t, "GET", "/v10", allow), route_table::outcome::no_route);
  EXPECT_EQ(call(t, "GET", "/embedding", allow), route_table::outcome::no_route);
  EXPECT_EQ(hits.size(), 6u);
}

TEST(RouteTable, WrongMethodNamesEveryRegisteredMethod) {
  route_table t;
  t.add("GET", "/", [](const route_call&) {});
  t.add("POST", "/", [](const route_call&) {});
  t.add("POST", "/embed", [](const route_call&) {});
  std::string allow;
  EXPECT_EQ(call(t, "PUT", "/", allow), route_table::outcome::wrong_method);
  EXPECT_EQ(allow, "GET, POST");
  EXPECT_EQ(call(t, "GET", "/embed", allow), route_table::outcome::wrong_method);
  EXPECT_EQ(allow, "POST");
}

TEST(RouteTable, ARouteRegisteredTwiceIsRefusedNamingIt) {
  route_table t;
  t.add("POST", "/embed", [](const route_call&) {});
  try {
    t.add("POST", "/embed", [](const route_call&) {});
    FAIL() << "registered twice without an error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("POST /embed"), std::string::npos) << e.what();
  }
  t.add_prefix("/v2", [](const route_call&) {});
  EXPECT_THROW(t.add_prefix("/v2", [](const route_call&) {}), std::logic_error);
  EXPECT_EQ(t.paths(), (std::vector<std::string>{"/embed", "/v2/..."}));
}
