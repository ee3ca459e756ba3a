import { AgentSessionParticipant } from "#sdk/participants/agent/agent-session-participant.js";
import { RestartOnlyAgentParticipant } from "#sdk/participants/agent/restart-only-participant.js";

/** The agent's session participant, or null (checkpointing off, or a restart-only agent). */
export function sessionParticipantOf(agent: {
  readonly participant: unknown;
}): AgentSessionParticipant | null {
  const participant = agent.participant;
  return participant instanceof AgentSessionParticipant ? participant : null;
}

/** The agent's restart-only participant, or null (checkpointing off, or session hooks). */
export function restartOnlyParticipantOf(agent: {
  readonly participant: unknown;
}): RestartOnlyAgentParticipant | null {
  const participant = agent.participant;
  return participant instanceof RestartOnlyAgentParticipant ? participant : null;
}
