#!/usr/bin/env -S node --max-semi-space-size=4 --optimize-for-size
// Entry for the `imp` command. Node 24 runs the TypeScript sources directly (type stripping).
// The V8 flags on the first line are src/cli/node-flags.ts's IMP_NODE_FLAGS (why: see there).
// `npx imp` runs it with the project's pinned Node.js (docs/adr/0001-node-runtime.md); an older
// `node` started by hand is told so instead of failing on the first type annotation.
const major = Number(process.versions.node.split(".")[0]);
if (major < 24) {
  process.stderr.write(`imp: Cannot start: it needs Node.js 24 and this is ${process.version}; run it as \`npx imp\` in the project, which uses the project's own Node.js\n`);
  process.exit(125);
}
await import("../src/cli/main.ts");
