// A library build of the Tiering page for Airflow's UI (a `react_apps` entry of the plugin). Airflow's UI imports
// the bundle and renders the component it leaves on `globalThis.AirflowPlugin`, inside its own React tree: React,
// the router, Chakra UI and Emotion are the host's (on `globalThis`, where Airflow 3.3 puts them), never bundled,
// so the page shares the UI's theme, colour mode and navigation.
import { defineConfig } from "vite";

const HOST_GLOBALS: Record<string, string> = {
  react: "React",
  "react-dom": "ReactDOM",
  "react/jsx-runtime": "ReactJSXRuntime",
  "react-router-dom": "ReactRouterDOM",
  "@chakra-ui/react": "ChakraUI",
  "@emotion/react": "EmotionReact",
};

export default defineConfig({
  esbuild: { jsx: "automatic", legalComments: "none" },
  build: {
    outDir: "dist",
    emptyOutDir: true,
    sourcemap: false,
    lib: {
      entry: "src/main.tsx",
      formats: ["umd"],
      name: "AirflowPlugin",
      fileName: () => "tiering.js",
    },
    rollupOptions: {
      external: Object.keys(HOST_GLOBALS),
      output: { globals: HOST_GLOBALS, exports: "default" },
    },
  },
  logLevel: "warn",
});
