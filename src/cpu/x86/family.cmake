# x86-64: the portable vector loops (src/cpu/portable/vec.cpp) are compiled for AVX-512, AVX2 and
# the baseline, picked at load time (the same operations in the same order on each). Not in the
# sanitizer builds: their ifunc resolvers run before the sanitizer runtime is set up, and under
# ThreadSanitizer clang's resolver picked the AVX-512 clone on an AVX2-only Zen 3 (SIGILL); the
# baseline loops give the same bits.
if(NOT KEV_TSAN AND NOT KEV_FUZZ AND NOT KEV_SANITIZE)
  target_compile_definitions(kev_cpu PRIVATE "KEV_CLONE_TARGETS=\"avx512f\",\"avx2\",\"default\"")
endif()
