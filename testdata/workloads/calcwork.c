// Ground truth for `loupe calc`: procedures of the kinds DCPI measured
// (sorting, compression, an interpreter, a hash-table "database" probe,
// a numeric kernel) and three with a known dominant stall (pointer chase:
// D-cache; divide chain: divider; random branch: mispredict; 80 KB loop
// body: I-cache). Every
// repetition does identical work from a fixed seed, so exact execution
// counts for R repetitions follow from callgrind runs with 1 and 2:
// count(R) = count(1) + (R-1) * (count(2) - count(1)).
//
// usage: calcwork [--reps R] [--only NAME]
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

static uint32_t seed;
static uint32_t lcg(void) {
    seed = seed * 1664525u + 1013904223u;
    return seed >> 8;
}

NOINLINE void isort(int *a, int n) {
    for (int i = 1; i < n; i++) {
        int v = a[i], j = i - 1;
        while (j >= 0 && a[j] > v) {
            a[j + 1] = a[j];
            j--;
        }
        a[j + 1] = v;
    }
}

NOINLINE size_t rle(const uint8_t *in, size_t n, uint8_t *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = in[i];
        size_t run = 1;
        while (i + run < n && in[i + run] == c && run < 255) run++;
        if (run >= 3 || c == 0xff) {
            out[o++] = 0xff;
            out[o++] = (uint8_t)run;
            out[o++] = c;
        } else {
            for (size_t k = 0; k < run; k++) out[o++] = c;
        }
        i += run;
    }
    return o;
}

enum { OP_ADD, OP_SUB, OP_MUL, OP_XOR, OP_SHR, OP_JNZ, OP_LOAD, OP_STORE, OP_INC, OP_HALT };

NOINLINE long interp(const uint8_t *prog, long steps) {
    long acc = 1, r[8] = {3, 5, 7, 11, 13, 17, 19, 23};
    long pc = 0;
    for (long s = 0; s < steps; s++) {
        uint8_t op = prog[pc], x = prog[pc + 1] & 7;
        switch (op) {
        case OP_ADD: acc += r[x]; break;
        case OP_SUB: acc -= r[x]; break;
        case OP_MUL: acc *= r[x] | 1; break;
        case OP_XOR: acc ^= r[x] << 3; break;
        case OP_SHR: acc = (long)((unsigned long)acc >> (x + 1)); break;
        case OP_JNZ: if (acc & 1) { pc = (pc + 2 * x) & 254; continue; } break;
        case OP_LOAD: acc += r[(acc >> 4) & 7]; break;
        case OP_STORE: r[x] = acc; break;
        case OP_INC: r[x]++; break;
        default: pc = 0; continue;
        }
        pc = (pc + 2) & 254;
    }
    return acc + r[0];
}

NOINLINE void matmul(const double *a, const double *b, double *c, int n) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j];
            c[i * n + j] = s;
        }
}

NOINLINE long hashprobe(const uint32_t *keys, int n, uint32_t *table, int size) {
    long found = 0;
    memset(table, 0, sizeof(uint32_t) * size);
    for (int i = 0; i < n; i++) {
        uint32_t k = keys[i] | 1, h = (k * 2654435761u) & (size - 1);
        while (table[h] != 0 && table[h] != k) h = (h + 1) & (size - 1);
        table[h] = k;
    }
    for (int i = 0; i < n; i++) {
        uint32_t k = (keys[i] + (i & 1)) | 1, h = (k * 2654435761u) & (size - 1);
        while (table[h] != 0) {
            if (table[h] == k) {
                found++;
                break;
            }
            h = (h + 1) & (size - 1);
        }
    }
    return found;
}

NOINLINE long chase(const uint32_t *next, long steps) {
    uint32_t p = 0;
    long sum = 0;
    for (long s = 0; s < steps; s++) {
        p = next[p];
        sum += p;
    }
    return sum;
}

NOINLINE uint64_t divchain(uint64_t x, uint64_t d, long n) {
    for (long i = 0; i < n; i++) x = x / d + 0x123456789abcdefull;
    return x;
}

NOINLINE long branchy(const uint8_t *bits, int n) {
    long sum = 0;
    for (int i = 0; i < n; i++) {
        if (bits[i] & 1)
            sum += i * 3;
        else
            sum -= i ^ 5;
    }
    return sum;
}

