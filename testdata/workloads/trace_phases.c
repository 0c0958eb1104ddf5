/* PEM-style workload (after the paper's UMT2K loop): ITER iterations of
 * phase 6. Each iteration maps 16 MiB of fresh memory and touches every page
 * (page faults, no progress), then makes PASSES passes over it summing
 * words, logging a Loupe::App::Progress event per 256 KiB processed (steady
 * progress, no faults), then unmaps it. So page faults peak at every
 * iteration start and the progress rate is low exactly then.
 * Logs through the stub generated from Loupe's spec (sdk/c/loupe_events.h).
 * Usage: trace_phases [ITER [PASSES]]
 *        trace_phases bench N [THREADS]   each thread logs N progress events;
 *        prints the mean ns/event per thread. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "loupe_events.h"

static long bench_n;

static void *bench_thread(void *out) {
    int32_t d[2] = {1, -1};
    uint64_t t0 = loupe_now();
    for (long i = 0; i < bench_n; i++) trace_loupe_app_progress((uint64_t)i, 1.0, "bench", d, 2);
    *(double *)out = (double)(loupe_now() - t0) / (double)bench_n;
    return 0;
}

static int bench(long n, int threads) {
    pthread_t t[64];
    double ns[64], sum = 0;
    bench_n = n;
    if (threads < 1 || threads > 64) threads = 1;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, bench_thread, &ns[i]);
    for (int i = 0; i < threads; i++) { pthread_join(t[i], 0); sum += ns[i]; }
    printf("%.2f ns/event\n", sum / threads);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "bench") == 0) return bench(atol(argv[2]), argc > 3 ? atoi(argv[3]) : 1);
    int iters = argc > 1 ? atoi(argv[1]) : 10;
    int passes = argc > 2 ? atoi(argv[2]) : 6;
    const size_t size = 16u << 20, chunk = 256u << 10;
    uint64_t units = 0, sink = 0;
    for (int it = 0; it < iters; it++) {
        trace_loupe_phase_begin(6, (uint64_t)it);
        volatile uint64_t *p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if ((void *)p == MAP_FAILED) return 1;
        for (size_t off = 0; off < size / 8; off += 4096 / 8) p[off] = off;
        for (int pass = 0; pass < passes; pass++) {
            for (size_t c = 0; c < size / 8; c += chunk / 8) {
                for (size_t i = c; i < c + chunk / 8; i++) sink += p[i] ^ (uint64_t)pass;
                int32_t d[1] = {1};
                trace_loupe_app_progress(++units, 0.0, "chunks", d, 1);
            }
        }
        munmap((void *)p, size);
        trace_loupe_phase_end(6, (uint64_t)it);
    }
    return sink == 42; /* keep the sums alive */
}
