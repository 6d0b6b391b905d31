// The RFC 9112 framing checks (kev/serve/http_framing.h), driven on headers built directly, so
// that each refusal is seen without a socket (the integration tests send the same cases over TCP).
#include "kev/serve/http_framing.h"

#include <gtest/gtest.h>

#include <string>

namespace kev {
namespace {

namespace http = boost::beast::http;

http::request_header<> get(const char* target = "/health", unsigned version = 11) {
  http::request_header<> h;
  h.method(http::verb::get);
  h.target(target);
  h.version(version);
  if (version == 11) h.insert(http::field::host, "localhost");
  return h;
}

// The status of the refusal, or 0 when the header may be served.
int status(const http::request_header<>& h, std::optional<uint64_t> length = std::nullopt,
           FramingLimits limits = {}) {
  auto r = check_header(h, length, limits);
  if (r) {
    EXPECT_FALSE(r->message.empty());
  }
  return r ? r->status : 0;
}

TEST(HttpFraming, APlainRequestPasses) {
  EXPECT_EQ(status(get()), 0);
  EXPECT_EQ(status(get("/v1/systemone?x=1")), 0);
  EXPECT_EQ(status(get("/health", 10)), 0);  // HTTP/1.0 needs no Host
  auto h = get("/v1/systemone");
  h.method(http::verb::post);
  h.insert(http::field::content_length, " 73 ");  // optional whitespace around the value
  h.insert(http::field::expect, "100-Continue");  // case-insensitive
  EXPECT_EQ(status(h, 73), 0);
}

TEST(HttpFraming, OnlyHttp10And11) {
  EXPECT_EQ(status(get("/", 20)), 505);
  EXPECT_EQ(status(get("/", 9)), 505);
}

TEST(HttpFraming, Http11NeedsExactlyOneHost) {
  auto none = get();
  none.erase(http::field::host);
  EXPECT_EQ(status(none), 400);
  auto two = get();
  two.insert(http::field::host, "other");
  EXPECT_EQ(status(two), 400);
}

TEST(HttpFraming, HeaderFieldCountIsBounded) {
  auto h = get();
  for (int i = 0; i < 9; ++i) h.insert("x-field-" + std::to_string(i), "v");
  EXPECT_EQ(status(h, std::nullopt, {.max_headers = 10}), 0);  // Host + 9
  h.insert("x-one-more", "v");
  EXPECT_EQ(status(h, std::nullopt, {.max_headers = 10}), 431);
}

TEST(HttpFraming, ContentLengthIsOnePlainNumber) {
  for (const char* bad : {"73, 73", "+73", "0x10", "", "7 3", "-1"}) {
    auto h = get();
    h.insert(http::field::content_length, bad);
    EXPECT_EQ(status(h), 400) << bad;
  }
  auto two = get();
  two.insert(http::field::content_length, "5");
  two.insert(http::field::content_length, "5");
  EXPECT_EQ(status(two), 400);
}

TEST(HttpFraming, TransferEncodingIsOnePlainChunkedOnHttp11) {
  auto ok = get();
  ok.insert(http::field::transfer_encoding, "Chunked");
  EXPECT_EQ(status(ok), 0);
  for (const char* bad : {"gzip, chunked", "chunked, identity", "identity", "chunked;x=1"}) {
    auto h = get();
    h.insert(http::field::transfer_encoding, bad);
    EXPECT_EQ(status(h), 400) << bad;
  }
  auto two = get();
  two.insert(http::field::transfer_encoding, "chunked");
  two.insert(http::field::transfer_encoding, "chunked");
  EXPECT_EQ(status(two), 400);
  auto old = get("/", 10);
  old.insert(http::field::transfer_encoding, "chunked");
  EXPECT_EQ(status(old), 400);
}

TEST(HttpFraming, EncodedBodiesAndUnknownExpectationsAreRefused) {
  auto gz = get();
  gz.insert(http::field::content_encoding, "gzip");
  EXPECT_EQ(status(gz), 415);
  auto ex = get();
  ex.insert(http::field::expect, "200-ok");
  EXPECT_EQ(status(ex), 417);
}

TEST(HttpFraming, ADeclaredBodyOverTheLimitIs413) {
  auto h = get();
  h.insert(http::field::content_length, "1001");
  EXPECT_EQ(status(h, 1001, {.max_body = 1000}), 413);
  EXPECT_EQ(status(h, 1001, {.max_body = 1001}), 0);
}

TEST(HttpFraming, TargetForms) {
  EXPECT_EQ(target_path("/p?q=1"), "/p");
  EXPECT_EQ(target_path("/"), "/");
  EXPECT_EQ(target_path("http://host:8000/v1/systemone?x"), "/v1/systemone");
  EXPECT_EQ(target_path("HTTPS://host"), "/");
  EXPECT_EQ(target_path("http://host?q"), "/");
  EXPECT_EQ(target_path("http:///p"), std::nullopt);  // no authority
  EXPECT_EQ(target_path("ftp://host/p"), std::nullopt);
  EXPECT_EQ(target_path("*"), std::nullopt);
  EXPECT_EQ(target_path("host:443"), std::nullopt);
  EXPECT_EQ(target_path(""), std::nullopt);
  EXPECT_EQ(status(get("*")), 400);
  EXPECT_EQ(status(get("example.com:443")), 400);
}

TEST(HttpFraming, ObsFoldAfterTheRequestLine) {
  EXPECT_FALSE(has_obs_fold("GET / HTTP/1.1\r\nHost: a\r\n\r\n"));
  EXPECT_TRUE(has_obs_fold("GET / HTTP/1.1\r\nHost: a\r\n b\r\n\r\n"));
  EXPECT_TRUE(has_obs_fold("GET / HTTP/1.1\r\nHost: a\r\nX: 1\r\n\tchunked\r\n\r\n"));
  EXPECT_FALSE(has_obs_fold("GET / HTTP/1.1\r\n"));
  EXPECT_FALSE(has_obs_fold(""));
}

TEST(HttpFraming, PrintableNeverEchoesRawBytes) {
  EXPECT_EQ(printable("/v1/x"), "/v1/x");
  EXPECT_EQ(printable("a b\"c\\d%\xff\n"), "a%20b%22c%5Cd%25%FF%0A");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_TRUE(printable_ascii("Origin: x"));
  EXPECT_FALSE(printable_ascii("a\x7f"));
  EXPECT_EQ(trim(" \tx y\t "), "x y");
  EXPECT_TRUE(iequals("Chunked", "cHUNKED"));
  EXPECT_FALSE(iequals("chunked", "chunked "));
}

}  // namespace
}  // namespace kev
