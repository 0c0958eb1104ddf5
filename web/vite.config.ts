import { defineConfig } from 'vite';

// Relative asset paths: `loupe serve` embeds dist/ and serves it at `/`; no CDN.
export default defineConfig({
  base: './',
  build: { outDir: 'dist', emptyOutDir: true, chunkSizeWarningLimit: 300 },
  server: { proxy: { '/api': process.env.LOUPE_API ?? 'http://127.0.0.1:7777' } },
  test: { include: ['src/**/*.test.ts'] },
});
