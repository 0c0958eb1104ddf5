// Allocation tracking ground truth: allocates known sizes at known call
// sites (each a noinline function), from two threads, through malloc,
// calloc, realloc, operator new and new[], and prints every block it got
// and freed, so a tracker's log can be compared line by line:
//   A <function> <size> <address> <tid>     F <address> <tid>
// Usage: allocs [rounds [output file]]   (default 200 rounds, stdout)
#include <cstdio>
#include <cstdlib>
#include <pthread.h>
#include <unistd.h>
#include <sys/syscall.h>

struct Node {
    long key, value, left, right, height;  // 40 bytes
};

static long tid() { return syscall(SYS_gettid); }

extern "C" {
__attribute__((noinline)) void *make_small() { return malloc(24); }
__attribute__((noinline)) void *make_zeroed() { return calloc(10, 8); }
__attribute__((noinline)) void *grow(void *p) { return realloc(p, 4096); }
__attribute__((noinline)) Node *make_node() { return new Node(); }
__attribute__((noinline)) long *make_array() { return new long[16]; }
}

static int rounds = 200;
static void **worker_blocks;

static void *worker(void *) {
    for (int i = 0; i < rounds; i++) {
        worker_blocks[i] = make_small();
        printf("A make_small 24 %p %ld\n", worker_blocks[i], tid());
    }
    return nullptr;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    if (argc > 2 && !freopen(argv[2], "w", stdout)) return 2;
    setvbuf(stdout, nullptr, _IOFBF, 1 << 20);
    long me = tid();
    worker_blocks = static_cast<void **>(malloc(sizeof(void *) * rounds));
    printf("A main %zu %p %ld\n", sizeof(void *) * rounds, static_cast<void *>(worker_blocks), me);
    pthread_t t;
    pthread_create(&t, nullptr, worker, nullptr);
    pthread_join(t, nullptr);
    for (int i = 0; i < rounds; i++) {
        void *s = make_small();
        printf("A make_small 24 %p %ld\n", s, me);
        void *z = make_zeroed();
        printf("A make_zeroed 80 %p %ld\n", z, me);
        Node *n = make_node();
        printf("A make_node %zu %p %ld\n", sizeof(Node), static_cast<void *>(n), me);
        long *a = make_array();
        printf("A make_array %zu %p %ld\n", 16 * sizeof(long), static_cast<void *>(a), me);
        printf("F %p %ld\n", s, me);  // realloc frees the old block, then allocates
        void *g = grow(s);
        printf("A grow 4096 %p %ld\n", g, me);
        printf("F %p %ld\n", g, me);
        free(g);
        printf("F %p %ld\n", z, me);
        free(z);
        printf("F %p %ld\n", static_cast<void *>(n), me);
        delete n;
        printf("F %p %ld\n", static_cast<void *>(a), me);
        delete[] a;
        printf("F %p %ld\n", worker_blocks[i], me);
        free(worker_blocks[i]);
    }
    printf("F %p %ld\n", static_cast<void *>(worker_blocks), me);
    free(worker_blocks);
    return 0;
}
