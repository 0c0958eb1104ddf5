/* PEM-style workload: ITER iterations of phase 6; each allocates 8 MiB,
 * touches every page (page faults) and logs a progress event per MiB, then
 * frees it. Logs through the stub generated from Loupe's spec
 * (sdk/c/loupe_events.h). Usage: trace_phases [ITER] [LOG_N]; with LOG_N it
 * instead logs LOG_N progress events and prints the ns/event it measured. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include "loupe_events.h"

int main(int argc, char **argv) {
    int iters = argc > 1 ? atoi(argv[1]) : 8;
    if (argc > 2) {
        long n = atol(argv[2]);
        int32_t d[2] = {1, -1};
        uint64_t t0 = loupe_now();
        for (long i = 0; i < n; i++) trace_loupe_app_progress((uint64_t)i, 1.0, "bench", d, 2);
        printf("%.2f ns/event\n", (double)(loupe_now() - t0) / (double)n);
        return 0;
    }
    const size_t mib = 1 << 20, size = 8 * mib;
    for (int it = 0; it < iters; it++) {
        trace_loupe_phase_begin(6, (uint64_t)it);
        char *p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        for (size_t off = 0; off < size; off += 4096) {
            p[off] = (char)off;
            if ((off + 4096) % mib == 0) {
                int32_t d[1] = {1};
                trace_loupe_app_progress((uint64_t)((off + 4096) / mib), 0.0, "MiB", d, 1);
            }
        }
        munmap(p, size);
        trace_loupe_phase_end(6, (uint64_t)it);
    }
    return 0;
}
