// A JIT workload with a known hot method: hotSpin does almost all the work,
// coldSpin about a tenth of it. Run for the seconds given, then exit (the
// JVM writes /tmp/perf-PID.map at exit with -XX:+DumpPerfMapAtExit).
public class HotLoop {
    static long hotSpin(long x) {
        for (int i = 0; i < 10_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
            x ^= x >>> 29;
        }
        return x;
    }

    static long coldSpin(long x) {
        for (int i = 0; i < 1_000; i++) {
            x = x * 2862933555777941757L + 3037000493L;
            x ^= x >>> 31;
        }
        return x;
    }

    public static void main(String[] args) {
        long until = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        long acc = 1;
        while (System.nanoTime() < until) {
            acc = hotSpin(acc);
            acc = coldSpin(acc);
        }
        System.out.println(acc == 42 ? "unlikely" : "done");
    }
}
