// cpp-httplib 0.11.4 (Debian) probe for docs/serving.md: POST/GET anything -> 200 "len=<bytes>".
// Build: g++ -O2 -std=c++17 httplib_probe.cpp -lcpp-httplib -o httplib_probe ; run: ./httplib_probe
// PORT
#include <httplib.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  httplib::Server s;
  auto h = [](const httplib::Request& req, httplib::Response& res) {
    res.set_content("len=" + std::to_string(req.body.size()), "text/plain");
  };
  s.Post(".*", h);
  s.Get(".*", h);
  int port = argc > 1 ? std::stoi(argv[1]) : 8080;
  std::printf("ready\n");
  std::fflush(stdout);
  s.listen("127.0.0.1", port);
}
