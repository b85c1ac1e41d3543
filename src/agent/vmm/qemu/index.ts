export { buildQemuArgv, kernelCmdline, qemuEscape, type QemuDrive, type QemuGuestChannel, type QemuMachineSpec } from "./argv.ts";
export { parseCpuinfoTscKhz, readHostTscKhz } from "./cpuinfo.ts";
export { describeExit, type ChildExit } from "./child.ts";
export { cmdlineArgs, orderedDrives, QemuDriver, type QemuDriverOptions } from "./driver.ts";
export {
  DEFAULT_GUEST_VSOCK_PORT,
  DEFAULT_SERIAL_PORT_NAME,
  defaultQemuVmConfig,
  QemuVm,
  QemuVmDir,
  type QemuChannelKind,
  type QemuExit,
  type QemuVmOptions,
} from "./vm.ts";
