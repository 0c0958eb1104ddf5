/* The leaf of callstack's two paths, in a shared library. The call
 * through `hook` (never taken) keeps c_work a non-leaf, so GCC gives it a
 * frame when frame pointers are on (it skips the frame of true leaves even
 * with -fno-omit-frame-pointer, which would hide the caller from
 * frame-pointer unwinding in both builds). */
#include <stdint.h>

void (*volatile c_hook)(void);

__attribute__((noinline)) uint64_t c_work(uint64_t n, uint64_t seed) {
    uint64_t a = seed, b = 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t = a + b;
        a = b;
        b = t ^ i;
    }
    if (c_hook)
        c_hook();
    return b;
}
