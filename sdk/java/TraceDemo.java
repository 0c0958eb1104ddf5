// Logs 3 iterations of phase 7, each with 100 progress events, through the
// generated Java class; run it under `loupe trace record`.
public final class TraceDemo {
    public static void main(String[] args) {
        if (!LoupeEvents.enabled()) System.err.println("TraceDemo: $LOUPE_TRACE_SHM is not set; events go nowhere");
        for (long it = 0; it < 3; it++) {
            LoupeEvents.loupePhaseBegin(7, it);
            for (long k = 0; k < 100; k++) LoupeEvents.loupeAppProgress(k, 0.5, "java", new long[] {k, -1});
            LoupeEvents.loupePhaseEnd(7, it);
        }
    }
}
