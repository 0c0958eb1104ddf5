import { expect, it } from 'vitest';
import { sideSelection } from './diff';

it('maps diff sides to flame selections of one database and epoch', () => {
  // Checks NAME:EPOCH, bare epochs, bare database names, and that sums are refused.
  const f = new URLSearchParams('image=scaling&since=60');
  expect(sideSelection(f, 'run:2').toString()).toBe('image=scaling&db=run&epoch=2');
  expect(sideSelection(f, '3').toString()).toBe('image=scaling&epoch=3');
  expect(sideSelection(f, 'other').toString()).toBe('image=scaling&db=other&epoch=current');
  expect(() => sideSelection(f, '1,2')).toThrow(/sum/);
});
