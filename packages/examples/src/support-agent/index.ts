/**
 * Example: a customer-support AI agent working through a real inbox. One workflow run per email loops — the model
 * picks a tool, the tool runs as an activity — until the model answers; refunds go through the invoice example's
 * payment provider and a fenced ledger, those above a threshold wait for a person's approval by signal. A worker is
 * killed mid-loop and a refund worker turns zombie. See `runSupportAgentDemo`.
 * @module
 */
export {
  createSupportAgentActivities,
  refundKey,
  type SupportAgentActivities,
  type SupportAgentDependencies,
  type SupportAgentEvent,
} from './activities.js';
export type {
  AgentModel,
  ChatMessage,
  ModelDecision,
  ModelRequest,
  ToolCall,
  ToolSpec,
} from './agent-model.js';
export { TOOL_SPECS, systemPrompt, type ToolName } from './agent-tools.js';
export { analyzeEmail, type EmailAnalysis } from './email-analysis.js';
export {
  INTENTS,
  InvalidInboxDataError,
  parseInboxData,
  type CustomerEmail,
  type InboxData,
  type Intent,
  type Order,
} from './inbox.js';
export { createOfflineModel, decideOffline } from './offline-model.js';
export { createOpenAiModel, openAiOptionsFromEnv, type OpenAiModelOptions } from './openai-model.js';
export { REFUND_WINDOW_DAYS, decideRefund, type PolicyVerdict } from './refund-policy.js';
export {
  SUPPORT_AGENT_DEMO,
  runSupportAgentDemo,
  type SupportAgentDemoOptions,
  type SupportAgentDemoResult,
} from './run-demo.js';
export { supportTables, supportTablesDdl, type SupportTables } from './tables.js';
export {
  createSupportAgentWorkflow,
  refundApprovalSignal,
  type EmailOutcome,
  type RefundApproval,
} from './workflow.js';
