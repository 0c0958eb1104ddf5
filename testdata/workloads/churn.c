/*
 * Process churn like DCPI's gcc workload:
 *   churn [--count N] [--parallel P]
 * runs N short-lived `churn-child` processes (found next to this binary),
 * P at a time, and prints "ran N processes in S s".
 */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int count = 2000, parallel = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--count") && i + 1 < argc)
            count = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--parallel") && i + 1 < argc)
            parallel = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: churn [--count N] [--parallel P]\n");
            return 2;
        }
    }
    char self[PATH_MAX], child[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n < 0)
        return 1;
    self[n] = 0;
    snprintf(child, sizeof child, "%s/churn-child", dirname(self));
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int running = 0, started = 0, failed = 0;
    while (started < count || running > 0) {
        while (running < parallel && started < count) {
            pid_t p = fork();
            if (p == 0) {
                execl(child, "churn-child", (char *)NULL);
                _exit(127);
            }
            if (p < 0)
                return 1;
            running++;
            started++;
        }
        int st;
        if (wait(&st) > 0) {
            running--;
            failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("ran %d processes in %.2f s\n", count, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return failed ? 1 : 0;
}
