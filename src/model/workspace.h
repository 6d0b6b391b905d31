// The scratch of one pass of the layers (private to the model layer): every array the layers
// write between projections, sized once per pass for its rows, so nothing is allocated per token
// or per layer. workspace_bytes_per_token (kev/model/model.h) is computed from the same widths,
// so memory admission counts what allocate() takes.
#pragma once
#include <cstdint>

#include "kev/core/aligned.h"
#include "kev/model/config.h"

namespace kev {

// 64-byte aligned starts: rows are aligned too where a width is a multiple of 16 floats (every
// width at the released dimensions), so the kernels' row loads do not straddle cache lines. The
// arrays start zero without a serial zero-fill pass where they are mapped (ZeroedBuffer: a long
// pass's scratch is first touched by the parallel kernels that write it).
// What each array holds changes from layer to layer; attention.cpp, gdn.cpp and mlp.cpp say
// which they use for what.
struct Workspace {
  ZeroedBuffer<float> x;    // [T, hidden] the residual stream
  ZeroedBuffer<float> xn;   // [T, hidden] the normed input of a layer's mixer or MLP
  ZeroedBuffer<float> mix;  // [T, hidden] the mixer's or MLP's output, added into x
  ZeroedBuffer<float> big1, big2, qkv, aux1, aux2;  // the layers' intermediates
  ZeroedBuffer<float> cos, sin;                     // [T, rotary_dim / 2] RoPE tables
  AlignedVector<float> rounded;  // project()'s rounded input (sized by project itself)

  // Sizes every array but `rounded` for `rows` tokens of a model of config c.
  void allocate(const ModelConfig& c, int64_t rows);
};

}  // namespace kev
