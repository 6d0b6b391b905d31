// The MLP (mlp.h).
#include "model/mlp.h"

#include "kev/core/threads.h"

namespace kev {

void run_mlp(LayerPass& pass, const LayerWeights& lw) {
  const int64_t i_dim = pass.c.intermediate;
  Workspace& ws = pass.ws;
  pass.project(ws.xn.data(), pass.c.hidden, lw.gate, ws.big1.data());
  pass.project(ws.xn.data(), pass.c.hidden, lw.up, ws.big2.data());
  float* g = ws.big1.data();
  const float* u = ws.big2.data();
  const ModelKernels& k = pass.k;
  parallel_for(
      sz(pass.rows),
      [&](size_t r) {
        const int64_t row = static_cast<int64_t>(r) * i_dim;
        k.silu_mul(g + row, u + row, i_dim);
      },
      pass.threads);
  pass.project(g, i_dim, lw.down, ws.mix.data());
}

}  // namespace kev
