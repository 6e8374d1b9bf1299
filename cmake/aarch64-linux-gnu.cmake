# Cross-compiling for AArch64 Linux on a Debian x86-64 host: g++-aarch64-linux-gnu, and the arm64 builds of
# the libraries from Debian multiarch (dpkg --add-architecture arm64; libpcre2-dev:arm64 ...), run with
# qemu-aarch64 (scripts/test_aarch64.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
# pkg-config: the arm64 .pc files only.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
# The multiarch libc6:arm64 (/lib/ld-linux-aarch64.so.1), not the cross toolchain's copy: threads in
# binaries run on the latter with -L /usr/aarch64-linux-gnu never start under qemu-user 7.2.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
