"""Runs dlm-run --chat on one case of tests/reference/chat_templates/chat_prompts.json (the
strings passed as arguments, not through a shell) and checks its prompt_ids against the ids
transformers 5.23 gave with sanitize_control_tokens=True.

    check_prompt_ids.py ARTIFACT FIXTURE CASE [dlm-run flags...]
"""
import json
import subprocess
import sys

artifact, fixture, case = sys.argv[1:4]
expected = json.load(open(fixture, encoding="utf-8"))["cases"][case]
command = ["dlm-run", artifact, "--chat", expected["user"], "--json"] + sys.argv[4:]
if expected["system"] is not None:
    command += ["--system", expected["system"]]
out = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
if out["prompt_ids"] != expected["sanitized"]:
    sys.exit(f"{case}: prompt_ids {out['prompt_ids']}\n  transformers {expected['sanitized']}")
print(f"{case}: {len(out['prompt_ids'])} prompt ids as transformers gives them"
      + (" (its default would parse the user's control tokens)"
         if expected["parsed"] != expected["sanitized"] else ""))
