/* Kernel events known by construction, one phase each (Loupe::Phase::Begin/End
 * with the phase number as `phase`, iteration 0), for `loupe trace record --kernel all`:
 *   phase 1: SLEEPS nanosleeps of 1 ms  -> >= SLEEPS sched_switch away from this thread
 *   phase 2: touches PAGES fresh 4 KiB pages (THP off) -> exactly PAGES page faults in the
 *            range, whose base is logged as a Loupe::App::Progress with label "base"
 *   phase 3: CALLS getppid system calls -> exactly CALLS sys_enter with nr = SYS_getppid
 *   phase 4: writes 4 x 1 MiB with O_DIRECT to FILE and fsyncs -> block write requests covering the
 *            file's blocks, each issued and completed inside the phase (write(2) with O_DIRECT returns
 *            only once its requests completed); where those blocks are on the file system's device
 *            (FIEMAP, after the fsync) is logged as Loupe::App::Progress events with label "extent",
 *            units = physical byte offset, rate = length in bytes. Nothing else runs meanwhile: on a
 *            quiet machine the completions run in the idle task's softirq, which perf misses on this
 *            kernel (6.18) and Loupe's BPF program does not
 *   phase 5: spins for 200 ms of its own CPU time -> ~200 cpu-clock samples at 1000 Hz
 * Usage: trace_kernel FILE [SLEEPS PAGES CALLS] */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "loupe_events.h"

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Logs where the file's data lives on its device; 0 if FIEMAP answered. */
static int log_extents(int fd) {
    enum { MAX = 64 };
    struct fiemap *fm = calloc(1, sizeof *fm + MAX * sizeof(struct fiemap_extent));
    if (!fm) return 1;
    fm->fm_length = FIEMAP_MAX_OFFSET;
    fm->fm_flags = FIEMAP_FLAG_SYNC;
    fm->fm_extent_count = MAX;
    int bad = ioctl(fd, FS_IOC_FIEMAP, fm) != 0 || fm->fm_mapped_extents == 0 || fm->fm_mapped_extents == MAX;
    for (unsigned i = 0; !bad && i < fm->fm_mapped_extents; i++)
        trace_loupe_app_progress(fm->fm_extents[i].fe_physical, (double)fm->fm_extents[i].fe_length, "extent", 0, 0);
    free(fm);
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int sleeps = argc > 2 ? atoi(argv[2]) : 20, pages = argc > 3 ? atoi(argv[3]) : 512, calls = argc > 4 ? atoi(argv[4]) : 1000;
    trace_loupe_phase_begin(1, 0);
    for (int i = 0; i < sleeps; i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, 0);
    }
    trace_loupe_phase_end(1, 0);

    size_t size = (size_t)pages * 4096;
    volatile char *p = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if ((void *)p == MAP_FAILED || madvise((void *)p, size, MADV_NOHUGEPAGE)) return 1;
    trace_loupe_phase_begin(2, 0);
    trace_loupe_app_progress((uint64_t)(uintptr_t)p, 0.0, "base", 0, 0);
    for (size_t off = 0; off < size; off += 4096) p[off] = 1;
    trace_loupe_phase_end(2, 0);

    trace_loupe_phase_begin(3, 0);
    for (int i = 0; i < calls; i++) syscall(SYS_getppid);
    trace_loupe_phase_end(3, 0);

    void *buf;
    if (posix_memalign(&buf, 4096, 1 << 20)) return 1;
    for (int i = 0; i < (1 << 20); i++) ((char *)buf)[i] = (char)i;
    trace_loupe_phase_begin(4, 0);
    int fd = open(argv[1], O_CREAT | O_TRUNC | O_WRONLY | O_DIRECT, 0600);
    if (fd < 0) return 1;
    for (int i = 0; i < 4; i++)
        if (write(fd, buf, 1 << 20) != 1 << 20) return 1;
    fsync(fd);
    if (log_extents(fd)) return 1;
    close(fd);
    trace_loupe_phase_end(4, 0);
    unlink(argv[1]);

    trace_loupe_phase_begin(5, 0);
    double t0 = cpu_s();
    volatile unsigned long x = 0;
    while (cpu_s() - t0 < 0.2) /* the CPU clock is a system call: read it every 100k iterations */
        for (int i = 0; i < 100000; i++) x++;
    trace_loupe_phase_end(5, 0);
    return 0;
}
