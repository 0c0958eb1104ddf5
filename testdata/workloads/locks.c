/*
 * Ground-truth workload for lock measurements: threads take two static
 * mutexes and one heap mutex, spin a known time inside each critical
 * section, and measure for themselves, with CLOCK_MONOTONIC, how long each
 * lock was held (timestamps just after acquiring and just before
 * releasing) and waited for (around the lock call).
 *
 *   locks [--threads N] [--iters K] [--hot-us H] [--cold-us C] [--heap-us P]
 *         [--outside-us O] [--out FILE]
 *
 * Per iteration each thread holds lock_hot while it burns H us of CPU,
 * lock_cold for C us and the heap lock for P us, then burns O us outside
 * any lock. Writes JSON:
 * {"pid", "seconds", "locks": {name: {"hold_s", "wait_s", "acquisitions"}}}.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t lock_hot = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_cold = PTHREAD_MUTEX_INITIALIZER;

struct shared {
    char pad[64];
    pthread_mutex_t lock;
};
static struct shared *heap_obj;

enum { HOT, COLD, HEAP, NLOCK };
static const char *names[NLOCK] = {"lock_hot", "lock_cold", "heap"};
static pthread_mutex_t *locks[NLOCK];
static double hold_us[NLOCK];
static double outside_us = 50;
static long iters = 200;

struct tally {
    double hold[NLOCK], wait[NLOCK];
    long n[NLOCK];
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Burns `us` of this thread's CPU time, so a thread preempted on a busy
 * machine stretches every section alike instead of cutting some short. */
static void spin(double us) {
    double end = thread_cpu() + us / 1e6;
    while (thread_cpu() < end)
        ;
}

static void *worker(void *arg) {
    struct tally *t = arg;
    for (long i = 0; i < iters; i++) {
        for (int l = 0; l < NLOCK; l++) {
            if (hold_us[l] <= 0)
                continue;
            double t0 = now();
            pthread_mutex_lock(locks[l]);
            double t1 = now();
            spin(hold_us[l]);
            double t2 = now();
            pthread_mutex_unlock(locks[l]);
            t->wait[l] += t1 - t0;
            t->hold[l] += t2 - t1;
            t->n[l]++;
        }
        spin(outside_us);
    }
    return NULL;
}

/* A separate function, so the heap lock's init site has a name of its own. */
__attribute__((noinline)) void make_heap_lock(void) {
    heap_obj = malloc(sizeof *heap_obj);
    pthread_mutex_init(&heap_obj->lock, NULL);
}

int main(int argc, char **argv) {
    int threads = 2;
    const char *out = NULL;
    hold_us[HOT] = 200, hold_us[COLD] = 40, hold_us[HEAP] = 100;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--threads")) threads = atoi(v);
        else if (!strcmp(k, "--iters")) iters = atol(v);
        else if (!strcmp(k, "--hot-us")) hold_us[HOT] = atof(v);
        else if (!strcmp(k, "--cold-us")) hold_us[COLD] = atof(v);
        else if (!strcmp(k, "--heap-us")) hold_us[HEAP] = atof(v);
        else if (!strcmp(k, "--outside-us")) outside_us = atof(v);
        else if (!strcmp(k, "--out")) out = v;
        else {
            fprintf(stderr, "locks: unknown option %s\n", k);
            return 2;
        }
    }
    make_heap_lock();
    locks[HOT] = &lock_hot, locks[COLD] = &lock_cold, locks[HEAP] = &heap_obj->lock;
    pthread_t tid[64];
    struct tally t[64];
    memset(t, 0, sizeof t);
    if (threads < 1 || threads > 64)
        return 2;
    double start = now();
    for (int i = 0; i < threads; i++)
        pthread_create(&tid[i], NULL, worker, &t[i]);
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    double seconds = now() - start;
    FILE *f = out ? fopen(out, "w") : stdout;
    if (!f)
        return 1;
    fprintf(f, "{\"pid\": %d, \"seconds\": %.6f, \"locks\": {", (int)getpid(), seconds);
    for (int l = 0; l < NLOCK; l++) {
        double h = 0, w = 0;
        long n = 0;
        for (int i = 0; i < threads; i++)
            h += t[i].hold[l], w += t[i].wait[l], n += t[i].n[l];
        fprintf(f, "%s\"%s\": {\"hold_s\": %.6f, \"wait_s\": %.6f, \"acquisitions\": %ld}", l ? ", " : "", names[l], h, w, n);
    }
    fprintf(f, "}}\n");
    if (out)
        fclose(f);
    return 0;
}
