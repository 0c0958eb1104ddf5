/* For the online client (`loupe trace record --live`): logs a phase begin,
 * then waits (up to 20 s) until the file FILE exists, then logs the phase
 * end. Exits 1 if the file never came: whoever creates it must have seen the
 * begin event while this program was still running.
 * Usage: trace_live FILE */
#include <time.h>
#include <unistd.h>
#include "loupe_events.h"

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    trace_loupe_phase_begin(9, 0);
    for (int i = 0; i < 20000; i++) {
        if (access(argv[1], F_OK) == 0) {
            trace_loupe_phase_end(9, 0);
            return 0;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, 0);
    }
    return 1;
}
