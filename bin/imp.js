#!/usr/bin/env -S node --max-semi-space-size=4 --optimize-for-size
// Entry for the `imp` command. Node 24 runs the TypeScript sources directly (type stripping).
// The V8 flags on the first line are src/cli/node-flags.ts's IMP_NODE_FLAGS (why: see there).
import "../src/cli/main.ts";
