/* Logs N LTTng-UST events with the payload of Loupe::App::Progress and
 * prints ns/event, timed from inside like trace_phases.c's bench mode. */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "tp.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static long n;

static void *run(void *out) {
    int32_t d[2] = {1, -1};
    uint64_t t0 = now();
    for (long i = 0; i < n; i++) lttng_ust_tracepoint(loupe_bench, progress, (uint64_t)i, 1.0, "bench", d, 2);
    *(double *)out = (double)(now() - t0) / (double)n;
    return 0;
}

int main(int argc, char **argv) {
    pthread_t t[64];
    double ns[64], sum = 0;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    n = argc > 1 ? atol(argv[1]) : 1000000;
    if (threads < 1 || threads > 64) threads = 1;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, run, &ns[i]);
    for (int i = 0; i < threads; i++) { pthread_join(t[i], 0); sum += ns[i]; }
    printf("%.2f ns/event\n", sum / threads);
    return 0;
}
