/*
 * Ground truth for call stacks: main -> a, and a -> b -> c, a -> d -> c.
 * c lives in libcallee (built twice: with frame pointers and with
 * -fomit-frame-pointer, which only DWARF CFI can unwind through).
 * Every region measures its own CPU time with CLOCK_THREAD_CPUTIME_ID, so
 * each function's self time and each path's share are known.
 *
 *   callstack [--seconds S] [--out FILE]
 *
 * Writes JSON: {"pid", "total_cpu", "self": {"a","b","d","c_via_b","c_via_d"}}.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t c_work(uint64_t n, uint64_t seed);

static volatile uint64_t sink;
enum { A, B, D, CB, CD, N };
static const char *names[N] = {"a", "b", "d", "c_via_b", "c_via_d"};
/* Target shares in percent of the loop. */
static const int weight[N] = {10, 20, 15, 25, 30};
static double cpu[N];
static uint64_t chunk[N];

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static uint64_t spin(uint64_t n) {
    uint64_t x = n;
    for (uint64_t i = 0; i < n; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

/* Each function's self work is inlined into it (spin is static and small),
 * so samples there are in the function itself. */
#define SELF(slot) do { double t0 = thread_cpu(); sink = spin(chunk[slot]); cpu[slot] += thread_cpu() - t0; } while (0)
#define CALL_C(slot) do { double t0 = thread_cpu(); sink = c_work(chunk[slot], sink | 1); cpu[slot] += thread_cpu() - t0; } while (0)

__attribute__((noinline)) void b(void) { SELF(B); CALL_C(CB); __asm__ volatile(""); }
__attribute__((noinline)) void d(void) { SELF(D); CALL_C(CD); __asm__ volatile(""); }
__attribute__((noinline)) void a(void) { SELF(A); b(); d(); __asm__ volatile(""); }

/* Iterations of spin (or c_work) that take about w * 0.1 ms. */
static uint64_t calibrate(int lib, int w) {
    uint64_t n = 1024;
    for (;;) {
        double t0 = thread_cpu();
        sink = lib ? c_work(n, 1) : spin(n);
        double t = thread_cpu() - t0;
        if (t > 0.002)
            return (uint64_t)(n * (w * 0.0001) / t) + 1;
        n *= 2;
    }
}

int main(int argc, char **argv) {
    double seconds = 3;
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc) seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else { fprintf(stderr, "usage: callstack [--seconds S] [--out FILE]\n"); return 2; }
    }
    for (int s = 0; s < N; s++)
        chunk[s] = calibrate(s == CB || s == CD, weight[s]);
    memset(cpu, 0, sizeof cpu);
    double t0 = thread_cpu();
    while (thread_cpu() - t0 < seconds)
        a();
    double total = thread_cpu() - t0;
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) { perror(out); return 1; }
    fprintf(f, "{\"pid\": %d, \"total_cpu\": %.6f, \"self\": {", (int)getpid(), total);
    for (int s = 0; s < N; s++)
        fprintf(f, "%s\"%s\": %.6f", s ? ", " : "", names[s], cpu[s]);
    fprintf(f, "}}\n");
    if (out) fclose(f);
    return 0;
}
