import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { actionRequest, DESCRIBE_INSTANCE, type FirecrackerRequest } from "./api-requests.ts";
import { faultError, parseFaultMessage } from "./faults.ts";

const drive: FirecrackerRequest = { method: "PUT", path: "/drives/root", route: "/drives/{drive_id}", body: {} };

describe("faultError()", () => {
  it("maps Firecracker's no-KVM answer to InstanceStart (as measured with v1.12.1 without /dev/kvm) to a terminal KvmUnavailable", () => {
    const fault =
      "Start microvm error: Internal error while starting microVM: Kvm error: Error creating KVM object: No such file or directory (os error 2) Make sure the user launching the firecracker process is \\\nconfigured on the /dev/kvm file's ACL.";
    const err = faultError(actionRequest("InstanceStart"), 400, fault, "vm1");
    assert.equal(err.code, "KvmUnavailable");
    assert.equal(err.errorClass, "terminal");
    assert.match(err.message, /^Cannot start VM vm1: this host offers no usable KVM/);
    assert.equal(err.context.faultMessage, fault);
  });

  it("keeps the fault message of a refused configuration request and calls it terminal", () => {
    const err = faultError(drive, 400, "Unable to create the block device: BackingFile(Os { code: 2, kind: NotFound, message: \"No such file or directory\" }, \"/x\")", "vm1");
    assert.equal(err.code, "FirecrackerApiError");
    assert.equal(err.errorClass, "terminal");
    assert.match(err.message, /^Cannot PUT \/drives\/root for VM vm1: Firecracker answered 400: Unable to create the block device/);
  });

  it("calls a busy tap, short memory or a server error retryable", () => {
    const iface: FirecrackerRequest = { method: "PUT", path: "/network-interfaces/eth0", route: "/network-interfaces/{iface_id}", body: {} };
    assert.equal(faultError(iface, 400, "Open tap device failed: Error while creating ifreq structure: Resource busy (os error 16).", "vm1").errorClass, "retryable");
    assert.equal(faultError(actionRequest("InstanceStart"), 400, "Cannot allocate memory (os error 12)", "vm1").errorClass, "retryable");
    assert.equal(faultError(DESCRIBE_INSTANCE, 500, undefined, "vm1").errorClass, "retryable");
  });

  it("does not read KVM words in a non-action answer as a KVM problem", () => {
    assert.equal(faultError(drive, 400, "path /dev/kvm is not a block device", "vm1").code, "FirecrackerApiError");
  });
});

describe("parseFaultMessage()", () => {
  it("reads fault_message, falls back to the raw text, and to undefined for an empty body", () => {
    assert.equal(parseFaultMessage('{"fault_message":"bad"}'), "bad");
    assert.equal(parseFaultMessage("plain words"), "plain words");
    assert.equal(parseFaultMessage("  "), undefined);
    assert.equal(parseFaultMessage('{"other":1}'), '{"other":1}');
  });
});
