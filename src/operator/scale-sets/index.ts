// Public entry of the scale-set listeners: one per scale-set pool, on the leader.
export { ScaleSetListeners, type ScaleSetListenersOptions, type ScaleSetView } from "./scale-set-listeners.ts";
export { ScaleSetListener, outcomeOf, describeReason, type ListenerClient, type ListenerSink, type ListenerSpec, type ListenerState } from "./scale-set-listener.ts";
export { decideListener, DEFAULT_LISTENER_TIMINGS, LISTENER_OUTCOMES, LISTENER_PHASES, LISTENER_TABLE, LISTENING_REASONS, START, type ListenerDecision, type ListenerOutcome, type ListenerPhase, type ListenerStep, type ListenerTimings, type ListeningReason } from "./listener-table.ts";
