// A target without a family folder (neither x86-64 nor aarch64): one level, portable, and no
// variant of any kernel family, so every table runs src/cpu/portable/ (arch.h).
#include <array>

#include "cpu/arch.h"

namespace kev::arch {
namespace {
constexpr std::array kLevels = {Level{"portable", nullptr}};
}  // namespace

const char* name() {
  return "other";
}

std::span<const Level> levels() {
  return kLevels;
}

std::span<const Extension> extensions() {
  return {};
}

const GemmVariant* gemm(Isa) {
  return nullptr;
}

int int8_choice(Isa) {
  return -1;
}

int int8_byte_choice(Isa) {
  return -1;
}

std::span<const Int8Variant> int8_variants() {
  return {};
}

QuantizeBlock quantize_block() {
  return nullptr;
}

int bf16_choice(Isa) {
  return -1;
}

std::span<const Bf16Variant> bf16_variants() {
  return {};
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
