/* The shared-library part of the selftime workload. */
#include <stdint.h>

__attribute__((noinline)) uint64_t lib_spin(uint64_t iters, uint64_t seed) {
    uint64_t x = seed;
    for (uint64_t i = 0; i < iters; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    return x;
}
