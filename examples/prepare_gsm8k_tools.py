"""Write GSM8K as prompt files for tool use: the model may call a calculator before it answers.

    python examples/prepare_gsm8k_tools.py data/    # needs `datasets` and network access once
    steadyrl train examples/qwen_tools.yaml --output-dir runs/qwen-tools

Each prompt is one user message; the tool's schema reaches the model through the chat template
(Qwen2.5 lists it in the system prompt and teaches the `<tool_call>{json}</tool_call>` format), so
the prompt only says when to use it. The `math` reward reads the number after '####' in the answer
column and checks the last \\boxed{} of the transcript.
"""

import sys

from prepare_gsm8k import main  # the same writer, another instruction (run from anywhere: the script's folder is on sys.path)

INSTRUCTION = ("Use the calculate tool for any arithmetic you are not sure of. When you know the answer, "
               "reply without a tool call and put the final answer in \\boxed{}.")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "data", INSTRUCTION, stem="gsm8k_tools")
