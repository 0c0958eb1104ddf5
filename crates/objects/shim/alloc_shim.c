// SPDX-License-Identifier: Apache-2.0
/*
 * Loupe's LD_PRELOAD allocation shim: interposes the C library's allocator
 * and the C++ runtime's operator new/delete and appends one record per
 * allocation and free to $LOUPE_ALLOC_DIR/preload-<pid>.alog, in the layout
 * of crates/objects/src/log.rs (little-endian, x86-64 and aarch64 only).
 *
 * - The real allocator is glibc's __libc_* entry points (no dlsym needed,
 *   which itself allocates); operator new/delete come from dlsym(RTLD_NEXT)
 *   with a per-thread depth counter so the malloc inside them is not
 *   recorded twice.
 * - Records go to a per-thread buffer, flushed with one write() (O_APPEND)
 *   when full, at thread exit and at process exit; a kill -9 loses at most
 *   each thread's unflushed buffer, never the file's structure.
 * - A fork's child drops the parent's buffered records and opens its own
 *   file; exec keeps LD_PRELOAD, so the whole process tree is covered.
 * - /proc/self/maps goes into the log when the file is opened and at exit,
 *   to place allocation sites in images afterwards.
 * - Each allocation also keeps up to CALLERS return addresses above its site
 *   (glibc's backtrace(), an .eh_frame unwind: no frame pointers needed), so
 *   a block returned through `void *` wrappers is typed where a caller
 *   stores it. LOUPE_ALLOC_CALLERS=0 turns that off.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

enum { KIND_ALLOC = 1, KIND_FREE = 2, KIND_MAPS = 3 };
enum { F_MALLOC = 1, F_CALLOC = 2, F_REALLOC = 3, F_NEW = 4, F_NEW_ARRAY = 5, F_ALIGNED = 6,
       F_FREE = 7, F_DELETE = 8, F_DELETE_ARRAY = 9 };

struct record {
	uint16_t kind, func;
	uint32_t pid, tid, payload_len;
	uint64_t time_ns, base, size, site;
};
_Static_assert(sizeof(struct record) == 48, "log.rs record layout");

/* log.rs CALLERS: return addresses above the site kept per allocation. */
#define CALLERS 4
/* Frames backtrace() may see below the site: record, the entry point, a C++ runtime's new. */
#define FRAMES (CALLERS + 8)
#define MAX_RECORD (sizeof(struct record) + CALLERS * sizeof(uint64_t))
#define BUF_BYTES (256 * MAX_RECORD)

struct tbuf {
	unsigned char b[BUF_BYTES];
	size_t n;
	int depth; /* inside one of our entry points: inner calls are not recorded */
	uint32_t tid;
	int registered;
};

static __thread struct tbuf tb __attribute__((tls_model("initial-exec")));
static int log_fd = -1;
static int disabled;
static int callers_on = 1;
static uint32_t log_pid;
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t flush_key;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		c += w;
		n -= (size_t)w;
	}
}

/* /proc/self/maps as one record, read into anonymous memory (no malloc). */
static void write_maps(void)
{
	size_t cap = 4 << 20, len = 0;
	char *buf = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r;
		while (len < cap && (r = read(fd, buf + len, cap - len)) > 0)
			len += (size_t)r;
		close(fd);
	}
	struct record h = { .kind = KIND_MAPS, .pid = log_pid, .tid = log_pid, .payload_len = (uint32_t)len, .time_ns = now_ns() };
	struct iovec iov[2] = { { &h, sizeof h }, { buf, len } };
	/* One writev: records of other threads cannot land inside it (O_APPEND). */
	if (writev(log_fd, iov, 2) < 0) { /* nothing to do: the log is best effort */ }
	munmap(buf, cap);
}

static void open_log(void)
{
	const char *dir = getenv("LOUPE_ALLOC_DIR");
	if (!dir) {
		disabled = 1;
		return;
	}
	char path[4096];
	log_pid = (uint32_t)getpid();
	snprintf(path, sizeof path, "%s/preload-%u.alog", dir, log_pid);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		disabled = 1;
		return;
	}
	static const char header[16] = { 'L', 'O', 'U', 'P', 'E', 'A', 'L', 0, 1, 0, 0, 0, 2, 0, 0, 0 };
	write_all(fd, header, sizeof header);
	log_fd = fd;
	write_maps();
}

static void flush(struct tbuf *t)
{
	if (t->n > 0 && log_fd >= 0)
		write_all(log_fd, t->b, t->n);
	t->n = 0;
}

/* The return addresses above `site` on this thread's stack, into out[]; how many. */
static int callers_of(void *site, uint64_t out[CALLERS])
{
	void *pcs[FRAMES];
	tb.depth++; /* the unwinder may allocate (its first use loads libgcc_s) */
	int n = backtrace(pcs, FRAMES);
	tb.depth--;
	int i = 0;
	while (i < n && pcs[i] != site)
		i++;
	int k = 0;
	for (i++; i < n && k < CALLERS; i++)
		out[k++] = (uint64_t)(uintptr_t)pcs[i];
	return k;
}

static void flush_at_thread_exit(void *arg)
{
	(void)arg;
	flush(&tb);
}

static void make_key(void)
{
	pthread_key_create(&flush_key, flush_at_thread_exit);
}

