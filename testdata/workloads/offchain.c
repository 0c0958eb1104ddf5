/*
 * Off-CPU ground truth through code without frame pointers: built -O2
 * -fomit-frame-pointer (and Debian's libc keeps none either), the main
 * thread blocks in libc from three known call chains,
 *
 *   main -> sleep_chain -> sleep_leaf -> nanosleep          (sleep)
 *   main -> read_chain  -> read_leaf  -> read of a pipe      (io)
 *   main -> wait_chain  -> wait_leaf  -> pthread_cond_wait   (lock)
 *
 * a helper thread writing the pipe and signalling the condition variable
 * after known delays, and measures its own blocked time per chain. A
 * frame-pointer walk loses everything above libc; only DWARF CFI (the
 * unwind tables) reaches main.
 *
 *   offchain [--ms N] [--rounds R] [--warmup-ms W] [--out FILE]
 *
 * The measured blocks begin after W ms (default 1000) of short naps: time
 * for a profiler to describe the process to its unwinder.
 *
 * Writes JSON: {"pid", "chains": {"sleep_chain": s, "read_chain": s, "wait_chain": s}}.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noclone))

static long block_ms = 100;
static int rounds = 3;
static long warmup_ms = 1000;
static int pipefd[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int signalled;

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void nap(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&t, &t) != 0)
		;
}

/* Each leaf returns the seconds it spent in its blocking libc call. */
NOINLINE double sleep_leaf(long ms)
{
	double t0 = now();
	nap(ms);
	return now() - t0;
}

NOINLINE double read_leaf(int fd)
{
	char c;
	double t0 = now();
	if (read(fd, &c, 1) != 1)
		exit(1);
	return now() - t0;
}

NOINLINE double wait_leaf(void)
{
	double t0 = now();
	pthread_mutex_lock(&mu);
	while (!signalled)
		pthread_cond_wait(&cv, &mu);
	signalled = 0;
	pthread_mutex_unlock(&mu);
	return now() - t0;
}

/* The middle of each chain: a frame of its own (no tail call, the flags
 * say so) between main and the leaf. */
NOINLINE double sleep_chain(void)
{
	return sleep_leaf(block_ms) + 0.0 * now();
}

NOINLINE double read_chain(void)
{
	return read_leaf(pipefd[0]) + 0.0 * now();
}

NOINLINE double wait_chain(void)
{
	return wait_leaf() + 0.0 * now();
}

/* Per round: writes the pipe, then signals, each after `block_ms`. */
static void *helper(void *arg)
{
	char c = 'x';
	for (int i = 0; i < rounds; i++) {
		nap(block_ms);
		if (write(pipefd[1], &c, 1) != 1)
			exit(1);
		nap(block_ms);
		pthread_mutex_lock(&mu);
		signalled = 1;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
	}
	return arg;
}

int main(int argc, char **argv)
{
	const char *out = NULL;
	double slept = 0, read_s = 0, waited = 0;
	pthread_t h;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--ms"))
			block_ms = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--warmup-ms"))
			warmup_ms = atol(argv[i + 1]);
		else if (!strcmp(argv[i], "--out"))
			out = argv[i + 1];
	}
	if (pipe(pipefd))
		return 1;
	/* Time for a profiler to describe the process (its unwind tables)
	 * after its first block, before the measured ones. */
	for (long i = 0; i < warmup_ms / 50; i++)
		nap(50);
	for (int i = 0; i < rounds; i++)
		slept += sleep_chain();
	pthread_create(&h, NULL, helper, NULL);
	for (int i = 0; i < rounds; i++) {
		read_s += read_chain();
		waited += wait_chain();
	}
	pthread_join(h, NULL);
	FILE *f = out ? fopen(out, "w") : stdout;
	if (!f)
		return 1;
	fprintf(f, "{\"pid\": %d, \"chains\": {\"sleep_chain\": %.6f, \"read_chain\": %.6f, \"wait_chain\": %.6f}}\n", getpid(), slept, read_s,
		waited);
	return 0;
}
