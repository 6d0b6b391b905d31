// A prefix state as bytes (model.h: Model::write_state / read_state): the seam through which a
// saved point leaves the process and comes back (score/state_store.h keeps them on disk).
//
// Contract: a backend writes a state as one stream of bytes in its own layout, named by its
// state_identity (model.h); read_state with the same identity gives back bit for bit the state
// that was written (every key, value and recurrent float; the attention blocks as they were), so
// a forward continuing from it gives the bits it would have given from the original. The reader
// trusts nothing: every count is checked against the model's dimensions, the state's length and
// the bytes left before anything is allocated; a stream that does not fit is Error(kBadInput).
#pragma once
#include <cstddef>
#include <cstring>
#include <functional>
#include <string_view>

#include "kev/core/error.h"

namespace kev {

// Receives the bytes in order, in pieces.
using StateSink = std::function<void(const void* bytes, size_t n)>;

// Gives the bytes in order. read() fills exactly n bytes or throws Error(kBadInput) (the stream
// ends first) or Error(kIo); remaining() is how many are left.
class StateSource {
 public:
  virtual ~StateSource() = default;
  virtual void read(void* into, size_t n) = 0;
  virtual size_t remaining() const = 0;
};

// Bytes in memory (which outlive it) as a StateSource.
class MemoryStateSource final : public StateSource {
 public:
  explicit MemoryStateSource(std::string_view bytes) : bytes_(bytes) {}
  void read(void* into, size_t n) override {
    if (n > remaining())
      fail(ErrorKind::kBadInput, "the bytes end {} bytes early", n - remaining());
    if (n > 0) std::memcpy(into, bytes_.data() + at_, n);
    at_ += n;
  }
  size_t remaining() const override { return bytes_.size() - at_; }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

}  // namespace kev
