// A CPU family that exists only for the test build of the family-demo preset: the proof that a
// family is one folder (docs/architecture.md, "Adding a CPU family"). It registers one level
// above portable, "demo" (which every CPU runs: it has no instructions of its own), and one
// extension, "demo_ext" (never present), and holds no kernel variant, so every table runs the
// portable kernels. Built with KEV_CPU_FAMILY_DIR pointing here, in place of the host's folder;
// nothing outside this folder changes. scripts/test.sh checks that `kev cpu` and KEV_ISA see
// the level and that the kernel layer's unit tests pass at it.
#include <array>

#include "cpu/arch.h"

namespace kev::arch {
namespace {

constexpr std::array kLevels = {Level{"portable", nullptr}, Level{"demo", [] { return true; }}};
constexpr std::array kExtensions = {Extension{"demo_ext", [] { return false; }}};

}  // namespace

const char* name() {
  return "demo";
}

std::span<const Level> levels() {
  return kLevels;
}

std::span<const Extension> extensions() {
  return kExtensions;
}

const GemmVariant* gemm(Isa) {
  return nullptr;
}

std::span<const Int8Variant> int8_variants() {
  return {};
}

int int8_choice(Isa) {
  return -1;
}

int int8_byte_choice(Isa) {
  return -1;
}

QuantizeBlock quantize_block() {
  return nullptr;
}

std::span<const Bf16Variant> bf16_variants() {
  return {};
}

int bf16_choice(Isa) {
  return -1;
}

const VecVariant* vec(Isa) {
  return nullptr;
}

MergeRows merge(Isa) {
  return nullptr;
}

const head_kernels::KernelSet* head(Isa) {
  return nullptr;
}

FmaChains fma_chains(Isa) {
  return nullptr;
}

DotChains dot_chains(DotProbe) {
  return nullptr;
}

}  // namespace kev::arch
