// Cache volumes on the operator's side: the trust rule that decides which clone becomes a pool's next generation.
export { decidePromotion, DEFAULT_PROMOTION_RULE, UNTRUSTED_EVENTS, type CurrentGeneration, type DiscardReason, type JobFacts, type PromotionDecision, type PromotionRule } from "./promotion.ts";
