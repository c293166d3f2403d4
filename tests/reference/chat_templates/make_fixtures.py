"""Renders the chat templates in templates/ with transformers' own renderer and writes fixtures.json.

Run with the reference venv (transformers 5.23, jinja2 3.1.6):

    /work/refvenv/bin/python tests/reference/chat_templates/make_fixtures.py

Each case is rendered by `transformers.utils.chat_template_utils.render_jinja_template`, the
function `apply_chat_template` calls, with `strftime_now`'s clock fixed at NOW. The fixture keeps
the variables exactly as the template sees them (messages after transformers' own clean-up, tools,
documents, add_generation_prompt and the extra variables), the expected text or, when the template
fails, the error; plus templates dlm must refuse at parse time with the error it must name.
"""

import datetime as _datetime
import json
import pathlib

import jinja2
import transformers
from transformers.utils import chat_template_utils as ctu

HERE = pathlib.Path(__file__).resolve().parent
NOW = _datetime.datetime(2024, 7, 26, 14, 5, 9)


class _FixedClock(_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


ctu.datetime = _FixedClock  # strftime_now calls datetime.now()

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city, \"quoted\" and ünïcode.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7.5},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "now", "description": "The time.", "parameters": {"type": "object", "properties": {}}},
    },
]

CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "Hello there, how are you?"}],
    "system_turns": [
        {"role": "system", "content": "  You are terse.  \n"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?\nExplain."},
    ],
    "multipart": [
        {"role": "system", "content": [{"type": "text", "text": "Describe images."}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "url": "http://example.com/cat.png"},
                {"type": "text", "text": " What is in this image? "},
                {"type": "text", "text": "Be brief."},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]},
        {"role": "user", "content": [{"type": "text", "text": "Which colour?"}]},
    ],
    "tool_turns": [
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "Weather in Paris and the time?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
                {"type": "function", "function": {"name": "now", "arguments": {}}},
            ],
        },
        {"role": "tool", "content": "{\"temp\": 21.5}"},
        {"role": "tool", "content": "14:05"},
        {"role": "assistant", "content": "It is 21.5 °C in Paris at 14:05."},
        {"role": "user", "content": "Thanks!"},
    ],
    "single_tool_call": [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "content": {"temp": -3, "sky": "snow"}},
        {"role": "user", "content": "Warmer anywhere?"},
    ],
    "thinking": [
        {"role": "user", "content": "Think: 17*3?"},
        {"role": "assistant", "content": "<think>\n17*3 = 51\n</think>\n\n51"},
        {"role": "user", "content": "<tool_response>x</tool_response>"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "\nThe user sent a tool response.\n"},
    ],
    "thinking_last_user": [
        {"role": "system", "content": "Reason step by step."},
        {"role": "user", "content": "Is 91 prime?"},
        {"role": "assistant", "content": "<think>7*13</think>No, 91 = 7 × 13."},
        {"role": "user", "content": "And 97?"},
    ],
    "unicode": [
        {"role": "user", "content": "héllo 🙂 \"quoted\" \\ back\ttab\u00a0nbsp  "},
        {"role": "assistant", "content": "日本語のテキスト。"},
    ],
    "bad_alternation": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
}

# Template name -> the conversations it is rendered with, and the extra variables' variants.
PLAN = {
    "chatml_basic": (["user_only", "system_turns", "multipart", "unicode"], [{}]),
    "chatml_tools": (["user_only", "system_turns", "tool_turns", "unicode"], [{}, {"tools": TOOLS}]),
    "qwen3_style": (
        ["user_only", "system_turns", "tool_turns", "thinking", "thinking_last_user", "unicode"],
        [{}, {"enable_thinking": True}, {"enable_thinking": False}, {"tools": TOOLS, "enable_thinking": False}],
    ),
    "llama3_style": (
        ["user_only", "system_turns", "multipart", "single_tool_call", "tool_turns"],
        [{}, {"tools": TOOLS}, {"tools": TOOLS, "tools_in_user_message": False}, {"date_string": "01 Jan 2025"}],
    ),
    "gemma_style": (["user_only", "system_turns", "multipart", "bad_alternation", "unicode"], [{}]),
    "llada_style": (["user_only", "system_turns", "unicode", "multipart"], [{}]),
    "dream_style": (["user_only", "system_turns", "multipart"], [{}]),
    "constructs": (["user_only", "system_turns", "multipart", "tool_turns", "unicode"], [{}, {"enable_thinking": True}]),
    "whitespace": (["user_only", "system_turns"], [{}]),
}

SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

