# x86-64: the portable vector loops (src/cpu/portable/vec.cpp) are compiled for AVX-512, AVX2 and
# the baseline, picked at load time (the same operations in the same order on each).
target_compile_definitions(kev_cpu PRIVATE "KEV_CLONE_TARGETS=\"avx512f\",\"avx2\",\"default\"")
