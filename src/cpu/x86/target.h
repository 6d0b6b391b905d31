// The x86-64 family's function attributes and intrinsics header (private to src/cpu/x86/).
// Every variant function carries the target attribute of exactly the extensions it uses, so the
// rest of the binary stays baseline x86-64 and a variant only runs after its CPU check.
#pragma once

// GCC 12's AVX-512 headers build some intrinsics from _mm512_undefined_*(), which trips a false
// -Wmaybe-uninitialized / -Wuninitialized once inlined; the values are fully defined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#define KEV_TARGET_AVX2 __attribute__((target("avx2,fma")))
#define KEV_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
