// The seam between the architecture-free kernel layer (src/cpu/*.cpp: tables, level selection,
// packing and threading drivers) and one CPU family's folder (src/cpu/x86/, src/cpu/arm64/, or
// src/cpu/generic/ for targets without one). CMake builds exactly one family folder, chosen by
// CMAKE_SYSTEM_PROCESSOR unless KEV_CPU_FAMILY names one (KEV_CPU_FAMILY=generic: the
// portable-only build on any host), and that folder defines every function below; nothing else
// in the code base names an instruction set, carries a target attribute or tests an architecture
// macro, with one exception: the portable vector loops (src/cpu/portable/vec.cpp) carry the
// target_clones that a family's family.cmake asks for through KEV_CLONE_TARGETS (x86's: AVX-512,
// AVX2 and the baseline), the same source compiled once per target.
//
// Contract for a family folder:
// - levels() registers its levels lowest first, portable first: a level's rank (kev::Isa) is its
//   position, its name is what KEV_ISA, `kev cpu` and every --help show, and its cpu_runs is the
//   CPU check (CPUID, HWCAP, ...), asked once per process per level by isa.cpp (which keeps the
//   answers). The folder names its own ranks (x86/levels.h: kAvx2, kAvx512).
// - Every variant function takes a level the CPU supports (the callers check) and returns that
//   level's variant of one kernel family, or nullptr (or -1) when the family has no
//   variant there: the caller then runs the portable variant (src/cpu/portable/portable.h). A
//   family may answer a higher level with a lower level's variant (an AVX-512 CPU runs the AVX2
//   vector kernels).
// - Every variant keeps its family's documented order of operations, so it is bit-identical to
//   the portable one (the unit tests loop over supported_isas(); scripts/test.sh forces each
//   level).
// Thread safety: every function may be called from any thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "kev/cpu/head_kernels.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/matrix.h"
#include "kev/cpu/peak_probe.h"
#include "kev/cpu/precision_kernels.h"
#include "kev/cpu/vec.h"

