// A second reader of Loupe's pprof exports besides `go tool pprof`: DataDog's pure-JavaScript decoder
// (pprof-format, what Node.js profilers encode with). Prints what a consumer reads from FILE (gzipped
// profile.proto) as JSON: value types, period, time and duration, the first mapping, per-type sums.
// Usage: node tests/pprof-read.mjs FILE
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { Profile } from 'pprof-format';

const p = Profile.decode(gunzipSync(readFileSync(process.argv[2])));
const str = (i) => p.stringTable.strings[Number(i)];
const types = p.sampleType.map((t) => `${str(t.type)}/${str(t.unit)}`);
const sums = types.map((_, k) => p.sample.reduce((s, x) => s + Number(x.value[k]), 0));
const m = p.mapping[0];
console.log(JSON.stringify({
  sample_types: types,
  sums,
  period_type: p.periodType ? `${str(p.periodType.type)}/${str(p.periodType.unit)}` : null,
  period: Number(p.period),
  time_nanos: Number(p.timeNanos),
  duration_nanos: Number(p.durationNanos),
  first_mapping: m ? str(m.filename) : null,
  samples: p.sample.length,
  functions: p.function.length,
}));
