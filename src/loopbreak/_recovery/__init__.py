"""The recovery core: what every face does after a rule fires, and the request history it
reads to decide, without I/O.

``chunks`` reads what a model streamed (an OpenAI chunk as JSON, an SDK object or LiteLLM's)
into the pieces a guard judges, once for every face; ``plan`` decides (retry without
thinking, end lawfully, end with an error; deny a tool call and re-ask); ``history`` replays
a request's own history into a session guard (the proxy and the LiteLLM hook keep no
session state) and edits the request the way a recovery needs; ``requests`` turns thinking
off in each upstream's dialect. The faces (``proxy/``, ``integrations/``) carry the plans
out on their wire or framework.
"""

from loopbreak._engine.notices import cut_notice
from loopbreak._recovery.plan import (
    OTHER_CALL_DENIED,
    CutPlan,
    DenialPlan,
    LoopCutError,
    cut_message,
    normal_finish,
    plan_cut,
    plan_denial,
)

__all__ = ["OTHER_CALL_DENIED", "CutPlan", "DenialPlan", "LoopCutError", "cut_message",
           "cut_notice", "normal_finish", "plan_cut", "plan_denial"]
