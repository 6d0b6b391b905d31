// The kernels of the fast precision modes (`--precision int8` and `--precision bf16`), known by
// the names `kev cpu` reports; tests and benchmarks pick one by name. Which kernels exist is the
// CPU family folder's business (src/cpu/arch.h); this header promises what every one of them
// computes.
//
// Contract:
// - int8 (Int8Kernel): the contract of gemm_int8.h, bit for bit, for every kernel, whatever its
//   level or CPU: "portable", the family's, and the emulation of a family kernel
//   ("...-emulated", which runs on any CPU). They read the same packed Int8Matrix. Every kernel
//   runs both activation widths, except the byte kernels ("avx512vnni-a8", "avxvnni-a8", their
//   emulations "...-a8-emulated", "neon-dotprod"), which multiply 8-bit activations only.
// - bf16 dot (Bf16Kernel): "none" means the bf16 mode has no dot kernel here and rounds
//   activations to BF16 before the BF16 x FP32 GEMM (gemm.h's order). A dot kernel computes
//   y = bf16(x) * W^T with the activations rounded to BF16 (round to nearest even, bf16.h) and
//   one FP32 sum per output, every operation rounded to nearest even, denormal inputs read as
//   zero and denormal results flushed to zero, in the kernel's own order:
//     "avx512bf16" (vdpbf16ps): for k-pairs p = 0, 1, ... in ascending order, two FMAs into the
//       sum: first the odd element (k = 2p + 1), then the even one (k = 2p);
//     "amxbf16" (tdpbf16ps): for chunks of 16 k-pairs in ascending order (the last zero-padded),
//       the even elements' products summed by FMA from zero in ascending order, the odd ones'
//       likewise, then sum += (even + odd).
//   Neither is the rounding path's order, so a machine with a dot kernel gives other last bits
//   in bf16 mode than one without, and the two kernels differ from each other: other modes of
//   the same precision, each held by the same tolerance
//   (|y - y64| <= g * sum |x_k w_k|, g = (K-1)u / (1 - (K-1)u), u = 2^-24, <= K * 2^-24 for
//   K <= 4096, against a float64 evaluation of the same BF16 operands, plus the flushed
//   denormals) and by the budget of docs/performance.md; still independent of the batch and the
//   thread split. Weights are packed once at load time (Bf16PairMatrix, 2 bytes per weight).
// - A kernel that fails its start-up self-check is not dispatched for the rest of the process;
//   kernel_probe_note says which and why (also one line on stderr).
// - Dispatch: the kernel table (model_kernels.h) picks once per process, by the GEMM level
//   (KEV_ISA / KEV_GEMM_ISA below a kernel's level turn it off; docs/environment.md).
// Thread safety: every function may be called from any thread.
#pragma once
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kev/cpu/gemm_int8.h"
#include "kev/cpu/isa.h"
#include "kev/cpu/matrix.h"

namespace kev {

// A registered kernel: its position in the registry (int8_kernels() / bf16_kernels()). Only the
// kernel layer makes ids; everyone else gets kernels from the functions below.
template <class Tag>
class RegisteredKernel {
 public:
  constexpr RegisteredKernel() = default;  // id 0: "portable" (int8), "none" (bf16)
  static constexpr RegisteredKernel of_id(int id) { return RegisteredKernel(id); }
  constexpr int id() const { return id_; }
  constexpr auto operator<=>(const RegisteredKernel&) const = default;

 private:
  constexpr explicit RegisteredKernel(int id) : id_(id) {}
  int id_ = 0;
};

// ---- int8 ----
using Int8Kernel = RegisteredKernel<struct Int8KernelTag>;
inline constexpr Int8Kernel kPortableInt8Kernel{};
std::vector<Int8Kernel> int8_kernels();                             // every registered one
const char* int8_kernel_name(Int8Kernel k);                         // "portable", "avx2", ...
std::optional<Int8Kernel> find_int8_kernel(std::string_view name);  // nullopt: none here
bool int8_kernel_supported(Int8Kernel k);    // by this CPU (portable and emulations: always)
Isa int8_kernel_level(Int8Kernel k);         // the level it belongs to (portable for emulations)
bool int8_kernel_reads_bytes(Int8Kernel k);  // a byte kernel: 8-bit activations only
// The dispatched kernel of an activation width, after the probes.
Int8Kernel best_int8_kernel(ActivationWidth width = ActivationWidth::k16Bit);
// What gemm_int8_isa(isa, ..., width) runs on this CPU.
Int8Kernel int8_kernel_for(Isa isa, ActivationWidth width = ActivationWidth::k16Bit);

// gemm_int8 (gemm_int8.h) through one given kernel; k must be supported, and run `width`
// (Error kUnsupported: a byte kernel with 16-bit activations).
void gemm_int8_kernel(Int8Kernel k, const float* x, int64_t rows, int64_t ldx, const Int8Matrix& w,
                      float* y, int64_t ldy, size_t threads,
                      ActivationWidth width = ActivationWidth::k16Bit);
// The same for a q4 matrix (gemm_int8.h): each chunk of output groups is unpacked to
// Int8Matrix's layout and run through k's tiles, so the bits are k's (every kernel's) on the
// unpacked weights.
void gemm_int4_kernel(Int8Kernel k, const float* x, int64_t rows, int64_t ldx, const Int4Matrix& w,
                      float* y, int64_t ldy, size_t threads,
                      ActivationWidth width = ActivationWidth::k16Bit);

// ---- bf16 dot ----
using Bf16Kernel = RegisteredKernel<struct Bf16KernelTag>;
inline constexpr Bf16Kernel kNoBf16Kernel{};  // "none": the rounding path
std::vector<Bf16Kernel> bf16_kernels();       // every registered one, "none" first
const char* bf16_kernel_name(Bf16Kernel k);   // "none", "avx512bf16", "amxbf16", ...
std::optional<Bf16Kernel> find_bf16_kernel(std::string_view name);
bool bf16_kernel_supported(Bf16Kernel k);
Bf16Kernel best_bf16_kernel();  // the dispatched dot kernel (passed its probe), else "none"

// The weights in the dot kernels' layout.
Bf16PairMatrix pack_bf16_pairs(const Bf16Matrix& m, size_t threads = 0);

// y[rows, w.rows] (row stride ldy) = bf16(x) * W^T as above; k must be a dot kernel (not
// "none") this CPU supports.
void gemm_bf16_pairs(Bf16Kernel k, const float* x, int64_t rows, int64_t ldx,
                     const Bf16PairMatrix& w, float* y, int64_t ldy, size_t threads = 0);

// Why a start-up self-check turned a kernel off in this process ("" if none did, or none ran yet).
std::string kernel_probe_note();

}  // namespace kev
