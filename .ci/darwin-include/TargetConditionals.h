/* For `cargo check` of the macOS targets on Linux (.ci/run): ring (the
 * webhook's TLS, through rustls) compiles its C for the target and asks
 * this SDK header which Apple OS it is. The stand-in says macOS; a check
 * never links the objects, and a real macOS build uses the SDK's. */
#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
