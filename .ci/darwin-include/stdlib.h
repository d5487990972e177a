/* For `cargo check` of the macOS targets on Linux (.ci/run): wasmtime's
 * build script compiles one C helper (src/runtime/vm/helpers.c) for the
 * target, which includes <stdlib.h> only for NULL. Without the macOS SDK
 * here, clang compiles it freestanding with this stand-in; a check never
 * links the object. A real macOS build uses the SDK and never sees this. */
#include <stddef.h>