// Code larger than the I-cache (last, so that it moves no other procedure:
// the loops' speed on Zen 5 depends on their alignment): a switch of 512 cases of 240 bytes of
// register-only arithmetic each (120 KB; Zen 5's L1i holds 32 KB), picked
// at random, so nearly every case starts with an instruction fetch from L2
// (and a mispredicted indirect jump); no loads or stores in the cases.
#define ICASE(n) case n: __asm__ volatile(".rept 24\n add $" #n ", %0\n xor %1, %2\n add %3, %1\n .endr" : "+r"(a), "+r"(b), "+r"(c), "+r"(d)); break;
#define ICASE8(n) ICASE(n##0) ICASE(n##1) ICASE(n##2) ICASE(n##3) ICASE(n##4) ICASE(n##5) ICASE(n##6) ICASE(n##7)
#define ICASE64(n) ICASE8(n##0) ICASE8(n##1) ICASE8(n##2) ICASE8(n##3) ICASE8(n##4) ICASE8(n##5) ICASE8(n##6) ICASE8(n##7)
NOINLINE long icache(long n) {
    long a = 1, b = 2, c = 3, d = 4;
    uint32_t x = 12345;
    for (long i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        switch ((x >> 16) % 800) {
            ICASE64(1) ICASE64(2) ICASE64(3) ICASE64(4) ICASE64(5) ICASE64(6) ICASE64(7)
            default: a ^= x; break;
        }
    }
    return a + b + c + d;
}

#define SORT_N 700
#define RLE_N (128 * 1024)
#define PROG_N 256
#define MAT_N 40
#define KEYS_N 20000
#define TABLE_N 65536
#define CHASE_N (2 * 1024 * 1024)
#define BITS_N (256 * 1024)

int main(int argc, char **argv) {
    long reps = 1;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--reps")) reps = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--only")) only = argv[i + 1];
    }
#define RUN(name) (!only || !strcmp(only, name))
    int *arr = malloc(sizeof(int) * SORT_N);
    uint8_t *raw = malloc(RLE_N), *packed = malloc(3 * RLE_N), prog[PROG_N], *bits = malloc(BITS_N);
    double *a = malloc(sizeof(double) * MAT_N * MAT_N), *b = malloc(sizeof(double) * MAT_N * MAT_N),
           *c = malloc(sizeof(double) * MAT_N * MAT_N);
    uint32_t *keys = malloc(sizeof(uint32_t) * KEYS_N), *table = malloc(sizeof(uint32_t) * TABLE_N);
    uint32_t *next = malloc(sizeof(uint32_t) * CHASE_N);
    // One random cycle through the chase array (Sattolo), built once.
    seed = 7;
    for (uint32_t i = 0; i < CHASE_N; i++) next[i] = i;
    for (uint32_t i = CHASE_N - 1; i > 0 && RUN("chase"); i--) {
        uint32_t j = lcg() % i, t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
    long check = 0;
    for (long r = 0; r < reps; r++) {
        seed = 12345;
        // Inputs only for the procedures that run (--only keeps set-up out of the profile).
        if (RUN("isort")) for (int i = 0; i < SORT_N; i++) arr[i] = (int)(lcg() % 100000);
        if (RUN("rle")) for (int i = 0; i < RLE_N; i++) raw[i] = (lcg() % 5 == 0) ? (uint8_t)(lcg() & 3) : raw[i > 0 ? i - 1 : 0];
        if (RUN("interp")) for (int i = 0; i < PROG_N; i++) prog[i] = (uint8_t)(i % 2 == 0 ? lcg() % 10 : lcg() & 7);
        if (RUN("matmul")) for (int i = 0; i < MAT_N * MAT_N; i++) a[i] = (lcg() % 100) / 10.0, b[i] = (lcg() % 100) / 7.0;
        if (RUN("hashprobe")) for (int i = 0; i < KEYS_N; i++) keys[i] = lcg();
        if (RUN("branchy")) for (int i = 0; i < BITS_N; i++) bits[i] = (uint8_t)(lcg() >> 16); // high LCG bits: low ones have short periods a predictor learns
        if (RUN("isort")) isort(arr, SORT_N), check += arr[SORT_N / 2];
        if (RUN("rle")) check += (long)rle(raw, RLE_N, packed);
        if (RUN("interp")) check += interp(prog, 300000);
        if (RUN("matmul")) matmul(a, b, c, MAT_N), check += (long)c[7];
        if (RUN("hashprobe")) check += hashprobe(keys, KEYS_N, table, TABLE_N);
        if (RUN("chase")) check += chase(next, 15000);
        if (RUN("divchain")) check += (long)divchain(0xfedcba9876543210ull, 3 + (r & 1) * 0, 60000);
        if (RUN("branchy")) check += branchy(bits, BITS_N);
        if (RUN("icache")) check += icache(20000);
    }
    printf("%ld\n", check);
    return 0;
}
