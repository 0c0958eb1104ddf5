// Random reads over a large anonymous mapping that report their own
// throughput (issue 29): the large-page agent's ground truth. Every word
// holds a value derived from its index, so each read is also checked: a
// page moved or split under the program must never change what it reads.
// The reads are independent (a xorshift stream of indexes), so their speed
// is bounded by address translation and cache misses, which is what 2 MiB
// pages change. The mapping is plain mmap (no madvise): the program itself
// never asks for huge pages.
// Usage: randaccess --mib N --seconds S --counter FILE
//   FILE holds the reads done so far (decimal, rewritten every 50 ms);
//   at the end one JSON line: reads, seconds, errors.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static uint64_t value_of(uint64_t i) { return i * 0x9E3779B97F4A7C15ull ^ 0x5bd1e995; }

static void report(int fd, uint64_t n) {
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%20llu\n", (unsigned long long)n);
    if (pwrite(fd, buf, len, 0) != len) perror("counter");
}

int main(int argc, char **argv) {
    size_t mib = 512;
    double seconds = 5;
    const char *counter = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mib")) mib = strtoul(argv[i + 1], 0, 10);
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--counter")) counter = argv[i + 1];
    }
    size_t words = mib * 1024 * 1024 / 8;
    uint64_t *a = mmap(0, words * 8, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) { perror("mmap"); return 1; }
    for (size_t i = 0; i < words; i++) a[i] = value_of(i);
    int fd = counter ? open(counter, O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
    uint64_t x = 88172645463325252ull, reads = 0, errors = 0, sum = 0;
    double start = now(), next = start + 0.05, t = start;
    while (t - start < seconds) {
        for (int k = 0; k < 4096; k++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            uint64_t i = x % words;
            uint64_t v = a[i];
            sum += v;
            errors += v != value_of(i);
        }
        reads += 4096;
        t = now();
        if (fd >= 0 && t >= next) { report(fd, reads); next = t + 0.05; }
    }
    if (fd >= 0) report(fd, reads);
    printf("{\"reads\": %llu, \"seconds\": %.3f, \"errors\": %llu, \"sum\": %llu}\n", (unsigned long long)reads, t - start,
           (unsigned long long)errors, (unsigned long long)sum);
    return errors != 0;
}
