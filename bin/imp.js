#!/usr/bin/env node
// Entry for the `imp` command. Node 24 runs the TypeScript sources directly (type stripping).
import "../src/cli/main.ts";
