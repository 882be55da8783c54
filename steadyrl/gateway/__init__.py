"""An OpenAI-compatible gateway in front of the policy, and ``rollout.multi_turn.agent`` episodes run through it.

During a rollout the current policy is served on loopback (:mod:`.server`; who may hold its
connections: :mod:`.slots`) as
``/v1/chat/completions`` and ``/v1/completions``; a user's agent function (:mod:`.agent`) runs each
episode with any client; the calls of all running episodes are answered in waves, one
``generate`` each (:mod:`.waves`); every call's exact prompt and sampled ids are recorded and make
the episode's trajectory (:mod:`.record`, :mod:`.assemble`). docs/environments.md describes it.
"""

from .agent import GatewayAgent, load_agent
from .server import Gateway

__all__ = ["Gateway", "GatewayAgent", "load_agent"]
