// bytesize: tools built on two third-party npm packages, both pure JavaScript:
// pretty-bytes (an ES module) and bytes (CommonJS). `stockade build` installs them from
// package-lock.json (npm ci --ignore-scripts) and bundles them with esbuild into the one
// module componentize-js builds.
import bytes from "bytes";
import prettyBytes from "pretty-bytes";
import { ToolInputError, tool } from "stockade";

tool("bytesize.size", (input) => ({ text: prettyBytes(input.bytes) }));

tool("bytesize.parse", (input) => {
  const value = bytes.parse(input.text);
  if (value === null || value < 0) throw new ToolInputError(`not a size: ${input.text}`);
  return { bytes: value };
});
