/** A pool's VMs are named `<pool>-<5 characters>` (`generateName: <pool>-`), and each one's runner by its VM. */
const escape = (s: string): string => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

export function poolRunnerPattern(pool: string): RegExp {
  return new RegExp(`^${escape(pool)}-[a-z0-9]{5}$`);
}

export function isPoolRunner(pool: string, runnerName: string): boolean {
  return poolRunnerPattern(pool).test(runnerName);
}
