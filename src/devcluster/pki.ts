import { execFile } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { isIP } from "node:net";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

/**
 * Files of a throwaway PKI for a loopback control plane. Node.js cannot create X.509 certificates
 * itself, and the openssl CLI (always on Debian) does it in a few calls, so we use it rather than
 * adding a crypto dependency for test infrastructure.
 */
export interface Pki {
  readonly caCert: string;
  readonly caKey: string;
  readonly servingCert: string;
  readonly servingKey: string;
  readonly adminCert: string;
  readonly adminKey: string;
  readonly serviceAccountKey: string;
  readonly serviceAccountPub: string;
}

async function openssl(args: readonly string[], cwd: string): Promise<void> {
  await run("openssl", args, { cwd });
}

/**
 * Creates a CA, a serving certificate for 127.0.0.1/localhost (and `extraAddresses`), an admin
 * client certificate (system:masters) and a service-account key pair in `dir`.
 */
export async function createPki(dir: string, extraAddresses: readonly string[] = []): Promise<Pki> {
  const notIp = extraAddresses.find((a) => isIP(a) === 0);
  if (notIp !== undefined) throw new Error(`createPki: ${JSON.stringify(notIp)} is not an IP address`);
  const p = (name: string): string => join(dir, name);
  const days = "3650";
  await openssl(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", days, "-subj", "/CN=imp-dev-ca"], dir);
  // clientAuth too: etcd's JSON gateway dials etcd's own gRPC port with the serving certificate.
  await writeFile(
    p("serving.ext"),
    `subjectAltName=IP:127.0.0.1,${extraAddresses.map((a) => `IP:${a},`).join("")}DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n`,
  );
  await openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out", "serving.csr", "-subj", "/CN=kube-apiserver"], dir);
  await openssl(["x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "serving.crt", "-days", days, "-extfile", "serving.ext"], dir);
  await writeFile(p("client.ext"), "extendedKeyUsage=clientAuth\n");
  await openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "admin.key", "-out", "admin.csr", "-subj", "/O=system:masters/CN=imp-admin"], dir);
  await openssl(["x509", "-req", "-in", "admin.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "admin.crt", "-days", days, "-extfile", "client.ext"], dir);
  await openssl(["genrsa", "-out", "sa.key", "2048"], dir);
  await openssl(["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"], dir);
  return {
    caCert: p("ca.crt"),
    caKey: p("ca.key"),
    servingCert: p("serving.crt"),
    servingKey: p("serving.key"),
    adminCert: p("admin.crt"),
    adminKey: p("admin.key"),
    serviceAccountKey: p("sa.key"),
    serviceAccountPub: p("sa.pub"),
  };
}

/**
 * A client certificate and key signed by the plane's CA, for `user` in `groups` (e.g. a kubelet:
 * `system:node:<name>` in `system:nodes`). Returns the two paths, `<name>.crt` and `<name>.key` in `dir`.
 */
export async function issueClientCertificate(dir: string, pki: Pki, name: string, user: string, groups: readonly string[]): Promise<{ cert: string; key: string }> {
  if (!/^[a-z0-9][a-z0-9.-]*$/.test(name) || ![user, ...groups].every((v) => /^[A-Za-z0-9:._-]+$/.test(v))) {
    throw new Error(`issueClientCertificate: ${JSON.stringify({ name, user, groups })} holds characters a certificate subject here may not`);
  }
  const subject = `${groups.map((g) => `/O=${g}`).join("")}/CN=${user}`;
  await writeFile(join(dir, "client.ext"), "extendedKeyUsage=clientAuth\n");
  await openssl(["req", "-newkey", "rsa:2048", "-nodes", "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", subject], dir);
  await openssl(["x509", "-req", "-in", `${name}.csr`, "-CA", pki.caCert, "-CAkey", pki.caKey, "-CAcreateserial", "-out", `${name}.crt`, "-days", "3650", "-extfile", "client.ext"], dir);
  return { cert: join(dir, `${name}.crt`), key: join(dir, `${name}.key`) };
}
