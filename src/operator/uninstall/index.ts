export { decommission, type DecommissionOptions, type DecommissionReport } from "./decommission.ts";
