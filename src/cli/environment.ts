/**
 * What `imp` takes from its environment besides flags, read here and nowhere below `cli/`: the
 * parts receive it as options. IMP_TEST_FAULT_POINTS is set by nothing but the failure-proof suite
 * (docs/failure-proof-points.md); unset, every fault point passes.
 */
import { FaultPoints, type Logger } from "../shared/index.ts";

/** The fault points armed in the environment; each that fires says so in the log (the suite reads it). */
export function faultPointsFromEnvironment(logger: Logger): FaultPoints {
  return FaultPoints.fromEnv(process.env, (point, action) => logger.warn({ point, action: action.kind }, "test fault point fired"));
}
