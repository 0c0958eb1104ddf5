import { expect, it } from 'vitest';
import { stackImages } from './series';

it('stacks the heaviest images and sums the rest as other', () => {
  // Checks cumulative bands per epoch: the last band equals each epoch's sample count.
  const epochs: { samples: number; images: Record<string, number> }[] = [
    { samples: 10, images: { a: 6, b: 3, c: 1 } },
    { samples: 5, images: { b: 5 } },
  ];
  const s = stackImages(epochs, 2);
  expect(s.names).toEqual(['b', 'a', 'other']);
  expect(s.cumulative).toEqual([[3, 5], [9, 5], [10, 5]]);
  expect(stackImages(epochs, 5).names).toEqual(['b', 'a', 'c']);
});
