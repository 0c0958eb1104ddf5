/* A program whose usage changes with an argument, for the optimize
 * manager's drift: mode 0 runs interpreter `run_a` and its helpers
 * `mix_a`/`step_a`, mode 1 runs `run_b` with `fold_b`/`twist_b`. No
 * function but `main` is shared between the modes, so which functions are
 * hot is known by construction from the mode. Like `layout`, each hot path
 * sits among large never-executed error routines, so code layout matters.
 * Prints a checksum that any correct layout of the same code reproduces.
 * Usage: modes [ITERATIONS] [MODE] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define COLD __attribute__((noinline))

static volatile int fail_flag;

COLD static uint64_t cold_report(const char *what, uint64_t v) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = what; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    fprintf(stderr, "modes: unexpected %s (%llu, %llu)\n", what, (unsigned long long)v, (unsigned long long)h);
    if (fail_flag) abort();
    return h ^ v;
}

COLD uint64_t mix_a(uint64_t a, uint64_t b) {
    if (__builtin_expect(a == 0x123456789abcdefull, 0)) {
        a = cold_report("mix key", a);
        a ^= cold_report("mix key 2", b);
    }
    a ^= b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2);
    return a;
}

COLD uint64_t cold_a(uint64_t x) { return cold_report("a", x) * 3 + cold_report("a2", x >> 1); }

COLD uint64_t step_a(uint64_t x) {
    if (__builtin_expect(x == 0x5eed5eed5eed5eedull, 0)) x += cold_a(x);
    return x * 6364136223846793005ull + 1442695040888963407ull;
}

COLD uint64_t fold_b(uint64_t a, uint64_t b) {
    if (__builtin_expect(a == 0xfedcba987654321ull, 0)) {
        a = cold_report("fold key", a);
        a += cold_report("fold key 2", b);
    }
    a += (b ^ 0xc2b2ae3d27d4eb4full) + (a << 5) + (a >> 3);
    return a;
}

COLD uint64_t cold_b(uint64_t x) { return cold_report("b", x) * 5 + cold_report("b2", x >> 2); }

COLD uint64_t twist_b(uint64_t x) {
    if (__builtin_expect(x == 0xdeadbeefdeadbeefull, 0)) x ^= cold_b(x);
    return x * 2862933555777941757ull + 3037000493ull;
}

COLD uint64_t cold_c(uint64_t x) { return cold_report("c", x) + cold_report("c2", x + 1) + cold_report("c3", x + 2); }

enum { OP_ADD, OP_XOR, OP_CALL1, OP_CALL2, OP_SHIFT, OP_JNZ, OP_HALT, OP_BAD1, OP_BAD2, OP_BAD3 };

/* Mode 0's interpreter; the error cases are large and cold. */
COLD uint64_t run_a(const uint8_t *prog, int n, uint64_t acc, int loops) {
    int pc = 0;
    uint64_t r = acc, k = (uint64_t)loops;
    while (pc < n) {
        switch (prog[pc]) {
        case OP_ADD: r += prog[pc + 1]; pc += 2; break;
        case OP_XOR: r ^= (uint64_t)prog[pc + 1] << 7; pc += 2; break;
        case OP_CALL1: r = mix_a(r, k); pc += 1; break;
        case OP_CALL2: r = step_a(r); pc += 1; break;
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

COLD uint64_t cold_d(uint64_t x) { return cold_report("d", x) ^ cold_report("d2", x * 7) ^ cold_c(x); }

/* Mode 1's interpreter: the same shape over different helpers. */
COLD uint64_t run_b(const uint8_t *prog, int n, uint64_t acc, int loops) {
    int pc = 0;
    uint64_t r = acc, k = (uint64_t)loops;
    while (pc < n) {
        switch (prog[pc]) {
        case OP_ADD: r += prog[pc + 1] * 3u; pc += 2; break;
        case OP_XOR: r ^= (uint64_t)prog[pc + 1] << 11; pc += 2; break;
        case OP_CALL1: r = fold_b(r, k); pc += 1; break;
        case OP_CALL2: r = twist_b(r); pc += 1; break;
        case OP_SHIFT: r = (r >> 5) | (r << 59); pc += 1; break;
        case OP_JNZ: if (--k) pc = prog[pc + 1]; else pc += 2; break;
        case OP_HALT: return r;
        case OP_BAD1: r = cold_d(r) + cold_report("bad1b", r); pc += 1; break;
        case OP_BAD2: r = cold_b(r) ^ cold_a(r) ^ cold_d(r); pc += 1; break;
        case OP_BAD3: r = cold_report("bad3c", r) * cold_report("bad3d", r + 1); pc += 1; break;
        default: r = cold_report("opcode b", prog[pc]); pc += 1; break;
        }
    }
    return r;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 2000;
    int mode = argc > 2 ? atoi(argv[2]) : 0;
    const uint8_t prog[] = {OP_ADD, 5, OP_XOR, 3, OP_CALL1, OP_CALL2, OP_SHIFT, OP_CALL2, OP_JNZ, 0, OP_HALT};
    uint64_t (*run)(const uint8_t *, int, uint64_t, int) = mode ? run_b : run_a;
    uint64_t sum = (uint64_t)mode + 1;
    for (long i = 0; i < iters; i++) sum += run(prog, sizeof prog, sum + (uint64_t)i, 10000);
    printf("checksum %016llx\n", (unsigned long long)sum);
    return 0;
}
