#include "model/vec.h"

namespace kev::vec {

#define KEV_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace {
inline float tree16(const float* l) {
  float t[8], u[4], v[2];
  for (int i = 0; i < 8; ++i) t[i] = l[i] + l[i + 8];
  for (int i = 0; i < 4; ++i) u[i] = t[i] + t[i + 4];
  for (int i = 0; i < 2; ++i) v[i] = u[i] + u[i + 2];
  return v[0] + v[1];
}
}  // namespace

KEV_CLONES float dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * b[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] += a[i + l] * b[i + l];
  return tree16(acc);
}

KEV_CLONES float sum_sq(const float* a, int64_t n) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] += a[i + l] * a[i + l];
  for (int l = 0; i + l < n; ++l) acc[l] += a[i + l] * a[i + l];
  return tree16(acc);
}

KEV_CLONES void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

KEV_CLONES void scale(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

KEV_CLONES void gdn_step(float* s, int64_t dk, int64_t dv, float eg, const float* k, const float* q,
                         const float* v, float beta, float* o, float* m) {
  for (int64_t j = 0; j < dv; ++j) m[j] = 0.0f;
  for (int64_t i = 0; i < dk; ++i) {
    float* row = s + i * dv;
    const float ki = k[i];
    for (int64_t j = 0; j < dv; ++j) {
      row[j] *= eg;
      m[j] += ki * row[j];
    }
  }
  for (int64_t j = 0; j < dv; ++j) {
    m[j] = beta * (v[j] - m[j]);  // m now holds delta
    o[j] = 0.0f;
  }
  for (int64_t i = 0; i < dk; ++i) {
    float* row = s + i * dv;
    const float ki = k[i], qi = q[i];
    for (int64_t j = 0; j < dv; ++j) {
      row[j] += ki * m[j];
      o[j] += qi * row[j];
    }
  }
}

}  // namespace kev::vec
