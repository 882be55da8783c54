'''Chat templates that behave like the real ones, and a tokenizer to carry them (no download).

Each template reproduces what its model's ``tokenizer_config.json`` template does in the respects
multi-turn rollouts depend on (the text is written here, not copied):

* ``QWEN25``: Qwen2.5-Instruct / Hermes. Tools listed in the system prompt inside
  ``<tools></tools>``; assistant ``tool_calls`` as ``<tool_call>`` blocks; ``tool`` messages as a
  *user* turn holding ``<tool_response>`` blocks (consecutive ones merged in one turn); ``\\n``
  after every ``<|im_end|>``; a default system prompt.
* ``QWEN3``: Qwen3. Like Qwen2.5, but an assistant turn's ``<think>`` block is kept only after
  the last *user query* (a user message that is not a tool response): earlier turns are
  re-rendered without it once a user message follows them.
* ``LLAMA31``: Llama-3.1-Instruct. ``<|begin_of_text|>``; a system header with "Cutting Knowledge
  Date: December 2023" and "Today Date: {date_string}" (default "26 Jul 2024"); tools in the first
  user message; JSON tool calls; ``tool``/``ipython`` messages as an ``ipython`` turn whose
  content goes through ``tojson``; ``<|eot_id|>`` ends every turn, with nothing after it;
  assistant content trimmed.
* ``LLAMA32_DATED``: Llama-3.2-Instruct: as ``LLAMA31`` but the date is today's, from
  ``strftime_now`` (a real-date header).
* ``CHATML_NO_TOOLS``: a plain ChatML template that ignores ``tools``.
* ``USER_ASSISTANT_ONLY``: ChatML that silently drops any role but system/user/assistant.
'''

from __future__ import annotations

import string

SPECIAL_TOKENS = (
    "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
)

_QWEN_TOOLS_PROMPT = (
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
)

_QWEN_TOOL_CALLS = """
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' + tool_call.name + '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}"""

_QWEN_TOOL_RESPONSE = """
    {%- elif message.role == "tool" %}
        {%- if loop.first or messages[loop.index0 - 1].role != "tool" %}{{- '<|im_start|>user' }}{%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != "tool" %}{{- '<|im_end|>\\n' }}{%- endif %}
    {%- endif %}"""

QWEN25 = (
    """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content }}
    {%- else %}{{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}{%- endif %}
    """ + _QWEN_TOOLS_PROMPT + """
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}{{- '\\n' + message.content }}{%- endif %}"""
    + _QWEN_TOOL_CALLS + """
        {{- '<|im_end|>\\n' }}""" + _QWEN_TOOL_RESPONSE + """
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"""
)

QWEN3 = (
    """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
    {{- '# Tools' }}""" + _QWEN_TOOLS_PROMPT.replace("\\n\\n# Tools", "", 1) + """
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not (message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and (loop.last or reasoning_content) %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}"""
    + _QWEN_TOOL_CALLS + """
        {{- '<|im_end|>\\n' }}""" + _QWEN_TOOL_RESPONSE + """
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}
{%- endif %}"""
)

_LLAMA_DATE_FIXED = """{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}"""
_LLAMA_DATE_TODAY = """{%- if not date_string is defined %}
    {%- if strftime_now is defined %}{%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- endif %}"""

_LLAMA = """{{- bos_token }}
{%- if custom_tools is defined %}{%- set tools = custom_tools %}{%- endif %}
{%- if not tools_in_user_message is defined %}{%- set tools_in_user_message = true %}{%- endif %}
@DATE@
{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}{{- "Environment: ipython\\n" }}{%- endif %}
{{- "Cutting Knowledge Date: December 2023\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and tools is not none %}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0].content | trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
    {%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' }}
    {{- "Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.\\n\\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
    {%- for t in tools %}{{- t | tojson(indent=4) }}{{- "\\n\\n" }}{%- endfor %}
    {{- first_user_message + "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {{- '{"name": "' + tool_call.name + '", "parameters": ' + tool_call.arguments | tojson + '}' }}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" }}
        {%- if message.content is mapping or message.content is iterable %}{{- message.content | tojson }}
        {%- else %}{{- message.content }}{%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"""

LLAMA31 = _LLAMA.replace("@DATE@", _LLAMA_DATE_FIXED)
LLAMA32_DATED = _LLAMA.replace("@DATE@", _LLAMA_DATE_TODAY)

CHATML_NO_TOOLS = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

USER_ASSISTANT_ONLY = (
    "{%- for message in messages %}{%- if message.role in ['system', 'user', 'assistant'] %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

QWEN_END = "<|im_end|>"
LLAMA_ENDS = ["<|eot_id|>", "<|eom_id|>"]


def chat_tokenizer(template: str | None, *, bos: str | None = None, eos: str = "<|im_end|>"):
    """A character-level ``PreTrainedTokenizerFast`` with the chat special tokens of ``SPECIAL_TOKENS``
    as single tokens and ``template`` as its chat template (None: no template). Nothing is added
    on encode; decoding fuses the characters back (``decode(encode(text)) == text``)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "<pad>": 1}
    for c in string.printable:
        vocab.setdefault(c, len(vocab))
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", eos_token=eos, bos_token=bos,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = template
    tokenizer.name_or_path = "test-chat-tokenizer"
    return tokenizer


def qwen25():
    return chat_tokenizer(QWEN25)


def qwen3():
    return chat_tokenizer(QWEN3)


def llama31():
    return chat_tokenizer(LLAMA31, bos="<|begin_of_text|>", eos="<|eot_id|>")


def llama32_dated():
    return chat_tokenizer(LLAMA32_DATED, bos="<|begin_of_text|>", eos="<|eot_id|>")


# Hermes-3 / Hermes-2-Pro tool use (written here): a tool result ends "\n</tool_response>" when it is
# the last message and "\n</tool_response>\n" once anything follows, so a turn re-renders the one before
HERMES_TOOL_USE = (
    "{%- for m in messages %}{%- if m.role == 'tool' %}"
    "{%- if loop.previtem and loop.previtem.role != 'tool' %}{{- '<|im_start|>tool\\n' }}{%- endif %}"
    "{{- '<tool_response>\\n' + m.content }}"
    "{%- if not loop.last %}{{- '\\n</tool_response>\\n' }}{%- else %}{{- '\\n</tool_response>' }}{%- endif %}"
    "{%- if loop.last or loop.nextitem.role != 'tool' %}{{- '<|im_end|>' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
