/* A short-lived process: spins about 3 ms of CPU, then exits. */
#include <stdint.h>
#include <time.h>

static volatile uint64_t sink;

__attribute__((noinline)) static void spin(void) {
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    uint64_t x = 1;
    do {
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005ULL + 1;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 3000000L);
    sink = x;
}

int main(void) {
    spin();
    return 0;
}
