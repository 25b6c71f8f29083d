// bytesize: a tool built on a third-party npm package (pretty-bytes, pure JavaScript).
// `stockade build` installs it from package-lock.json (npm ci --ignore-scripts) and
// bundles it with esbuild into the one module componentize-js builds.
import prettyBytes from "pretty-bytes";
import { tool } from "stockade";

tool("bytesize.size", (input) => ({ text: prettyBytes(input.bytes) }));
