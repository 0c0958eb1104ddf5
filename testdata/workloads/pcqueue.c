// A producer and a consumer thread handing items through a small bounded
// queue that report their own throughput (issue 29): the placement agent's
// ground truth. --wait block: a mutex and two condition variables (every
// hand-off may wake the other thread, an IPI when it sits on another CPU);
// --wait spin: both threads spin on the indexes and never sleep, so placing
// them on one CPU makes each wait last a time slice (a regression by
// construction). The consumer checks every item's value, so a placement
// can never change the result, only its speed.
// Usage: pcqueue --wait block|spin --seconds S --counter FILE
//   FILE holds the items consumed so far (decimal, rewritten every 50 ms);
//   at the end one JSON line: items, seconds, errors.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 16
static uint64_t ring[SLOTS];
static _Atomic uint64_t head, tail; // head: next to write; tail: next to read
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER, not_empty = PTHREAD_COND_INITIALIZER;
static int spin;
static _Atomic int done;
static uint64_t consumed, errors;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static uint64_t item(uint64_t i) { return i * 2654435761u + 7; }

static void *producer(void *arg) {
    (void)arg;
    for (uint64_t i = 0; !atomic_load(&done); i++) {
        if (spin) {
            while (atomic_load(&head) - atomic_load(&tail) == SLOTS)
                if (atomic_load(&done)) return 0;
            ring[i % SLOTS] = item(i);
            atomic_store(&head, i + 1);
        } else {
            pthread_mutex_lock(&mu);
            while (head - tail == SLOTS && !atomic_load(&done)) pthread_cond_wait(&not_full, &mu);
            ring[i % SLOTS] = item(i);
            atomic_store(&head, i + 1);
            pthread_cond_signal(&not_empty);
            pthread_mutex_unlock(&mu);
        }
    }
    return 0;
}

static void take(uint64_t i) {
    errors += ring[i % SLOTS] != item(i);
    __atomic_store_n(&consumed, i + 1, __ATOMIC_RELAXED);
}

static void *consumer(void *arg) {
    (void)arg;
    for (uint64_t i = 0; !atomic_load(&done); i++) {
        if (spin) {
            while (atomic_load(&head) == i)
                if (atomic_load(&done)) return 0;
            take(i);
            atomic_store(&tail, i + 1);
        } else {
            pthread_mutex_lock(&mu);
            while (head == i && !atomic_load(&done)) pthread_cond_wait(&not_empty, &mu);
            if (head == i) { pthread_mutex_unlock(&mu); return 0; }
            take(i);
            atomic_store(&tail, i + 1);
            pthread_cond_signal(&not_full);
            pthread_mutex_unlock(&mu);
        }
    }
    return 0;
}

static void report(int fd, uint64_t n) {
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%20llu\n", (unsigned long long)n);
    if (pwrite(fd, buf, len, 0) != len) perror("counter");
}

int main(int argc, char **argv) {
    double seconds = 5;
    const char *counter = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--wait")) spin = !strcmp(argv[i + 1], "spin");
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--counter")) counter = argv[i + 1];
    }
    int fd = counter ? open(counter, O_WRONLY | O_CREAT | O_TRUNC, 0600) : -1;
    pthread_t p, c;
    pthread_create(&p, 0, producer, 0);
    pthread_create(&c, 0, consumer, 0);
    double start = now(), t = start;
    while (t - start < seconds) {
        usleep(50000);
        t = now();
        if (fd >= 0) report(fd, __atomic_load_n(&consumed, __ATOMIC_RELAXED));
    }
    atomic_store(&done, 1);
    pthread_mutex_lock(&mu);
    pthread_cond_broadcast(&not_full);
    pthread_cond_broadcast(&not_empty);
    pthread_mutex_unlock(&mu);
    pthread_join(p, 0);
    pthread_join(c, 0);
    if (fd >= 0) report(fd, consumed);
    printf("{\"items\": %llu, \"seconds\": %.3f, \"errors\": %llu}\n", (unsigned long long)consumed, t - start,
           (unsigned long long)errors);
    return errors != 0;
}
