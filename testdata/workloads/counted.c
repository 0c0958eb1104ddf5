/* Known execution counts by construction, for `loupe calc`'s counted
 * executions (issue 30): `counted M N K` calls count_loop(N, K) M times;
 * its loop body runs exactly N times per call, and the `if` in it is taken
 * exactly K of the N times (i * 7919 mod N < K: 7919 is prime, so for N it
 * does not divide, i -> i * 7919 mod N is a permutation of 0..N-1).
 * `counted once N` calls long_loop(N) once: one call that lasts the whole
 * run, its loop run exactly N times and its `if` taken exactly 3 of every 8
 * (3N/8 for N a multiple of 8).
 * Prints one checksum, the same with or without counting. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) unsigned long count_loop(unsigned long n, unsigned long k, unsigned long x) {
    unsigned long taken = 0;
    for (unsigned long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if ((i * 7919) % n < k) {
            /* A side effect the compiler cannot turn into a conditional move: the branch stays. */
            __asm__ volatile("" ::: "memory");
            taken += x >> 3;
        }
    }
    return x + taken;
}

__attribute__((noinline)) unsigned long long_loop(unsigned long n, unsigned long x) {
    unsigned long taken = 0;
    for (unsigned long i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if ((i & 7) < 3) {
            __asm__ volatile("" ::: "memory");
            taken += x >> 3;
        }
    }
    return x + taken;
}

int main(int argc, char **argv) {
    if (argc == 3 && argv[1][0] == 'o') {
        printf("%lu\n", long_loop(strtoul(argv[2], 0, 10), 88172645463325252ul));
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: counted CALLS ITERATIONS TAKEN | counted once ITERATIONS\n");
        return 2;
    }
    unsigned long m = strtoul(argv[1], 0, 10), n = strtoul(argv[2], 0, 10), k = strtoul(argv[3], 0, 10);
    unsigned long sum = 0;
    for (unsigned long c = 0; c < m; c++)
        sum += count_loop(n, k, c * 2654435761u + 1);
    printf("%lu\n", sum);
    return 0;
}
