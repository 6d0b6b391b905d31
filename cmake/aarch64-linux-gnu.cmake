# Cross-build for ARM64 Linux from an x86-64 Debian host (scripts/setup.sh installs the compiler,
# the arm64 multiarch -dev packages and qemu-user-static; scripts/test.sh runs the result under
# qemu-aarch64-static). Use: cmake --preset aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Libraries and package configs from the arm64 multiarch directories only; programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# Test binaries (gtest_discover_tests runs them at build time) go through the emulator, with
# the multiarch arm64 libc (-L /: /lib/ld-linux-aarch64.so.1 and /lib/aarch64-linux-gnu, what
# setup.sh installs as libc6:arm64): the cross toolchain's copy in /usr/aarch64-linux-gnu makes
# pthread_create hang under qemu-aarch64 7.2, this one runs threads.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L /)
