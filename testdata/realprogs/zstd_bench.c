/* zstd-bench LEVEL MEGABYTES [SEED]: a compressor workload over the zstd
 * library. Generates a corpus (words from a skewed vocabulary with numbers,
 * like logs), compresses it at LEVEL, decompresses it and checks the bytes.
 * Prints the compressed size and a checksum so that builds can be compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "zstd.h"

static unsigned long long rng;
static unsigned long long next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const char *words[] = {"GET", "POST", "/api/v1/items", "/static/app.js", "200", "404", "user",
                              "session", "latency_ms", "cache", "miss", "hit", "error", "timeout",
                              "upstream", "retry", "ok", "debug", "info", "warn"};

static size_t corpus(char *buf, size_t size) {
    size_t n = 0;
    while (n + 64 < size) {
        unsigned long long r = next();
        if (r % 5 == 0) {
            n += (size_t)snprintf(buf + n, 32, "%llu ", r % 100000);
        } else {
            /* skewed: low indices are far more common */
            unsigned w = (unsigned)((r >> 8) % 20);
            w = w * w / 20;
            size_t len = strlen(words[w]);
            memcpy(buf + n, words[w], len);
            n += len;
            buf[n++] = (r >> 20) % 9 == 0 ? '\n' : ' ';
        }
    }
    return n;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: zstd-bench LEVEL MEGABYTES [SEED]\n");
        return 2;
    }
    int level = atoi(argv[1]);
    size_t size = (size_t)atoi(argv[2]) << 20;
    rng = argc > 3 ? strtoull(argv[3], NULL, 10) | 1 : 88172645463325252ull;
    char *src = malloc(size), *back = malloc(size);
    size_t len = corpus(src, size);
    size_t bound = ZSTD_compressBound(len);
    char *dst = malloc(bound);
    size_t csize = ZSTD_compress(dst, bound, src, len, level);
    if (ZSTD_isError(csize)) {
        fprintf(stderr, "zstd-bench: %s\n", ZSTD_getErrorName(csize));
        return 1;
    }
    unsigned long long sum = 0;
    for (int round = 0; round < 3; round++) {
        size_t dsize = ZSTD_decompress(back, size, dst, csize);
        if (ZSTD_isError(dsize) || dsize != len || memcmp(src, back, len)) {
            fprintf(stderr, "zstd-bench: round trip failed\n");
            return 1;
        }
        sum += dsize;
    }
    printf("compressed %zu -> %zu checksum %llu\n", len, csize, sum);
    return 0;
}
