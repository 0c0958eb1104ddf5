/*
 * Ground-truth workload for differential profiles: each procedure runs a
 * fixed number of work units (a unit is 10^6 dependent multiply-adds), so
 * its cost scales exactly with the units asked for, and measures its own
 * CPU time with CLOCK_THREAD_CPUTIME_ID.
 *
 *   scaling [--out FILE] [NAME=UNITS ...]
 *
 * NAME is one of steady_a, steady_b, steady_c, grow, vary (default 100
 * units each of steady_a, steady_b, steady_c and grow; vary 0). The work is
 * interleaved in 10 rounds so slow drifts of the machine hit every
 * procedure alike. Writes JSON: {"pid", "units": {name: n},
 * "procedures": {name: cpu seconds}}.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

/* Distinct constants keep the compiler from folding identical bodies into one. */
#define WORK(NAME, MUL, ADD)                                   \
    __attribute__((noinline)) void NAME(uint64_t units) {      \
        uint64_t x = units;                                    \
        for (uint64_t i = 0; i < units * 1000000; i++)         \
            x = x * (MUL) + (ADD);                             \
        sink = x;                                              \
    }

WORK(steady_a, 6364136223846793005ULL, 1442695040888963407ULL)
WORK(steady_b, 2862933555777941757ULL, 3037000493ULL)
WORK(steady_c, 3202034522624059733ULL, 4354685564936845319ULL)
WORK(grow, 1181783497276652981ULL, 7046029254386353131ULL)
WORK(vary, 9219741426499971445ULL, 2305843009213693951ULL)

enum { NPROC = 5, ROUNDS = 10 };
static const char *names[NPROC] = {"steady_a", "steady_b", "steady_c", "grow", "vary"};
static void (*const fns[NPROC])(uint64_t) = {steady_a, steady_b, steady_c, grow, vary};

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int lookup(const char *name, size_t len) {
    for (int p = 0; p < NPROC; p++)
        if (strlen(names[p]) == len && strncmp(names[p], name, len) == 0)
            return p;
    return -1;
}

int main(int argc, char **argv) {
    uint64_t units[NPROC] = {100, 100, 100, 100, 0};
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (eq && lookup(argv[i], eq - argv[i]) >= 0) {
            units[lookup(argv[i], eq - argv[i])] = strtoull(eq + 1, NULL, 10);
        } else {
            fprintf(stderr, "usage: scaling [--out FILE] [NAME=UNITS ...]; bad argument %s\n", argv[i]);
            return 2;
        }
    }
    double cpu[NPROC] = {0};
    for (int r = 0; r < ROUNDS; r++)
        for (int p = 0; p < NPROC; p++) {
            /* This round's share of the units; the first rounds take the remainder. */
            uint64_t n = units[p] / ROUNDS + ((uint64_t)r < units[p] % ROUNDS);
            double t0 = thread_cpu();
            if (n)
                fns[p](n);
            cpu[p] += thread_cpu() - t0;
        }
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f) {
        perror(out);
        return 1;
    }
    fprintf(f, "{\"pid\": %d, \"units\": {", (int)getpid());
    for (int p = 0; p < NPROC; p++)
        fprintf(f, "%s\"%s\": %llu", p ? ", " : "", names[p], (unsigned long long)units[p]);
    fprintf(f, "}, \"procedures\": {");
    for (int p = 0; p < NPROC; p++)
        fprintf(f, "%s\"%s\": %.6f", p ? ", " : "", names[p], cpu[p]);
    fprintf(f, "}}\n");
    if (out)
        fclose(f);
    return 0;
}
