import { defineConfig } from 'vite';
import { fileURLToPath } from 'node:url';

// The console is served by the control plane at /console (docs/console.md); the build goes into
// the project's dist/ beside the compiled processes.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/console/',
  esbuild: { jsx: 'automatic', jsxImportSource: 'preact' },
  build: {
    outDir: fileURLToPath(new URL('../dist/console', import.meta.url)),
    emptyOutDir: true,
    // No inline script or module-preload polyfill: the page's policy allows scripts from the origin only.
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
    chunkSizeWarningLimit: 400,
  },
});
