// Whether this test binary is built with AddressSanitizer (scripts/build-sanitized): it then
// runs several times slower and with larger stack frames, which time and stack bounds allow for.
#pragma once

namespace linnet::testing {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// How much slower than an optimized build a sanitized one may be, for time bounds.
constexpr double kSlowdown = kSanitized ? 5.0 : 1.0;

}  // namespace linnet::testing
