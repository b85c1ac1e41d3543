import { createPublicKey, verify, type KeyObject } from "node:crypto";

/**
 * Verifies a GitHub App JWT the way GitHub documents it: RS256, signed by the App's private key,
 * `iss` = App id, `iat` not in the future (60 s of skew allowed), `exp` in the future and at most
 * ten minutes after `iat`. Returns why not, or undefined when the JWT is good.
 */
export function checkAppJwt(jwt: string, appId: number, publicKey: KeyObject | string, nowSeconds: number): string | undefined {
  const parts = jwt.split(".");
  if (parts.length !== 3) return "not a JWT";
  const [headerB64, payloadB64, signatureB64] = parts as [string, string, string];
  let header: { alg?: unknown; typ?: unknown };
  let payload: { iat?: unknown; exp?: unknown; iss?: unknown };
  try {
    header = JSON.parse(Buffer.from(headerB64, "base64url").toString("utf8")) as typeof header;
    payload = JSON.parse(Buffer.from(payloadB64, "base64url").toString("utf8")) as typeof payload;
  } catch {
    return "JWT header or payload is not JSON";
  }
  if (header.alg !== "RS256") return `JWT alg ${String(header.alg)} is not RS256`;
  const key = typeof publicKey === "string" ? createPublicKey(publicKey) : publicKey;
  const signed = verify("sha256", Buffer.from(`${headerB64}.${payloadB64}`), key, Buffer.from(signatureB64, "base64url"));
  if (!signed) return "A JSON web token could not be decoded";
  if (typeof payload.iat !== "number" || typeof payload.exp !== "number") return "'Issued at' and 'Expiration time' claims must be numeric";
  if (payload.iat > nowSeconds + 60) return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued";
  if (payload.exp <= nowSeconds) return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires";
  if (payload.exp - payload.iat > 600 + 60) return "'Expiration time' claim ('exp') is too far in the future";
  if (String(payload.iss) !== String(appId)) return `'Issuer' claim ('iss') ${String(payload.iss)} is not this App`;
  return undefined;
}
