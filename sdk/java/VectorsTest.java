// Runs the shared test vectors through the generated Java class: every
// record decodes and re-encodes through its typed encoder to the same bytes.
// Plain javac + java, no test framework: exits non-zero on a mismatch.

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

public final class VectorsTest {
    public static void main(String[] args) throws Exception {
        List<String> lines = Files.readAllLines(Path.of(args.length > 0 ? args[0] : "../vectors/loupe.txt"));
        int bad = 0;
        for (String line : lines) {
            byte[] want = new byte[line.length() / 2];
            for (int i = 0; i < want.length; i++) want[i] = (byte) Integer.parseInt(line.substring(2 * i, 2 * i + 2), 16);
            byte[] got = LoupeEvents.reencode(want);
            if (!Arrays.equals(got, want)) {
                int id = (want[10] & 0xff) | (want[11] & 0xff) << 8;
                System.err.println("mismatch: " + LoupeEvents.eventName(id));
                bad++;
            }
        }
        // Hand-derived: phase begin at ts 1, phase 7, iteration 2 is 24 bytes.
        byte[] pb = LoupeEvents.encodeLoupePhaseBegin(1, 7, 2);
        if (pb.length != 24 || pb[8] != 24 || pb[10] != 1 || pb[12] != 7 || pb[16] != 2) bad++;
        System.out.println("java: " + lines.size() + " vectors, " + bad + " mismatches");
        if (bad != 0 || lines.isEmpty()) System.exit(1);
    }
}
