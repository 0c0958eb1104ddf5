// Off-CPU ground truth: blocks for known times in known ways and measures
// each block itself.
//
// The main thread sleeps (sleep_phase), waits for a mutex another thread
// holds (lock_phase), and reads a pipe another thread writes after a delay
// (pipe_phase); every thread also measures its own lifetime. Blocking
// system calls are made with inline `syscall` instructions from these
// functions, built with frame pointers, so the user stack at each block is
// walkable by frame pointers whatever libc was built with. The mutex is a
// futex word (as glibc's is underneath).
//
// Usage: offcpu [--ms N] [--out FILE]
//        offcpu --pingpong N: two threads pass a byte over pipes N times each
//        way (a context-switch-heavy load for the cost of --off-cpu); prints
//        the seconds it took.
// Writes JSON: {"pid", "phases": {"sleep_phase": s, "lock_phase": s, "pipe_phase": s},
//               "threads": [{"tid", "name", "seconds"}]}
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long sys3(long nr, long a, long b, long c)
{
	long ret;
	register long r10 __asm__("r10") = 0;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return ret;
}

static long sys4(long nr, long a, long b, long c, long d)
{
	long ret;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return ret;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void nap(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	while (sys4(SYS_clock_nanosleep, CLOCK_MONOTONIC, 0, (long)&t, (long)&t) != 0)
		;
}

/* A futex mutex: 0 free, 1 held, 2 held with waiters. */
static atomic_int mutex;

static void mutex_lock(atomic_int *m)
{
	int c = 0;
	if (atomic_compare_exchange_strong(m, &c, 1))
		return;
	if (c != 2)
		c = atomic_exchange(m, 2);
	while (c != 0) {
		sys4(SYS_futex, (long)m, FUTEX_WAIT_PRIVATE, 2, 0);
		c = atomic_exchange(m, 2);
	}
}

static void mutex_unlock(atomic_int *m)
{
	if (atomic_exchange(m, 0) == 2)
		sys4(SYS_futex, (long)m, FUTEX_WAKE_PRIVATE, 1, 0);
}

static long block_ms = 300;
static atomic_int held;
static int pipefd[2];

struct lifetime {
	long tid;
	const char *name;
	double seconds;
};
static struct lifetime lives[3];

__attribute__((noinline)) void holder_sleep(void)
{
	nap(block_ms);
}

static void *holder(void *arg)
{
	double t0 = now();
	mutex_lock(&mutex);
	atomic_store(&held, 1);
	holder_sleep();
	mutex_unlock(&mutex);
	lives[1] = (struct lifetime){ syscall(SYS_gettid), "holder", now() - t0 };
	return arg;
}

__attribute__((noinline)) void writer_delay(void)
{
	nap(block_ms);
}

static void *writer(void *arg)
{
	double t0 = now();
	char c = 'x';
	writer_delay();
	sys3(SYS_write, pipefd[1], (long)&c, 1);
	lives[2] = (struct lifetime){ syscall(SYS_gettid), "writer", now() - t0 };
	return arg;
}

__attribute__((noinline)) double sleep_phase(void)
{
	double t0 = now();
	nap(block_ms);
	return now() - t0;
}

__attribute__((noinline)) double lock_phase(void)
{
	double t0 = now();
	mutex_lock(&mutex);
	double took = now() - t0;
	mutex_unlock(&mutex);
	return took;
}

__attribute__((noinline)) double pipe_phase(void)
{
	char c;
	double t0 = now();
	sys3(SYS_read, pipefd[0], (long)&c, 1);
	return now() - t0;
}

static int ping[2], pong[2];

static void *ponger(void *arg)
{
	long n = (long)arg;
	char c;
	for (long i = 0; i < n; i++) {
		sys3(SYS_read, ping[0], (long)&c, 1);
		sys3(SYS_write, pong[1], (long)&c, 1);
	}
	return NULL;
}

static int pingpong(long n)
{
	pthread_t t;
	char c = 'p';
	if (pipe(ping) || pipe(pong))
		return 1;
	double t0 = now();
	pthread_create(&t, NULL, ponger, (void *)n);
	for (long i = 0; i < n; i++) {
		sys3(SYS_write, ping[1], (long)&c, 1);
		sys3(SYS_read, pong[0], (long)&c, 1);
	}
	pthread_join(t, NULL);
	printf("%.6f\n", now() - t0);
	return 0;
}

int main(int argc, char **argv)
{
	double t0 = now();
	const char *out = NULL;
	pthread_t h, w;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ms"))
			block_ms = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--out"))
			out = argv[i + 1];
		else if (!strcmp(argv[i], "--pingpong"))
			return pingpong(atol(argv[i + 1]));
	}
	if (pipe(pipefd))
		return 1;
	double slept = sleep_phase();
	pthread_create(&h, NULL, holder, NULL);
	while (!atomic_load(&held))
		sched_yield();
	double locked = lock_phase();
	pthread_create(&w, NULL, writer, NULL);
	double piped = pipe_phase();
	pthread_join(h, NULL);
	pthread_join(w, NULL);
	lives[0] = (struct lifetime){ syscall(SYS_gettid), "main", now() - t0 };
	FILE *f = out ? fopen(out, "w") : stdout;
	if (!f)
		return 1;
	fprintf(f, "{\"pid\": %d, \"phases\": {\"sleep_phase\": %.6f, \"lock_phase\": %.6f, \"pipe_phase\": %.6f}, \"threads\": [", getpid(), slept,
		locked, piped);
	for (int i = 0; i < 3; i++)
		fprintf(f, "%s{\"tid\": %ld, \"name\": \"%s\", \"seconds\": %.6f}", i ? ", " : "", lives[i].tid, lives[i].name, lives[i].seconds);
	fprintf(f, "]}\n");
	return 0;
}
