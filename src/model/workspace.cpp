// The workspace's widths, in one place for allocate() and workspace_bytes_per_token().
#include "model/workspace.h"

#include <algorithm>

#include "kev/model/model.h"

namespace kev {
namespace {

// Floats per token of each Workspace array.
struct WorkspaceWidths {
  int64_t hidden, big, qkv, aux1, aux2, half_rotary, rounded;
};

WorkspaceWidths workspace_widths(const ModelConfig& c) {
  const int64_t big = std::max({c.intermediate, c.heads * c.head_dim * 2, c.lin_v_total()});
  const int64_t aux =
      std::max({c.kv_heads * c.head_dim, c.linear_value_heads, c.heads * c.head_dim});
  return {.hidden = c.hidden,
          .big = big,
          .qkv = std::max(c.conv_dim(), c.kv_heads * c.head_dim),
          .aux1 = std::max(aux, c.conv_dim()),
          .aux2 = aux,
          .half_rotary = c.rotary_dim / 2,
          // project()'s rounded input: the widest projection input
          .rounded = std::max({c.hidden, c.intermediate, c.heads * c.head_dim, c.lin_v_total()})};
}

}  // namespace

void Workspace::allocate(const ModelConfig& c, int64_t rows) {
  const WorkspaceWidths w = workspace_widths(c);
  auto size = [rows](ZeroedBuffer<float>& v, int64_t width) {
    v = ZeroedBuffer<float>(static_cast<size_t>(rows * width));
  };
  size(x, w.hidden);
  size(xn, w.hidden);
  size(mix, w.hidden);
  size(big1, w.big);
  size(big2, w.big);
  size(qkv, w.qkv);
  size(aux1, w.aux1);
  size(aux2, w.aux2);
  size(cos, w.half_rotary);
  size(sin, w.half_rotary);
}

size_t workspace_bytes_per_token(const ModelConfig& c, Precision p) {
  const WorkspaceWidths w = workspace_widths(c);
  // x, xn, mix, the returned hidden states, and the rest of the workspace.
  int64_t floats = 4 * w.hidden + 2 * w.big + w.qkv + w.aux1 + w.aux2 + 2 * w.half_rotary;
  if (p != Precision::kFp32) floats += w.rounded;
  return static_cast<size_t>(floats) * sizeof(float);
}

}  // namespace kev
