import { defineConfig } from 'vite';

// Builds the benchmark page alone into bench-dist/ (not embedded by loupe serve).
export default defineConfig({
  base: './',
  build: { outDir: 'bench-dist', emptyOutDir: true, rollupOptions: { input: 'bench/flame.html' } },
});
