// Producer/consumer queue with a known data flow (DProf's data flow view,
// issue 9 test 5): a producer pinned to CPU 0 allocates each message in
// make_msg, writes seq and payload in fill_msg and enq_stamp in enqueue;
// a consumer pinned to CPU 1 reads enq_stamp and writes deq_stamp in
// dequeue, reads seq and payload in consume, and frees it in release_msg.
// Every field access is one volatile load or store, so per message:
//   offset 0  (seq):       fill_msg W (CPU 0), consume R (CPU 1)
//   offset 8  (payload):   fill_msg W (CPU 0), consume R (CPU 1)
//   offset 16 (enq_stamp): enqueue W (CPU 0),  dequeue R (CPU 1)
//   offset 24 (deq_stamp): dequeue W (CPU 1)
// The queue is a single-producer single-consumer ring of pointers, so the
// queue itself never touches a message. A thread waiting on the ring yields
// its CPU after a short spin: on a loaded machine the other thread may be
// off its CPU for a whole time slice, and spinning through it would leave
// the messages' accesses a sliver of the samples.
// Usage: queue [messages]   (default 200000); prints its own tally.
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct msg {
    long seq;        // 0
    long payload;    // 8
    long enq_stamp;  // 16
    long deq_stamp;  // 24
    char pad[32];    // 64 bytes in all
};

#define SLOTS 1024
static struct msg *_Atomic ring[SLOTS];
static long messages = 200000;
static long checksum;
static int cpus_ok = 1;

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    sched_yield();
    if (sched_getcpu() != cpu) cpus_ok = 0;
}

__attribute__((noinline)) struct msg *make_msg(void) { return malloc(sizeof(struct msg)); }

__attribute__((noinline)) void fill_msg(volatile struct msg *m, long i) {
    m->seq = i;
    m->payload = i * 3;
}

__attribute__((noinline)) void enqueue(volatile struct msg *m, long i) {
    m->enq_stamp = i;
    for (int spins = 0; atomic_load_explicit(&ring[i % SLOTS], memory_order_acquire); spins++) {
        if (spins > 256) sched_yield();
    }
    atomic_store_explicit(&ring[i % SLOTS], (struct msg *)m, memory_order_release);
}

__attribute__((noinline)) struct msg *dequeue(long i) {
    struct msg *m;
    for (int spins = 0; !(m = atomic_load_explicit(&ring[i % SLOTS], memory_order_acquire)); spins++) {
        if (spins > 256) sched_yield();
    }
    atomic_store_explicit(&ring[i % SLOTS], NULL, memory_order_release);
    volatile struct msg *v = m;
    v->deq_stamp = v->enq_stamp + 1;
    return m;
}

__attribute__((noinline)) long consume(volatile struct msg *m) { return m->seq + m->payload; }

__attribute__((noinline)) void release_msg(struct msg *m) { free(m); }

static void *producer(void *arg) {
    (void)arg;
    pin(0);
    for (long i = 0; i < messages; i++) {
        struct msg *m = make_msg();
        fill_msg(m, i);
        enqueue(m, i);
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    pin(1);
    long sum = 0;
    for (long i = 0; i < messages; i++) {
        struct msg *m = dequeue(i);
        sum += consume(m);
        release_msg(m);
    }
    checksum = sum;
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) messages = atol(argv[1]);
    pthread_t p, c;
    pthread_create(&c, NULL, consumer, NULL);
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    printf("messages %ld size %zu checksum %ld pinned %s\n", messages, sizeof(struct msg), checksum, cpus_ok ? "yes" : "no");
    return checksum == 4 * (messages * (messages - 1) / 2) ? 0 : 1;
}
