"""Building a run's agent from its config: ``rollout.multi_turn.tools`` (with
``rollout.multi_turn.tool_parser``) or
``rollout.multi_turn.environment``, with the chat template checked to carry them, before any model loads; or
``rollout.multi_turn.agent``, a function run against the gateway (:mod:`steadyrl.gateway`)."""

from __future__ import annotations


def build_agent(config, tokenizer, processor=None):
    """The agent of ``config.rollout`` (None for single-turn runs), its tools and template checked;
    ``processor``: a vision-language policy's, which the gateway renders ``image_url`` parts with."""
    mt = config.rollout.multi_turn
    if not mt.enabled:
        return None
    if mt.agent is not None:  # the agent drives its episodes through the gateway (steadyrl.gateway)
        from ..gateway import GatewayAgent
        from ..agents.parsers import load_parser

        return GatewayAgent(mt.agent, parser=load_parser(mt.tool_parser), concurrency=mt.agent_concurrency,
                            timeout_s=mt.agent_timeout_s, template_kwargs=dict(config.data.chat_template_kwargs),
                            processor=processor)
    from ..agents.chat import check_observation_room
    from ..agents.modes import check_mode

    isolation = mt.tool_isolation or _default_isolation()
    if mt.tools:
        from ..agents.parsers import load_parser
        from ..agents.toolagent import ToolAgent
        from ..agents.tools import load_tools

        agent = ToolAgent(load_tools(list(mt.tools)), load_parser(mt.tool_parser), timeout_s=mt.tool_timeout_s,
                          isolation=isolation, limits=mt.tool_limits, workers=mt.tool_workers,
                          max_calls_per_turn=mt.max_tool_calls_per_turn, time_budget_s=mt.tool_time_budget_s)
        from ..agents.messages import id_style, renders_tool_calls

        agent.id_style = id_style(getattr(tokenizer, "chat_template", None))  # call ids as the template wants them
        agent.structured_calls = renders_tool_calls(tokenizer, agent.tool_schemas, dict(config.data.chat_template_kwargs))
    else:
        from ..agents.environment import EnvironmentAgent, load_environment

        agent = EnvironmentAgent(load_environment(mt.environment), observation_role=mt.observation_role,
                                 timeout_s=mt.tool_timeout_s, isolation=isolation, limits=mt.tool_limits)
    agent.template_kwargs = dict(config.data.chat_template_kwargs)
    from ..rollout.base import eos_token_ids  # the engine's end tokens: what ends a turn

    end_texts = [tokenizer.decode([i]) for i in eos_token_ids(tokenizer)]
    # the mode the template supports (rollout.multi_turn.mode; auto: single when append-only, else stepwise)
    agent.multi_turn_mode = check_mode(tokenizer, mt.mode, tools=agent.tool_schemas,
                                       observation_role=agent.observation_role, end_texts=end_texts,
                                       template_kwargs=agent.template_kwargs, parser=agent.parser)
    check_observation_room(tokenizer, mt.max_observation_tokens, tools=agent.tool_schemas,
                           observation_role=agent.observation_role, end_texts=end_texts,
                           template_kwargs=agent.template_kwargs, mode=agent.multi_turn_mode)
    return agent


def check_agent_specs(config) -> None:
    """``rollout.multi_turn.tools`` (each function loaded, its schema read, names unique),
    ``rollout.multi_turn.tool_parser``
    and a ``file.py:Class`` / ``module:Class`` ``rollout.multi_turn.environment`` loaded and checked: what
    :func:`build_agent` loads, without a tokenizer or torch (``config show`` and the checks made
    before torch is imported). An adapter environment (``openenv:URL``...) is checked when built."""
    mt = config.rollout.multi_turn
    if mt.tools:
        from ..agents.parsers import load_parser
        from ..agents.tools import load_tools

        load_tools(list(mt.tools))
        load_parser(mt.tool_parser)
    elif mt.environment is not None:
        from ..envs import is_spec
        from ..agents.environment import load_environment

        if not is_spec(mt.environment):
            load_environment(mt.environment)


def _default_isolation() -> str:
    from ..rewards.runners import default_isolation

    return default_isolation()
