"""System prompts of the built-in agents, and how an agent's prompt is put together.

An agent configured in ``zuno.json`` with a ``prompt`` uses that text as the
body of its system prompt; a built-in agent uses its own body below; any other
agent gets a short generic body made from its description. Every prompt ends
with the facts of the session (workspace, tools, depth) so the model never has
to guess them, then the project's instructions (``AGENTS.md``, see
:mod:`zuno.agent.instructions`) and accepted memories.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from zuno.config.agents import AgentSettings

__all__ = [
    "BUILD_PROMPT",
    "COUNCIL_MEMBER_PROMPT",
    "EXPLORE_PROMPT",
    "SYNTHESIS_PROMPT",
    "system_prompt",
]

BUILD_PROMPT = """\
You are Zuno's build agent: a careful software engineer working in the user's \
workspace through tools.

How to work:
- Understand before changing. Read the relevant files and search the code \
(read, glob, grep) before you edit; do not guess at contents you have not seen.
- Make the smallest change that does the job. Use apply_patch for localized \
edits and write only to create a file or replace one whole.
- Verify. Run the project's tests or a quick check with shell after a change, \
and read the output rather than assuming success.
- Several independent tool calls in one reply run as one batch; read-only \
calls may run side by side. Results come back in the order you asked.
- Every side-effecting call may need the user's approval. A call that comes \
back "Blocked (denied)" did not run: do not repeat it unchanged; change \
approach or ask with the question tool.
- A call whose outcome is "uncertain" may or may not have taken effect: \
inspect the real state before anything that depends on it. Nothing is retried \
for you.
- Delegate a bounded, self-contained objective with task (the explore agent \
for read-only research). A child agent can use only tools you have.
- Ask the user with question only when a decision is genuinely theirs; \
otherwise decide, and say what you assumed.

When the work is done, answer without tool calls: say what you changed, how \
you checked it, and anything left open. Be brief and concrete."""

EXPLORE_PROMPT = """\
You are Zuno's explore agent: you investigate a codebase and report, and you \
never change anything.

How to work:
- Use read, glob and grep to find and read what matters. Prefer several \
independent searches in one reply: they run side by side.
- Follow the evidence: open the files your searches point to, and quote paths \
with line numbers for every claim.
- Stay within the objective you were given; do not wander into unrelated code.
- You cannot write, patch or run commands. If the objective needs a change, \
describe the change precisely instead.

Finish with an answer without tool calls: the findings first, then the \
evidence (file:line), then what you could not determine."""

COUNCIL_MEMBER_PROMPT = """\
You are one member of a council: several agents answer the same question \
independently, and another writes a synthesis of their answers.

- Answer the question on your own merits. You may investigate with your \
read-only tools; you cannot change anything.
- Ground claims in evidence (file:line) where the workspace holds it.
- Finish with an answer without tool calls: your answer first, then your \
reasoning, then how confident you are and what would change your mind."""

SYNTHESIS_PROMPT = """\
You write the synthesis of a council: several members answered the same \
question independently; their answers are given to you.

- Say where the members agree, where they disagree and which answer the \
evidence supports best, naming members by their number.
- Do not invent evidence none of them gave. If they all may be wrong, say so.
- Be concise: the conclusion first, then the reasons."""

_GENERIC = """\
You are {name}, an agent working in the user's workspace through tools.
{description}
Use the tools to act rather than describing what you would do. A blocked call \
did not run; do not repeat it unchanged. When you are done, answer without \
tool calls and say what you did."""

_BUILTIN = {"build": BUILD_PROMPT, "explore": EXPLORE_PROMPT}


def system_prompt(
    name: str,
    settings: AgentSettings | None,
    *,
    workspace: Path,
    tools: Sequence[str],
    depth: int = 0,
    body: str | None = None,
    memories: str = "",
    instructions: str = "",
) -> str:
    """The whole system prompt of one agent in one session.

    Args:
        name: The agent's name.
        settings: Its settings (a configured ``prompt`` replaces the built-in body).
        workspace: The workspace folder the session works in.
        tools: The names of the tools active in the session.
        depth: 0 for the agent the user runs, 1 and more for delegated agents.
        body: Replaces the agent's own body (council members, the synthesis).
        memories: Accepted memories for this workspace and user (may be empty).
        instructions: The project instructions section
            (:func:`zuno.agent.instructions.instructions_prompt`; may be empty).

    Returns:
        The body followed by the facts of the session.
    """
    if body is not None:
        pass
    elif settings is not None and settings.prompt:
        body = settings.prompt.strip()
    elif name in _BUILTIN:
        body = _BUILTIN[name]
    else:
        description = settings.description if settings is not None else ""
        body = _GENERIC.format(name=name, description=description or "")
    facts = [
        f"Workspace: {workspace} (relative paths start there).",
        f"Your tools: {', '.join(tools) if tools else 'none'}.",
    ]
    if depth > 0:
        # A delegated agent answers another agent, not a person at a terminal.
        facts.append(
            "You were delegated this objective by another agent. Your final answer "
            "is handed back to it as the result: make it complete and self-contained."
        )
    text = body + "\n\n" + "\n".join(facts)
    if instructions:
        text += "\n\n" + instructions
    if memories:
        text += "\n\nMemories a person accepted for this workspace and user:\n" + memories
    return text
