// Allocation tracking cost: N malloc(32)/free pairs, each block written
// once, timed from inside in thread CPU time (user + system, so the
// probes' trap handling counts and time waiting for a busy CPU does not). Prints "X ns/pair".
// Usage: allocbench [pairs]   (default 2000000)
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) static void *get(void) { return malloc(32); }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    for (long i = 0; i < n; i++) {
        volatile long *p = get();
        *p = i;
        free((void *)p);
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    printf("%.1f ns/pair\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n);
    return 0;
}
