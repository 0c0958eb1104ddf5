// Logs 3 iterations of phase 7, each with 100 progress events, through the
// generated Java class; run it under `loupe trace record`.
// `TraceDemo bench N` logs N progress events and prints ns/event instead
// (after N warm-up events, so the JIT has compiled the path).
public final class TraceDemo {
    public static void main(String[] args) {
        if (args.length > 1 && args[0].equals("bench")) {
            long n = Long.parseLong(args[1]);
            long[] d = {1, -1};
            for (long i = 0; i < n; i++) LoupeEvents.loupeAppProgress(i, 1.0, "bench", d);
            long t0 = System.nanoTime();
            for (long i = 0; i < n; i++) LoupeEvents.loupeAppProgress(i, 1.0, "bench", d);
            System.out.printf("%.2f ns/event%n", (System.nanoTime() - t0) / (double) n);
            return;
        }
        if (!LoupeEvents.enabled()) System.err.println("TraceDemo: $LOUPE_TRACE_SHM is not set; events go nowhere");
        for (long it = 0; it < 3; it++) {
            LoupeEvents.loupePhaseBegin(7, it);
            for (long k = 0; k < 100; k++) LoupeEvents.loupeAppProgress(k, 0.5, "java", new long[] {k, -1});
            LoupeEvents.loupePhaseEnd(7, it);
        }
    }
}
