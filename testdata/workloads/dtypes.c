/* Known-by-construction types for loupe's type flow and allocation typing
 * (issue 28). Built -O1 -g and -O2 -g by the dataprof tests; each function
 * is one case, `noinline` so its code stays its own.
 *
 *   alloc_static   heap block stored into a typed static pointer
 *   alloc_field    heap block stored into a field of another struct
 *   new_node       block kept in a typed local, returned through a typed wrapper
 *   xmalloc        a `void *` wrapper two levels deep (xmalloc -> xalloc -> malloc): its
 *                  blocks are typed where a caller up the stack stores them (make_a, make_b)
 *   bump_left      pointer loaded from a typed static, then dereferenced
 *   bump_inner     nested struct inside an array inside a struct
 *   walk           list walk: the pointer comes from a field of the same type
 *
 * Run: `dtypes SECS`: two threads pinned to CPUs 0 and 1 bump the two fields
 * of `pair` (false sharing of struct tally_pair.left/right) for SECS seconds.
 * `dtypes SECS late`: allocates `pair` after 200 ms, so an access history
 * (`loupe data history`, armed once the process's maps are read) can watch it.
 * `dtypes SECS wrap`: for SECS seconds, `poke` bumps rec_a.hits and
 * rec_b.total through a `void *` (no type in any register), in blocks that
 * make_a/make_b got from xmalloc: only the allocation's callers type them.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct tally_pair {
    long left;
    long right;
};

struct inner {
    int a;
    int b;
};

struct outer {
    long tag;
    struct inner in[4];
    struct tally_pair *pair;
};

struct node {
    long key;
    struct node *next;
};

struct rec_a {
    long id;
    long hits;
};

struct rec_b {
    long first;
    long second;
    long total;
};

struct tally_pair *pair;
struct outer *outer;
struct node *list;
struct rec_a *ra;
struct rec_b *rb;
size_t allocated;

__attribute__((noinline)) void alloc_static(void) {
    pair = aligned_alloc(64, 64);
}

__attribute__((noinline)) void alloc_field(struct outer *o) {
    o->pair = malloc(sizeof *o->pair);
}

__attribute__((noinline)) void *xalloc(size_t n) {
    void *p = malloc(n);
    if (!p)
        abort();
    return p;
}

/* Counts what it hands out, so the call to xalloc is not a tail call: two frames deep. */
__attribute__((noinline)) void *xmalloc(size_t n) {
    void *p = xalloc(n);
    allocated += n;
    return p;
}

__attribute__((noinline)) void make_a(void) {
    ra = xmalloc(sizeof *ra);
    ra->id = 1;
}

__attribute__((noinline)) void make_b(void) {
    rb = xmalloc(sizeof *rb);
    rb->first = 2;
}

/* The word at byte `off` of an object only known as `void *`. */
__attribute__((noinline)) void poke(void *p, size_t off) {
    ((volatile long *)p)[off / sizeof(long)]++;
}

static void wrap(double secs) {
    make_a();
    make_b();
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 100000; i++) {
            poke(ra, offsetof(struct rec_a, hits));
            poke(rb, offsetof(struct rec_b, total));
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
}

__attribute__((noinline)) struct node *new_node(long key, struct node *next) {
    struct node *n = malloc(sizeof *n);
    if (!n)
        abort();
    n->key = key;
    n->next = next;
    return n;
}

__attribute__((noinline)) void bump_left(void) {
    pair->left++;
}

__attribute__((noinline)) void bump_right(void) {
    pair->right++;
}

__attribute__((noinline)) void bump_inner(void) {
    outer->in[2].b++;
}

__attribute__((noinline)) long walk(struct node *n) {
    long s = 0;
    for (; n; n = n->next)
        s += n->key;
    return s;
}

static volatile int stop;

struct job {
    void (*bump)(void);
    int cpu;
};

static void *worker(void *arg) {
    struct job *j = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    while (!stop)
        for (int i = 0; i < 1000; i++)
            j->bump();
    return 0;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 0.1;
    if (argc > 2 && strcmp(argv[2], "wrap") == 0) {
        wrap(secs);
        return (int)(ra->hits + rb->total) == 0;
    }
    if (argc > 2) {
        struct timespec late = {0, 200000000};
        nanosleep(&late, 0);
    }
    alloc_static();
    outer = xmalloc(sizeof *outer);
    alloc_field(outer);
    for (long k = 0; k < 4; k++)
        list = new_node(k, list);
    struct job ja = {bump_left, 0}, jb = {bump_right, 1};
    pthread_t a, b;
    pthread_create(&a, 0, worker, &ja);
    pthread_create(&b, 0, worker, &jb);
    struct timespec t = {(time_t)secs, (long)((secs - (time_t)secs) * 1e9)};
    nanosleep(&t, 0);
    stop = 1;
    pthread_join(a, 0);
    pthread_join(b, 0);
    bump_inner();
    return (int)(walk(list) + pair->left + pair->right + outer->in[2].b) == 0;
}
