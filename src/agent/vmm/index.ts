// The VMM layer: the driver interface and what every driver shares (console following, the VM
// record for re-adoption, process launchers, the KVM probe), then the drivers themselves.
export * from "./types.ts";
export { ConsoleLog, DEFAULT_MAX_CONSOLE_BYTES, FATAL_CONSOLE_PATTERNS, findFatalConsoleLine, supervisedConsoleBound } from "./console-log.ts";
export { readVmRecord, removeVmRecord, VM_RECORD_FILE, vmRecordPath, writeVmRecord, type VmRecord } from "./vm-record.ts";
export { DirectLauncher } from "./direct-launcher.ts";
export { NetnsLauncher } from "./netns-launcher.ts";
export * from "./kvm-probe.ts";
export * from "./qemu/index.ts";
export * from "./firecracker/index.ts";
