// The QEMU driver: argv (its protocol), layout, boot and adoption steps, the running VM, the driver.
export { buildQemuArgv, kernelCmdline, qemuEscape, type QemuDrive, type QemuGuestChannel, type QemuMachineSpec } from "./argv.ts";
export { parseCpuinfoTscKhz, readHostTscKhz } from "./cpuinfo.ts";
export { describeExit, type ChildExit } from "./child.ts";
export { cmdlineArgs, orderedDrives, QEMU_KVM_MEMORY_OVERHEAD_MIB, QEMU_TCG_MEMORY_OVERHEAD_MIB, QemuDriver, type QemuDriverOptions } from "./driver.ts";
export { QemuVmDir } from "./layout.ts";
export { ADOPT_STEPS as QEMU_ADOPT_STEPS, BOOT_STEPS as QEMU_BOOT_STEPS, DEFAULT_GUEST_VSOCK_PORT, DEFAULT_SERIAL_PORT_NAME, defaultQemuVmConfig, type QemuChannelKind, type QemuExit, type QemuStepName, type QemuVmOptions } from "./steps.ts";
export { QemuVm } from "./vm.ts";
