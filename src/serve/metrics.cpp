#include "kev/serve/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "kev/cpu/isa.h"

namespace kev {
namespace {

// Prometheus floats: shortest round-trip form, with the spellings the format requires.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return fmt::format("{}", v);
}

// A label value: backslash, double quote and newline escaped (0.0.4).
std::string label_value(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, std::string_view name, std::string_view labels, double value) {
  if (labels.empty()) {
    out += fmt::format("{} {}\n", name, number(value));
  } else {
    out += fmt::format("{}{{{}}} {}\n", name, labels, number(value));
  }
}

std::string route_label(std::string_view route) {
  return fmt::format("route=\"{}\"", label_value(route));
}

double resident_bytes() {
  // /proc/self/statm: size resident ... in pages.
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return NAN;
  unsigned long size = 0, resident = 0;
  const int got = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (got != 2) return NAN;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

const std::vector<double> kLatencyBounds = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                            0.25,   0.5,   1,      2.5,   5,    10,    30,   60};
const std::vector<double> kTokenBounds = {16, 64, 256, 1024, 4096, 16384, 65536};
const std::vector<double> kBatchBounds = {1, 2, 4, 8, 16, 32, 64, 128};

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {}

void Histogram::observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
}

void Histogram::write(std::string& out, std::string_view name, std::string_view labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, le, cumulative);
  }
  sample(out, fmt::format("{}_sum", name), labels, sum_.load(std::memory_order_relaxed));
  sample(out, fmt::format("{}_count", name), labels, static_cast<double>(cumulative));
}

ServeMetrics::ServeMetrics(std::vector<std::string> routes)
    : routes_(std::move(routes)),
      statuses_(std::make_unique<std::atomic<uint64_t>[]>((routes_.size() + 1) *
                                                          (kMaxStatus - kMinStatus + 1))),
      queue_wait_(kLatencyBounds),
      batch_(kBatchBounds),
      state_tokens_(kTokenBounds),
      row_tokens_(kTokenBounds),
      start_time_(std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                      .count()) {
  routes_.push_back("other");
  for (size_t i = 0; i < routes_.size(); ++i)
    latency_.push_back(std::make_unique<Histogram>(kLatencyBounds));
}

size_t ServeMetrics::route(std::string_view path) const {
  for (size_t i = 0; i + 1 < routes_.size(); ++i)
    if (routes_[i] == path) return i;
  return other();
}

size_t ServeMetrics::other() const {
  return routes_.size() - 1;
}

const std::string& ServeMetrics::route_name(size_t route) const {
  return routes_[std::min(route, other())];
}

std::atomic<uint64_t>& ServeMetrics::status_slot(size_t route, int status) const {
  // An impossible status (none is sent) is counted as 500 rather than dropped.
  if (status < kMinStatus || status > kMaxStatus) status = 500;
  return statuses_[std::min(route, other()) * (kMaxStatus - kMinStatus + 1) +
                   static_cast<size_t>(status - kMinStatus)];
}

void ServeMetrics::request(size_t route, int status, double seconds) {
  status_slot(route, status).fetch_add(1, std::memory_order_relaxed);
  latency_[std::min(route, other())]->observe(seconds);
}

void ServeMetrics::queue_wait(double seconds) {
  queue_wait_.observe(seconds);
}

void ServeMetrics::batch(size_t requests) {
  batch_.observe(static_cast<double>(requests));
}

void ServeMetrics::scored(size_t state_tokens, size_t row_tokens, size_t questions,
                          size_t cached_tokens) {
  state_tokens_.observe(static_cast<double>(state_tokens));
  row_tokens_.observe(static_cast<double>(row_tokens));
  questions_.fetch_add(questions, std::memory_order_relaxed);
  if (cached_tokens > 0) {
    cached_state_tokens_.fetch_add(cached_tokens, std::memory_order_relaxed);
    scored_cached_.fetch_add(1, std::memory_order_relaxed);
  } else {
    scored_computed_.fetch_add(1, std::memory_order_relaxed);
  }
}

