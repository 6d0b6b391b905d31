#include "kev/serve/metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "kev/serve/request_id.h"

namespace kev {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

TEST(ServeMetrics, UnknownPathsShareOneLabel) {
  ServeMetrics m({"/a", "/b"});
  EXPECT_EQ(m.route("/a"), 0u);
  EXPECT_EQ(m.route("/b"), 1u);
  EXPECT_EQ(m.route("/c"), m.other());
  EXPECT_EQ(m.route("/a/"), m.other());
  EXPECT_EQ(m.route_name(m.other()), "other");
  m.request(m.route("/secret?x=1"), 404, 0.001);
  m.request(m.route("/a"), 200, 0.002);
  m.request(m.route("/a"), 200, 2.0);
  m.request(m.route("/a"), 999, 0.0);  // never sent; counted as 500 rather than dropped
  const std::string text = m.render({});
  EXPECT_EQ(text.find("secret"), std::string::npos);
  EXPECT_TRUE(has_line(text, "kev_http_requests_total{route=\"other\",status=\"404\"} 1")) << text;
  EXPECT_TRUE(has_line(text, "kev_http_requests_total{route=\"/a\",status=\"200\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "kev_http_requests_total{route=\"/a\",status=\"500\"} 1")) << text;
}

TEST(ServeMetrics, HistogramsAreCumulativeAndCountTheirBuckets) {
  ServeMetrics m({"/a"});
  for (size_t n : {1, 1, 3, 200}) m.batch(n);
  const std::string text = m.render({});
  EXPECT_TRUE(has_line(text, "kev_batch_size_bucket{le=\"1\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "kev_batch_size_bucket{le=\"2\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "kev_batch_size_bucket{le=\"4\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "kev_batch_size_bucket{le=\"128\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "kev_batch_size_bucket{le=\"+Inf\"} 4")) << text;
  EXPECT_TRUE(has_line(text, "kev_batch_size_sum 205")) << text;
  EXPECT_TRUE(has_line(text, "kev_batch_size_count 4")) << text;
}

TEST(ServeMetrics, EveryFamilyIsDeclaredOnceBeforeItsSamples) {
  ServeMetrics m({"/a"});
  MetricsSnapshot now;
  now.lifecycle = "ready";
  now.cache = MetricsSnapshot::Cache{.entries = 1,
                                     .tokens = 2,
                                     .bytes = 6,
                                     .max_bytes = 7,
                                     .hits = 3,
                                     .misses = 4,
                                     .evictions = 5,
                                     .reused_tokens = 8,
                                     .computed_tokens = 9};
  m.model_loaded(1.5);
  const std::string text = m.render(now);
  EXPECT_TRUE(has_line(text, "kev_prefix_cache_evictions_total 5")) << text;
  EXPECT_TRUE(has_line(text, "kev_prefix_cache_bytes 6")) << text;
  EXPECT_TRUE(has_line(text, "kev_prefix_cache_max_bytes 7")) << text;
  EXPECT_TRUE(has_line(text, "kev_prefix_reused_tokens_total 8")) << text;
  EXPECT_TRUE(has_line(text, "kev_prefix_computed_tokens_total 9")) << text;
  EXPECT_TRUE(has_line(text, "kev_model_load_seconds 1.5")) << text;
  EXPECT_TRUE(has_line(text, "kev_lifecycle{state=\"ready\"} 1")) << text;
  // Each # TYPE appears once, and every sample line follows the # TYPE of its family.
  std::string declared;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_EQ(text.find("# TYPE " + name + " "), text.rfind("# TYPE " + name + " ")) << name;
      declared = name;
    } else if (line[0] != '#') {
      EXPECT_EQ(line.rfind(declared, 0), 0u) << line << " after # TYPE " << declared;
    }
  }
}

TEST(RequestId, ClientIdsAreKeptOnlyWhenPrintableAndShort) {
  EXPECT_EQ(request_id("abc-123 x"), "abc-123 x");
  EXPECT_EQ(request_id(std::string(128, 'a')), std::string(128, 'a'));
  for (std::string_view bad :
       {std::string_view(""), std::string_view("a\x01"), std::string_view("caf\xc3\xa9")}) {
    const std::string id = request_id(bad);
    EXPECT_EQ(id.size(), 32u);
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
    EXPECT_EQ(id[12], '4');                                          // version 4
    EXPECT_NE(std::string("89ab").find(id[16]), std::string::npos);  // RFC 4122 variant
  }
  EXPECT_EQ(request_id(std::string(129, 'a')).size(), 32u);
  EXPECT_NE(new_request_id(), new_request_id());
}

}  // namespace
}  // namespace kev
