export * from "./errors.ts";
export * from "./clock.ts";
export * from "./backoff.ts";
export * from "./deadline.ts";
export * from "./logger.ts";
export * from "./object-meta.ts";
export * from "./child-process.ts";
export * from "./steps.ts";