void ServeMetrics::model_loaded(double seconds) {
  load_seconds_.store(seconds, std::memory_order_relaxed);
}

std::string ServeMetrics::render(const MetricsSnapshot& now) const {
  std::string out;
  out.reserve(16384);
  auto counter = [&](std::string_view name, std::string_view help, double value) {
    family(out, name, "counter", help);
    sample(out, name, "", value);
  };
  auto gauge = [&](std::string_view name, std::string_view help, double value) {
    family(out, name, "gauge", help);
    sample(out, name, "", value);
  };

  family(out, "kev_build_info", "gauge",
         "Build and runtime facts as labels (value 1): version, ISA level of the GEMM kernels.");
  sample(out, "kev_build_info",
         fmt::format("version=\"{}\",isa=\"{}\",best_isa=\"{}\"", label_value(KEV_VERSION),
                     isa_name(dispatch_isa("KEV_GEMM_ISA")), isa_name(best_supported_isa())),
         1);
  gauge("process_start_time_seconds", "Start time of the process since the Unix epoch, seconds.",
        start_time_);
  gauge("process_resident_memory_bytes", "Resident memory size in bytes.", resident_bytes());

  family(out, "kev_ready", "gauge", "1 when the model is loaded and the server is not draining.");
  sample(out, "kev_ready", "", std::string_view(now.lifecycle) == "ready" ? 1 : 0);
  family(out, "kev_lifecycle", "gauge",
         "The server's lifecycle state (value 1 on the current state's series).");
  for (const char* state : {"loading", "ready", "draining"})
    sample(out, "kev_lifecycle", fmt::format("state=\"{}\"", state),
           std::string_view(now.lifecycle) == state ? 1 : 0);
  const double load = load_seconds_.load(std::memory_order_relaxed);
  if (load >= 0)
    gauge("kev_model_load_seconds",
          "Seconds from listening to ready: reading the bundle and loading the model.", load);

  family(out, "kev_http_requests_total", "counter",
         "Requests answered (or given up: 408, 499), by route and status. route \"other\": an "
         "unknown path or a request whose request line was never read.");
  for (size_t r = 0; r < routes_.size(); ++r)
    for (int status = kMinStatus; status <= kMaxStatus; ++status)
      if (uint64_t n = status_slot(r, status).load(std::memory_order_relaxed))
        sample(out, "kev_http_requests_total",
               fmt::format("{},status=\"{}\"", route_label(routes_[r]), status),
               static_cast<double>(n));
  family(out, "kev_http_request_duration_seconds", "histogram",
         "Seconds from a request's first byte to its reply being ready to write, by route.");
  for (size_t r = 0; r < routes_.size(); ++r)
    latency_[r]->write(out, "kev_http_request_duration_seconds", route_label(routes_[r]));

  gauge("kev_inflight_requests", "Requests being scored now.", static_cast<double>(now.inflight));
  gauge("kev_queue_depth", "Requests waiting for a scoring slot now.",
        static_cast<double>(now.queued));
  gauge("kev_open_connections", "Client connections open now.",
        static_cast<double>(now.connections));
  family(out, "kev_queue_wait_seconds", "histogram",
         "Seconds a scoring request waited in the FIFO queue for a slot.");
  queue_wait_.write(out, "kev_queue_wait_seconds", "");
  family(out, "kev_batch_size", "histogram", "Requests scored together in one model pass.");
  batch_.write(out, "kev_batch_size", "");

  family(out, "kev_scored_requests_total", "counter",
         "Requests scored (200), by whether their state prefix continued a saved point.");
  sample(out, "kev_scored_requests_total", "prefix=\"cached\"",
         static_cast<double>(scored_cached_.load(std::memory_order_relaxed)));
  sample(out, "kev_scored_requests_total", "prefix=\"computed\"",
         static_cast<double>(scored_computed_.load(std::memory_order_relaxed)));
  family(out, "kev_request_state_tokens", "histogram",
         "State prefix tokens (with <state>) of each scored request.");
  state_tokens_.write(out, "kev_request_state_tokens", "");
  family(out, "kev_request_row_tokens", "histogram",
         "Question row tokens (every token after the state prefix) of each scored request.");
  row_tokens_.write(out, "kev_request_row_tokens", "");
  counter("kev_cached_state_tokens_total",
          "State prefix tokens of scored requests (200) taken from saved points.",
          static_cast<double>(cached_state_tokens_.load(std::memory_order_relaxed)));
  counter("kev_questions_total", "Questions (rows) scored.",
          static_cast<double>(questions_.load(std::memory_order_relaxed)));

  if (now.cache) {
    const auto& c = *now.cache;
    counter("kev_prefix_cache_hits_total",
            "State prefix lookups that found a saved point to continue from.",
            static_cast<double>(c.hits));
    counter("kev_prefix_cache_misses_total", "State prefix lookups that found no saved point.",
            static_cast<double>(c.misses));
    counter("kev_prefix_cache_evictions_total",
            "Saved points evicted to stay within --cache-entries / --cache-tokens / "
            "--cache-bytes.",
            static_cast<double>(c.evictions));
    counter("kev_prefix_reused_tokens_total",
            "State tokens continued from saved points (every endpoint).",
            static_cast<double>(c.reused_tokens));
    counter("kev_prefix_computed_tokens_total",
            "State tokens computed through the backbone (every endpoint).",
            static_cast<double>(c.computed_tokens));
    gauge("kev_prefix_cache_entries", "Saved points (ends of states and checkpoints) now.",
          static_cast<double>(c.entries));
    gauge("kev_prefix_cache_tokens", "State tokens covered by the saved points now.",
          static_cast<double>(c.tokens));
    gauge("kev_prefix_cache_bytes", "Bytes held by the saved points now.",
          static_cast<double>(c.bytes));
    gauge("kev_prefix_cache_max_bytes", "The cache's byte bound (--cache-bytes).",
          static_cast<double>(c.max_bytes));
  }
  if (now.state_dir) {
    const StateStoreCounts& d = *now.state_dir;
    auto count = [](uint64_t v) { return static_cast<double>(v); };
    counter("kev_state_disk_hits_total",
            "Lookups in --state-dir that restored a saved point (the memory cache had no longer "
            "one).",
            count(d.hits));
    counter("kev_state_disk_misses_total", "Lookups in --state-dir that found no usable point.",
            count(d.misses));
    counter("kev_state_disk_rejected_total",
            "Files in --state-dir refused by a check (damaged, truncated, foreign) and removed.",
            count(d.rejected));
    counter("kev_state_disk_writes_total", "Saved points written to --state-dir.", count(d.writes));
    counter("kev_state_disk_write_errors_total",
            "Writes to --state-dir that failed (each pauses saving; serving goes on from memory).",
            count(d.write_errors));
    counter("kev_state_disk_dropped_total",
            "Saved points not written: the write queue was full, or the drain's time ran out.",
            count(d.dropped));
    counter("kev_state_disk_evictions_total",
            "Files removed to keep --state-dir within --state-dir-bytes.", count(d.evictions));
    counter("kev_state_disk_written_bytes_total", "Bytes written to --state-dir.",
            count(d.bytes_written));
    counter("kev_state_disk_read_bytes_total", "Bytes of saved points restored from --state-dir.",
            count(d.bytes_read));
    gauge("kev_state_disk_bytes", "Bytes of the files in --state-dir at the last count.",
          count(d.disk_bytes));
    gauge("kev_state_disk_pending", "Saved points queued for --state-dir or being written.",
          count(d.pending));
  }
  return out;
}

}  // namespace kev
