// Stand-in for securec.h (the bounds-checked C library CANN's headers include): the calls they make.
#pragma once
#include <cstddef>
#include <cstdint>
using errno_t = int;
constexpr errno_t EOK = 0;
errno_t memcpy_s(void *dest, size_t destMax, const void *src, size_t count);
errno_t memset_s(void *dest, size_t destMax, int c, size_t count);
errno_t strcpy_s(char *dest, size_t destMax, const char *src);
errno_t strncpy_s(char *dest, size_t destMax, const char *src, size_t count);
int sprintf_s(char *dest, size_t destMax, const char *format, ...);
int snprintf_s(char *dest, size_t destMax, size_t count, const char *format, ...);
