/* A workload whose speed depends on code layout, for `loupe optimize`:
 * a bytecode interpreter (switch dispatch) whose hot handlers sit among
 * large, never-executed error paths, plus hot helper functions spread
 * between cold ones. Prints a checksum that any correct layout of the
 * same code reproduces exactly.
 * Usage: layout [ITERATIONS] [SEED] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define COLD __attribute__((noinline))

static volatile int fail_flag;

/* A large cold routine placed between hot ones by the source order. */
COLD static uint64_t cold_report(const char *what, uint64_t v) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = what; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    fprintf(stderr, "layout: unexpected %s (%llu, %llu)\n", what, (unsigned long long)v, (unsigned long long)h);
    if (fail_flag) abort();
    return h ^ v;
}

COLD uint64_t mix(uint64_t a, uint64_t b) {
    if (__builtin_expect(a == 0x123456789abcdefull, 0)) {
        a = cold_report("mix key", a);
        a ^= cold_report("mix key 2", b);
        a += cold_report("mix key 3", a ^ b);
    }
    a ^= b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2);
    return a;
}

COLD uint64_t cold_a(uint64_t x) { return cold_report("a", x) * 3 + cold_report("a2", x >> 1); }
COLD uint64_t cold_b(uint64_t x) { return cold_report("b", x) * 5 + cold_report("b2", x >> 2); }

COLD uint64_t step(uint64_t x) {
    if (__builtin_expect(x == 0x5eed5eed5eed5eedull, 0)) x += cold_a(x) + cold_b(x);
    return x * 6364136223846793005ull + 1442695040888963407ull;
}

COLD uint64_t cold_c(uint64_t x) { return cold_report("c", x) + cold_report("c2", x + 1) + cold_report("c3", x + 2); }

enum { OP_ADD, OP_XOR, OP_MIX, OP_STEP, OP_SHIFT, OP_JNZ, OP_HALT, OP_BAD1, OP_BAD2, OP_BAD3 };

/* Runs `prog` on accumulator `acc`; the error cases are large and cold. */
COLD uint64_t run(const uint8_t *prog, int n, uint64_t acc, int loops) {
    int pc = 0;
    uint64_t r = acc, k = (uint64_t)loops;
    while (pc < n) {
        switch (prog[pc]) {
        case OP_ADD: r += prog[pc + 1]; pc += 2; break;
        case OP_XOR: r ^= (uint64_t)prog[pc + 1] << 7; pc += 2; break;
        case OP_MIX: r = mix(r, k); pc += 1; break;
        case OP_STEP: r = step(r); pc += 1; break;
        case OP_SHIFT: r = (r >> 3) | (r << 61); pc += 1; break;
        case OP_JNZ: if (--k) pc = prog[pc + 1]; else pc += 2; break;
        case OP_HALT: return r;
        case OP_BAD1: r = cold_c(r) + cold_report("bad1", r); pc += 1; break;
        case OP_BAD2: r = cold_a(r) ^ cold_b(r) ^ cold_c(r); pc += 1; break;
        case OP_BAD3: r = cold_report("bad3", r) * cold_report("bad3b", r + 1); pc += 1; break;
        default: r = cold_report("opcode", prog[pc]); pc += 1; break;
        }
    }
    return r;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    uint64_t seed = argc > 2 ? strtoull(argv[2], 0, 10) : 1;
    /* x = ((x+5) ^ 3<<7) mixed, stepped, rotated; loop back to 0. */
    const uint8_t prog[] = {OP_ADD, 5, OP_XOR, 3, OP_MIX, OP_STEP, OP_SHIFT, OP_STEP, OP_JNZ, 0, OP_HALT};
    uint64_t sum = seed;
    for (long i = 0; i < iters; i++) sum += run(prog, sizeof prog, sum + (uint64_t)i, 10000);
    printf("checksum %016llx\n", (unsigned long long)sum);
    return 0;
}
