// Reply: what the server sends for one request, built by routes and the scoring service and
// written by the connection (connection.cpp), which adds the headers every response carries
// (request id, server-timing, CORS). A value type; no thread affinity.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kev/score/scorer.h"
#include "kev/text/api.h"

namespace kev {

// What a scored request cost, for its log line.
struct Scored {
  ScoreUsage usage;
  size_t questions = 0;
  size_t batch = 1;  // requests in the model pass that scored it
};

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields, in order
  bool preflight = false;        // a CORS preflight answer: carries its own Access-Control-* fields
  std::optional<Scored> scored;  // a 200 from POST /v1/systemone
  bool retry_after = false;
  std::string allow;
  bool close = false;      // framing can no longer be trusted: close after this reply
  bool cancelled = false;  // the client reset the connection: no reply, close
  double queue_ms = -1;    // time the request waited for a scoring slot (< 0: not queued)
};

inline Reply json_reply(int status, const OrderedJson& body) {
  Reply r;
  r.status = status;
  r.body = body.dump();
  return r;
}

// {"detail": message}; a 503 carries Retry-After; close: the connection is closed after it.
inline Reply detail(int status, const std::string& message, bool close = false) {
  Reply r = json_reply(status, OrderedJson{{"detail", message}});
  r.retry_after = status == 503;
  r.close = close;
  return r;
}

// A duration in seconds (an option) as a steady_clock duration.
inline std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

}  // namespace kev
