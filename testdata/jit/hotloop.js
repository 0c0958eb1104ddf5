// A JIT workload with a known hot function: hotSpin does almost all the
// work, coldSpin about a tenth of it. With --perf-basic-prof Node writes
// /tmp/perf-PID.map as it compiles. The loops are long and the driver runs
// few times, so V8 compiles each function on its own (on-stack
// replacement) instead of inlining both into an optimized driver.
function hotSpin(x) {
  for (let i = 0; i < 20000000; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) | 0;
    x ^= x >>> 13;
  }
  return x;
}

function coldSpin(x) {
  for (let i = 0; i < 2000000; i++) {
    x = (Math.imul(x, 22695477) + 1) | 0;
    x ^= x >>> 11;
  }
  return x;
}

const until = Date.now() + parseFloat(process.argv[2]) * 1000;
let acc = 1;
while (Date.now() < until) {
  acc = hotSpin(acc);
  acc = coldSpin(acc);
}
console.log(acc === 42 ? 'unlikely' : 'done');
