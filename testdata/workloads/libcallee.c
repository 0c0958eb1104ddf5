/* The leaf of callstack's two paths, in a shared library. */
#include <stdint.h>

__attribute__((noinline)) uint64_t c_work(uint64_t n, uint64_t seed) {
    uint64_t a = seed, b = 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t = a + b;
        a = b;
        b = t ^ i;
    }
    return b;
}
