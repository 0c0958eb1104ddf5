/*
 * Call stacks through code without frame pointers: built -O2
 * -fomit-frame-pointer, main -> sort_all -> libc's qsort -> compare (a
 * callback that does measurable work). Debian's libc keeps no frame
 * pointers either, so a frame-pointer walk loses everything above qsort;
 * only DWARF CFI (stack copies, or unwind tables in the kernel) reaches
 * main. Nearly all CPU time is spent under main by construction.
 *
 *   qsortcb [--seconds S] [--out FILE]
 *
 * Writes JSON: {"pid", "sorts", "compare_calls"}.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;
static uint64_t calls;

__attribute__((noinline)) static uint64_t mix(uint64_t x) {
    for (int i = 0; i < 40; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

static int compare(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    calls++;
    sink += mix(x ^ y);
    return x < y ? -1 : x > y;
}

__attribute__((noinline)) static void sort_all(uint64_t *v, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++)
        v[i] = mix(seed + i);
    qsort(v, n, sizeof v[0], compare);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = 3;
    const char *out = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds"))
            seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--out"))
            out = argv[i + 1];
    }
    enum { N = 4096 };
    static uint64_t v[N];
    uint64_t sorts = 0;
    for (double end = now() + seconds; now() < end; sorts++)
        sort_all(v, N, sorts);
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f)
        return 1;
    fprintf(f, "{\"pid\": %d, \"sorts\": %llu, \"compare_calls\": %llu}\n", (int)getpid(), (unsigned long long)sorts,
            (unsigned long long)calls);
    return out ? fclose(f) != 0 : 0;
}
