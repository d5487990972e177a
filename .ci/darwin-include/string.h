/* For `cargo check` of the macOS targets on Linux (.ci/run): ring's build
 * script (the console's TLS) compiles its C for the target, and
 * crypto/internal.h includes <string.h> for memcpy, memset and memcmp.
 * Without the macOS SDK here, clang compiles it freestanding with this
 * stand-in; a check never links the objects. A real macOS build uses the
 * SDK and never sees this. */
#include <stddef.h>
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