static void record(uint16_t kind, uint16_t func, void *base, size_t size, void *site)
{
	if (disabled)
		return;
	if (log_fd < 0) {
		pthread_mutex_lock(&open_lock);
		if (log_fd < 0 && !disabled)
			open_log();
		pthread_mutex_unlock(&open_lock);
		if (disabled)
			return;
	}
	struct tbuf *t = &tb;
	if (!t->registered) {
		t->registered = 1;
		t->tid = (uint32_t)syscall(SYS_gettid);
		pthread_once(&key_once, make_key);
		pthread_setspecific(flush_key, t);
	}
	uint64_t up[CALLERS];
	int k = kind == KIND_ALLOC && callers_on ? callers_of(site, up) : 0;
	struct record r = { .kind = kind, .func = func, .pid = log_pid, .tid = t->tid, .time_ns = now_ns(),
			    .base = (uint64_t)(uintptr_t)base, .size = size, .site = (uint64_t)(uintptr_t)site,
			    .payload_len = (uint32_t)(k * sizeof up[0]) };
	memcpy(t->b + t->n, &r, sizeof r);
	memcpy(t->b + t->n + sizeof r, up, r.payload_len);
	t->n += sizeof r + r.payload_len;
	if (t->n + MAX_RECORD > BUF_BYTES)
		flush(t);
}

static void after_fork_in_child(void)
{
	tb.n = 0; /* the parent writes these */
	tb.tid = (uint32_t)syscall(SYS_gettid);
	if (log_fd >= 0) {
		close(log_fd);
		log_fd = -1;
	}
}

__attribute__((constructor)) static void shim_init(void)
{
	pthread_atfork(NULL, NULL, after_fork_in_child);
	const char *c = getenv("LOUPE_ALLOC_CALLERS");
	callers_on = !(c && c[0] == '0');
	if (callers_on) {
		/* Load the unwinder now, not inside the first allocation a program makes under a lock. */
		void *pcs[2];
		tb.depth++;
		backtrace(pcs, 2);
		tb.depth--;
	}
}

__attribute__((destructor)) static void shim_fini(void)
{
	flush(&tb);
	if (log_fd >= 0)
		write_maps();
}

#define SITE __builtin_return_address(0)

void *malloc(size_t n)
{
	tb.depth++;
	void *p = __libc_malloc(n);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_MALLOC, p, n, SITE);
	return p;
}

void *calloc(size_t n, size_t each)
{
	tb.depth++;
	void *p = __libc_calloc(n, each);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_CALLOC, p, n * each, SITE);
	return p;
}

void *realloc(void *old, size_t n)
{
	tb.depth++;
	void *p = __libc_realloc(old, n);
	if (--tb.depth == 0) {
		if (old && (p || n == 0))
			record(KIND_FREE, F_REALLOC, old, 0, SITE);
		if (p)
			record(KIND_ALLOC, F_REALLOC, p, n, SITE);
	}
	return p;
}

void free(void *p)
{
	if (p && tb.depth == 0)
		record(KIND_FREE, F_FREE, p, 0, SITE);
	__libc_free(p);
}

void *memalign(size_t align, size_t n)
{
	tb.depth++;
	void *p = __libc_memalign(align, n);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_ALIGNED, p, n, SITE);
	return p;
}

void *aligned_alloc(size_t align, size_t n)
{
	tb.depth++;
	void *p = __libc_memalign(align, n);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_ALIGNED, p, n, SITE);
	return p;
}

int posix_memalign(void **out, size_t align, size_t n)
{
	if (align < sizeof(void *) || (align & (align - 1)) != 0)
		return EINVAL;
	tb.depth++;
	void *p = __libc_memalign(align, n);
	if (--tb.depth == 0 && p)
		record(KIND_ALLOC, F_ALIGNED, p, n, SITE);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

/* operator new/delete: the C++ runtime's own (new handlers, bad_alloc), recorded once. */
typedef void *(*new_fn)(size_t);
typedef void (*delete_fn)(void *);

static void *next(const char *name)
{
	tb.depth++;
	void *f = dlsym(RTLD_NEXT, name);
	tb.depth--;
	if (!f)
		abort();
	return f;
}

#define NEW(sym, func)                                              \
	void *sym(size_t n)                                         \
	{                                                           \
		static new_fn real;                                 \
		if (!real)                                          \
			real = (new_fn)next(#sym);                  \
		tb.depth++;                                         \
		void *p = real(n);                                  \
		if (--tb.depth == 0)                                \
			record(KIND_ALLOC, func, p, n, SITE);       \
		return p;                                           \
	}

#define DELETE(sym, func)                                           \
	void sym(void *p)                                           \
	{                                                           \
		static delete_fn real;                              \
		if (!real)                                          \
			real = (delete_fn)next(#sym);               \
		if (p && tb.depth == 0)                             \
			record(KIND_FREE, func, p, 0, SITE);        \
		tb.depth++;                                         \
		real(p);                                            \
		tb.depth--;                                         \
	}

NEW(_Znwm, F_NEW)
NEW(_Znam, F_NEW_ARRAY)
DELETE(_ZdlPv, F_DELETE)
DELETE(_ZdaPv, F_DELETE_ARRAY)

/* Sized delete (C++14): forwarded with the size the runtime expects. */
typedef void (*sized_delete_fn)(void *, size_t);
#define SIZED_DELETE(sym, func)                                     \
	void sym(void *p, size_t n)                                 \
	{                                                           \
		static sized_delete_fn real;                        \
		if (!real)                                          \
			real = (sized_delete_fn)next(#sym);         \
		if (p && tb.depth == 0)                             \
			record(KIND_FREE, func, p, 0, SITE);        \
		tb.depth++;                                         \
		real(p, n);                                         \
		tb.depth--;                                         \
	}

SIZED_DELETE(_ZdlPvm, F_DELETE)
SIZED_DELETE(_ZdaPvm, F_DELETE_ARRAY)
