/* Ground-truth workloads for `loupe data` (DProf). Each mode runs for the
 * given seconds and prints, on stdout, the address range of the data it
 * hammers so tests can check the sampled addresses against it.
 *
 *   falseshare SECS  two threads (pinned to CPUs 0 and 1) write different
 *                    fields of one `struct counters` (same cache line;
 *                    with -DPADDED the fields are 128 bytes apart)
 *   trueshare SECS   two threads write the same field of `struct counters`
 *   conflict SECS    one thread reads the first word of 24 `struct slot`s
 *                    4 KiB apart: all in one L1 set (24 lines > 12 ways),
 *                    a working set of 24 lines
 *   capacity SECS [MIB]  one thread visits random `struct node`s of a heap
 *                    array of MIB (default 128) MiB, to be chosen larger than
 *                    the last-level cache, and updates a small `struct tally`
 *                    now and then
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct counters {
    long a;
#ifdef PADDED
    char pad[120];
#endif
    long b;
};

static struct counters counters __attribute__((aligned(64)));

struct slot {
    long v;
    char pad[4096 - sizeof(long)];
};

static struct slot slots[24] __attribute__((aligned(4096)));

struct node {
    long key;
    long val[7];
};

struct tally {
    long visits;
    long sum;
};

static struct tally tally;
static volatile int stop;
static double secs;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu % (n > 0 ? n : 1), &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
}

__attribute__((noinline)) static void bump(volatile long *field) {
    for (int i = 0; i < 1000; i++)
        *field += 1;
}

static void *writer_a(void *arg) {
    (void)arg;
    pin(0);
    while (!stop)
        bump(&counters.a);
    return NULL;
}

static void *writer_b(void *arg) {
    int same = *(int *)arg;
    pin(1);
    while (!stop)
        bump(same ? &counters.a : &counters.b);
    return NULL;
}

static int sharing(int same) {
    printf("range %p %zu\n", (void *)&counters, sizeof counters);
    fflush(stdout);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, writer_a, NULL);
    pthread_create(&t2, NULL, writer_b, &same);
    double end = now() + secs;
    while (now() < end)
        usleep(10000);
    stop = 1;
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    return 0;
}

__attribute__((noinline)) static long sweep_slots(void) {
    long s = 0;
    for (int r = 0; r < 1000; r++)
        for (volatile struct slot *p = slots; p < slots + 24; p++)
            s += p->v;
    return s;
}

static int conflict(void) {
    printf("range %p %zu\n", (void *)slots, sizeof slots);
    fflush(stdout);
    double end = now() + secs;
    long s = 0;
    while (now() < end)
        s += sweep_slots();
    return s == 42;
}

__attribute__((noinline)) static long visit(struct node *n, long x) {
    n->val[x & 7 ? (x & 7) - 1 : 0] += x;
    return n->key + n->val[3];
}

static int capacity(size_t mib) {
    size_t count = (mib << 20) / sizeof(struct node);
    struct node *nodes = malloc(count * sizeof *nodes);
    if (!nodes)
        return 1;
    for (size_t i = 0; i < count; i++)
        nodes[i].key = (long)i;
    printf("range %p %zu\n", (void *)nodes, count * sizeof *nodes);
    fflush(stdout);
    double end = now() + secs;
    unsigned long x = 12345;
    while (now() < end) {
        for (int i = 0; i < 100000; i++) {
            x = x * 6364136223846793005ul + 1442695040888963407ul;
            long r = visit(&nodes[(x >> 17) % count], (long)x);
            if ((i & 63) == 0) {
                tally.visits++;
                tally.sum += r;
            }
        }
    }
    free(nodes);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s falseshare|trueshare|conflict|capacity [SECS [MIB]]\n", argv[0]);
        return 2;
    }
    secs = argc > 2 ? atof(argv[2]) : 1.0;
    if (!strcmp(argv[1], "falseshare"))
        return sharing(0);
    if (!strcmp(argv[1], "trueshare"))
        return sharing(1);
    if (!strcmp(argv[1], "conflict"))
        return conflict();
    if (!strcmp(argv[1], "capacity"))
        return capacity(argc > 3 ? strtoul(argv[3], NULL, 10) : 128);
    fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
}
