/**
 * Parses a `WWW-Authenticate` header (RFC 7235) into challenges. The registry's header is untrusted,
 * so the parser is bounded and never throws: an unparseable header yields no challenges.
 */
export interface AuthChallenge {
  /** Lowercase scheme: `basic` or `bearer` (others are returned and ignored by the caller). */
  readonly scheme: string;
  readonly params: Readonly<Record<string, string>>;
}

const MAX_HEADER = 8192;

export function parseWwwAuthenticate(header: string | null | undefined): AuthChallenge[] {
  if (header === null || header === undefined || header.length > MAX_HEADER) return [];
  const challenges: AuthChallenge[] = [];
  let i = 0;
  const s = header;
  const skipSpace = (): void => {
    while (i < s.length && (s[i] === " " || s[i] === "\t")) i++;
  };
  const token = (): string => {
    const start = i;
    while (i < s.length && /[!#$%&'*+\-.^_`|~0-9A-Za-z]/.test(s[i] as string)) i++;
    return s.slice(start, i);
  };
  while (i < s.length) {
    skipSpace();
    while (s[i] === ",") { i++; skipSpace(); }
    const scheme = token();
    if (scheme === "") break;
    const params: Record<string, string> = {};
    for (;;) {
      skipSpace();
      const save = i;
      const name = token();
      skipSpace();
      if (name === "" || s[i] !== "=") { i = save; break; }
      i++;
      skipSpace();
      let value = "";
      if (s[i] === '"') {
        i++;
        while (i < s.length && s[i] !== '"') {
          if (s[i] === "\\" && i + 1 < s.length) i++;
          value += s[i];
          i++;
        }
        i++;
      } else {
        const start = i;
        while (i < s.length && s[i] !== "," && s[i] !== " ") i++;
        value = s.slice(start, i);
      }
      params[name.toLowerCase()] = value;
      skipSpace();
      if (s[i] === ",") {
        i++;
        // A comma followed by `token =` continues this challenge; otherwise a new scheme starts.
        const look = i;
        skipSpace();
        token();
        skipSpace();
        const continues = s[i] === "=";
        i = look;
        if (!continues) break;
      } else {
        break;
      }
    }
    challenges.push({ scheme: scheme.toLowerCase(), params });
  }
  return challenges;
}
