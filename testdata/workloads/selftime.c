/*
 * Ground-truth workload: spends CPU in procedures with known, different
 * weights and measures its own CPU time per procedure with
 * CLOCK_THREAD_CPUTIME_ID, and its user/system split with getrusage.
 *
 *   selftime [--seconds S] [--threads N] [--out FILE]   (S: CPU seconds per thread)
 *
 * Writes JSON: {"seconds", "total_cpu", "utime", "stime",
 *               "procedures": {name: cpu seconds}, "pid"}.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

uint64_t lib_spin(uint64_t iters, uint64_t seed);

static volatile uint64_t sink;

__attribute__((noinline)) void hot_alpha(uint64_t n) {
    uint64_t x = n;
    for (uint64_t i = 0; i < n; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    sink = x;
}

__attribute__((noinline)) void hot_beta(uint64_t n) {
    double d = 1.0;
    for (uint64_t i = 0; i < n; i++)
        d = d * 1.0000001 + 0.5;
    sink = (uint64_t)d;
}

__attribute__((noinline)) void hot_gamma(uint64_t n) {
    uint64_t a = 0, b = 1;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t = a + b;
        a = b;
        b = t ^ i;
    }
    sink = b;
}

static int zero_fd = -1;

/* Time in the kernel: copying pages out of /dev/zero. */
__attribute__((noinline)) void sys_heavy(uint64_t n) {
    static char buf[65536];
    for (uint64_t i = 0; i < n; i++)
        if (read(zero_fd, buf, sizeof buf) < 0)
            abort();
}

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

enum { ALPHA, BETA, GAMMA, LIB, SYS, NPROC };
static const char *names[NPROC] = {"hot_alpha", "hot_beta", "hot_gamma", "lib_spin", "sys_heavy"};
/* Target shares in percent; each call runs a chunk of about 2 ms. */
static const int weight[NPROC] = {40, 20, 10, 15, 15};

struct worker {
    double seconds;
    double cpu[NPROC];
};

static void call(int p, uint64_t n) {
    switch (p) {
    case ALPHA: hot_alpha(n); break;
    case BETA: hot_beta(n); break;
    case GAMMA: hot_gamma(n); break;
    case LIB: sink = lib_spin(n, n | 1); break;
    case SYS: sys_heavy(n); break;
    }
}

/* Iterations that take about 2 ms, found by doubling. */
static uint64_t calibrate(int p) {
    uint64_t n = 16;
    for (;;) {
        double t0 = thread_cpu();
        call(p, n);
        if (thread_cpu() - t0 > 0.002)
            return n;
        n *= 2;
    }
}

static void *work(void *arg) {
    struct worker *w = arg;
    uint64_t chunk[NPROC];
    for (int p = 0; p < NPROC; p++)
        chunk[p] = calibrate(p);
    memset(w->cpu, 0, sizeof w->cpu);
    /* Stop after `seconds` of this thread's CPU, so a loaded machine stretches the run instead of
     * shrinking the sample count (capped at 10x in wall time so that it cannot hang). */
    double cpu_end = thread_cpu() + w->seconds, wall_end = wall() + 10 * w->seconds;
    while (thread_cpu() < cpu_end && wall() < wall_end) {
        for (int p = 0; p < NPROC; p++) {
            /* Run each procedure in proportion to its weight. */
            for (int k = 0; k < weight[p]; k += 5) {
                double t0 = thread_cpu();
                call(p, chunk[p]);
                w->cpu[p] += thread_cpu() - t0;
            }
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = 3;
    int threads = 1;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else {
            fprintf(stderr, "usage: selftime [--seconds S] [--threads N] [--out FILE]\n");
            return 2;
        }
    }
    zero_fd = open("/dev/zero", O_RDONLY);
    if (zero_fd < 0 || threads < 1)
        return 1;
    struct worker *w = calloc(threads, sizeof *w);
    pthread_t *t = calloc(threads, sizeof *t);
    double t0 = wall();
    for (int i = 0; i < threads; i++) {
        w[i].seconds = seconds;
        pthread_create(&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double elapsed = wall() - t0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double ut = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
    double st = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f)
        return 1;
    fprintf(f, "{\"seconds\": %.6f, \"total_cpu\": %.6f, \"utime\": %.6f, \"stime\": %.6f, \"pid\": %d, \"procedures\": {",
            elapsed, ut + st, ut, st, (int)getpid());
    for (int p = 0; p < NPROC; p++) {
        double sum = 0;
        for (int i = 0; i < threads; i++)
            sum += w[i].cpu[p];
        fprintf(f, "%s\"%s\": %.6f", p ? ", " : "", names[p], sum);
    }
    fprintf(f, "}}\n");
    return f == stdout ? 0 : fclose(f);
}
