/*
 * Fixed CPU work for overhead benchmarks, timed from inside:
 *   burn [--threads N] [--iterations K]   prints elapsed_s=<seconds>
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t iterations = 1400000000ULL;
static volatile uint64_t sink;

__attribute__((noinline)) static void *work(void *arg) {
    uint64_t x = (uintptr_t)arg + 1;
    for (uint64_t i = 0; i < iterations; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    sink = x;
    return NULL;
}

int main(int argc, char **argv) {
    int threads = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--iterations") && i + 1 < argc)
            iterations = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: burn [--threads N] [--iterations K]\n");
            return 2;
        }
    }
    pthread_t t[256];
    if (threads < 1 || threads > 256)
        return 2;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, work, (void *)(uintptr_t)i);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("elapsed_s=%.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