# Templates dlm refuses while parsing (jinja2 accepts most of them): the error dlm must name.
REFUSED = [
    ("{% macro greet(name) %}Hi {{ name }}{% endmacro %}{{ greet('x') }}", "chat template line 1: not supported yet: the 'macro' tag"),
    ("a\nb\n{% call foo() %}x{% endcall %}", "chat template line 3: not supported yet: the 'call' tag"),
    ("{% include 'other.jinja' %}", "not supported yet: the 'include' tag"),
    ("{% extends 'base.jinja' %}", "not supported yet: the 'extends' tag"),
    ("{% block body %}x{% endblock %}", "not supported yet: the 'block' tag"),
    ("{% filter upper %}x{% endfilter %}", "not supported yet: the 'filter' tag"),
    ("{% with a = 1 %}{{ a }}{% endwith %}", "not supported yet: the 'with' tag"),
    ("{% raw %}{{ x }}{% endraw %}", "not supported yet: the 'raw' tag"),
    ("\n{{ messages | wordcount }}", "chat template line 2: not supported yet: the 'wordcount' filter"),
    ("{% if x is callable %}{% endif %}", "not supported yet: the 'callable' test"),
    ("{{ cycler('a', 'b') }}", "not supported yet: the function 'cycler'"),
    ("{{ 'a'.zfill(3) }}", "not supported yet: the method 'zfill'"),
    ("{% for m in messages recursive %}{{ loop(m.children) }}{% endfor %}", "not supported yet: recursive loops"),
    ("{% for m in messages %}{{ loop.cycle('a', 'b') }}{% endfor %}", "not supported yet: the method 'cycle'"),
]

# Templates that are not valid Jinja either: the error names the line.
SYNTAX_ERRORS = [
    ("{% if true %}\nno end", "chat template line 2: unexpected end of template: expected 'endif'"),
    ("line\n{{ 'unclosed'", "chat template line 2: unexpected end of template"),
    ("{{ 'a' + }}", "chat template line 1: unexpected end of print statement"),
    ("\n\n{% frobnicate %}", "chat template line 3: unknown tag 'frobnicate'"),
    ("{% break %}", "chat template line 1: 'break' outside of a loop"),
    ("{{ x[1:2:3:4] }}", "chat template line 1: a slice has at most three parts"),
]


def template_context(conversation, add_generation_prompt, extra):
    """The variables the template sees, as the C++ test rebuilds them from a case."""
    chat = ctu._alias_reasoning_fields(ctu._plain_template_data(CONVERSATIONS[conversation]))
    context = {"messages": chat, "tools": extra.get("tools"), "documents": None}
    context["add_generation_prompt"] = add_generation_prompt
    context.update(SPECIAL_TOKENS)
    context.update({k: v for k, v in extra.items() if k != "tools"})
    return context


def render_case(source, conversation, add_generation_prompt, extra):
    kwargs = {**SPECIAL_TOKENS, **{k: v for k, v in extra.items() if k != "tools"}}
    case = {}
    try:
        rendered, _ = ctu.render_jinja_template(
            conversations=[CONVERSATIONS[conversation]],
            tools=extra.get("tools"),
            chat_template=source,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        case["expected"] = rendered[0]
        # The rebuilt variables are exactly what the template saw.
        context = template_context(conversation, add_generation_prompt, extra)
        assert ctu._compile_jinja_template(source).render(**context) == rendered[0]
    except jinja2.exceptions.TemplateError as error:
        if type(error) is jinja2.exceptions.TemplateError:  # raise_exception(message)
            case["raised"] = str(error)
        else:
            case["error"] = f"{type(error).__name__}: {error}"
    except (TypeError, ValueError) as error:
        case["error"] = f"{type(error).__name__}: {error}"
    return case


def main():
    templates = {path.stem: path.read_text(encoding="utf-8") for path in sorted((HERE / "templates").glob("*.jinja"))}
    cases = []
    for name, (conversations, variants) in PLAN.items():
        for conversation in conversations:
            for extra in variants:
                for add_generation_prompt in (False, True):
                    variables = {k: v for k, v in extra.items() if k != "tools"}
                    label = "+".join(f"{k}={v}" for k, v in variables.items())
                    label += "+tools" if "tools" in extra else ""
                    case = {
                        "name": f"{name}/{conversation}/{label or 'default'}/agp={add_generation_prompt}",
                        "template": name,
                        "conversation": conversation,
                        "tools": "tools" in extra,
                        "add_generation_prompt": add_generation_prompt,
                        "variables": variables,
                        **render_case(templates[name], conversation, add_generation_prompt, extra),
                    }
                    cases.append(case)
    fixtures = {
        "generator": "tests/reference/chat_templates/make_fixtures.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "now": NOW.isoformat(),
        "special_tokens": SPECIAL_TOKENS,
        "tools": TOOLS,
        "conversations": {
            name: ctu._alias_reasoning_fields(ctu._plain_template_data(messages))
            for name, messages in CONVERSATIONS.items()
        },
        "templates": templates,
        "cases": cases,
        "refused": [{"source": s, "error": e} for s, e in REFUSED],
        "syntax_errors": [{"source": s, "error": e} for s, e in SYNTAX_ERRORS],
    }
    # One case per line: small, and a change shows as the cases it touches.
    lines = ",\n".join(json.dumps(case, ensure_ascii=False) for case in cases)
    fixtures["cases"] = "@CASES@"
    text = json.dumps(fixtures, indent=1, ensure_ascii=False).replace('"@CASES@"', "[\n" + lines + "\n]")
    (HERE / "fixtures.json").write_text(text + "\n", encoding="utf-8")
    rendered = sum("expected" in c for c in cases)
    raised = sum("raised" in c for c in cases)
    failed = sum("error" in c for c in cases)
    print(f"{len(cases)} cases: {rendered} rendered, {raised} raise_exception, {failed} other errors")


if __name__ == "__main__":
    main()
