/** ext4 images from unpacked rootfs directories. */
export { buildExt4, type BuildExt4Options } from "./build-ext4.ts";
export { debugfsErrors, debugfsScript, type XattrFix } from "./debugfs-script.ts";
export { defaultBaseParams, planExt4, type Ext4Params, type Ext4Plan } from "./fs-params.ts";
export { runTool, type ToolResult } from "./run-tool.ts";
export { EXT4_FEATURES, featureArg, MKE2FS_CONF, mke2fsEnv, mkfsIdentity } from "./mke2fs-config.ts";
