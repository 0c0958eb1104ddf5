// Per-image stacking of the overview chart (pure, unit-tested).

/** Cumulative samples per epoch for the `top` heaviest images, the rest summed as "other". */
export function stackImages(epochs: { images: Record<string, number>; samples: number }[], top: number): { names: string[]; cumulative: number[][] } {
  const sums = new Map<string, number>();
  for (const e of epochs) for (const [k, v] of Object.entries(e.images)) sums.set(k, (sums.get(k) ?? 0) + v);
  const heavy = [...sums.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, top).map(([k]) => k);
  const names = sums.size > heavy.length ? [...heavy, 'other'] : heavy;
  const cumulative = names.map(() => new Array<number>(epochs.length).fill(0));
  epochs.forEach((e, j) => {
    let acc = 0;
    heavy.forEach((img, i) => {
      acc += e.images[img] ?? 0;
      cumulative[i][j] = acc;
    });
    if (names.length > heavy.length) cumulative[heavy.length][j] = Math.max(acc, e.samples);
  });
  return { names, cumulative };
}