namespace kev::arch {

// ---- the CPU ----
const char* name();  // "x86-64", "aarch64", "other"
struct Level {
  const char* name;    // "avx2"
  bool (*cpu_runs)();  // nullptr: always (portable)
};
std::span<const Level> levels();  // lowest first, portable first
// An extension beside the levels that `kev cpu` reports (and some of the folder's kernels use).
struct Extension {
  const char* name;   // as `kev cpu` reports it: "avx512_vnni"
  bool (*present)();  // the CPU check
};
std::span<const Extension> extensions();  // this family's reported extensions, in order

// ---- BF16 x FP32 GEMM (gemm.h) ----
// y[i * ldy + j] for an mr x nr tile of x rows and weight rows (ldw apart), over all of k_total.
using GemmTile = void (*)(const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                          int64_t k_total, float* y, int64_t ldy);
struct GemmVariant {
  GemmTile (*tile)(int mr, int nr);  // for 1 <= mr <= tile_rows, 1 <= nr <= tile_cols
  int tile_rows, tile_cols;
  // Optional: runs the whole product itself when the shape suits it (a packed prefill path) and
  // returns true; false leaves it to the tile driver.
  bool (*whole)(const float* x, int64_t rows, int64_t ldx, const Bf16Matrix& w, float* y,
                int64_t ldy, size_t threads);
};
const GemmVariant* gemm(Isa level);

// ---- int8 GEMM (gemm_int8.h, precision_kernels.h) ----
// Output groups [g0, g1) of y from int16 activations xq [rows padded to kInt8TileRows][kp] and
// their scales sx [..][blocks].
using Int8Range = void (*)(const int16_t* xq, int64_t kp, const float* sx, int64_t rows,
                           const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);
// A precision-mode kernel of the folder, registered by name (`kev cpu`'s gemm_int8_kernel /
// gemm_bf16_dot), with the level it belongs to (`kev cpu`'s gemm_int8) and, when it needs more
// than that level, the CPU check of its extension (nullptr: the level's alone).
template <class Range>
struct PrecisionVariant {
  const char* name;
  Isa level;
  bool (*cpu_runs)();
  Range range;
};
// The same from 8-bit activations stored as bytes u = q + 128 ([rows padded][kp]; gemm_int8.h's
// ActivationWidth::k8Bit only): what a kernel of unsigned-by-signed byte products reads.
using Int8ByteRange = void (*)(const uint8_t* xu, int64_t kp, const float* sx, int64_t rows,
                               const Int8Matrix& w, float* y, int64_t ldy, int64_t g0, int64_t g1);
// An int8 kernel runs int16 activations (range) or, a byte kernel, only bytes (bytes; range null).
struct Int8Variant {
  const char* name;
  Isa level;
  bool (*cpu_runs)();
  Int8Range range;
  Int8ByteRange bytes = nullptr;
};
std::span<const Int8Variant> int8_variants();
// The kernel a level runs here, after any start-up probe: an index into int8_variants(), or -1
// for the portable kernel. A folder that probes a kernel first calls probe_kernel on
// precision_variants.h's family_int8_kernel(index).
int int8_choice(Isa level);
// The kernel a level runs with 8-bit activations where the family has a faster one than
// int8_choice's (a byte kernel, after its probe): an index into int8_variants(), or -1 for
// int8_choice's kernel (which computes 8-bit activations exactly too).
int int8_byte_choice(Isa level);
// Quantizes 32 floats by gemm_int8.h's rule into int32 q, returns the scale (same values as the
// portable rule); nullptr when the CPU has no faster form.
using QuantizeBlock = float (*)(const float* v, int32_t* q, float qmax);
QuantizeBlock quantize_block();

// ---- bf16 dot GEMM (precision_kernels.h) ----
// Output groups [g0, g1) of y from BF16 activations xq [rows padded to 6][ldxq].
using Bf16Range = void (*)(const uint16_t* xq, int64_t ldxq, int64_t rows, const Bf16PairMatrix& w,
                           float* y, int64_t ldy, int64_t g0, int64_t g1);
using Bf16Variant = PrecisionVariant<Bf16Range>;
std::span<const Bf16Variant> bf16_variants();
// The dot kernel a level runs here (an index into bf16_variants()), or -1: the bf16 mode rounds
// activations and runs gemm.
int bf16_choice(Isa level);

// ---- vector kernels (vec.h) ----
struct VecVariant {
  Isa level;  // the level whose form this is (reported by `kev cpu`)
  // dot_rows for n % 16 == 0; nullptr: the portable loop.
  void (*dot_rows)(const float* a, const float* x, int64_t ld, int64_t rows, int64_t n, float* out);
  // gdn_steps; nullptr: the portable loop of gdn_step.
  void (*gdn_steps)(float* s, int64_t dk, int64_t dv, int64_t len, const vec::GdnTokens& t);
  // dot_block for n % 16 == 0; nullptr: dot_rows row by row.
  void (*dot_block)(const float* a, int64_t lda, int64_t na, const float* x, int64_t ldx,
                    int64_t nx, int64_t n, float* out, int64_t ldo);
  // axpy_block; nullptr: axpy_rows output by output.
  void (*axpy_block)(float* y, int64_t ldy, int64_t ny, const float* p, int64_t ldp, const float* x,
                     int64_t ldx, int64_t rows, int64_t n);
};
const VecVariant* vec(Isa level);

// ---- LoRA merge (merge.h) ----
using MergeRows = void (*)(const uint8_t* w, const float* b, const float* a, int64_t rank,
                           int64_t cols, float scale, int64_t rows, uint8_t* out);
MergeRows merge(Isa level);

// ---- pointer head (head_kernels.h) ----
const head_kernels::KernelSet* head(Isa level);

// ---- benchmarks (bench/fma_peak.h) ----
// Runs independent FP32 chains of the level's widest vector (enough of them to cover the
// latency) for `iters` iterations on the calling thread and returns the FLOPs done (2 a lane a
// step); the caller times it. fused: one FMA a step; else a multiply, then an add of the rounded
// product (the order the vector kernels of vec.h keep). nullptr: the family has no probe for this
// level (the benchmark reports 0, unknown).
using FmaChains = double (*)(long iters, bool fused);
FmaChains fma_chains(Isa level);
// The same for one precision-mode product instruction (peak_probe.h's DotProbe), returning the
// operations done (2 a product); nullptr: the family has no probe for it or this CPU (or OS)
// cannot run it.
using DotChains = double (*)(long iters);
DotChains dot_chains(DotProbe which);

}  // namespace kev::arch
