"""A minimal command agent that asks the model for a unified diff and applies it.

It reads the prompt from $DELTARUN_PROMPT_FILE, calls the chat-completions
endpoint at $DELTARUN_MODEL_BASE_URL (the per-trial gateway; the API key is
added by the gateway and never enters this sandbox), and applies the diff in
/workspace with `git apply`. Standard library only.
"""

import json
import os
import re
import subprocess
import urllib.request

prompt = open(os.environ["DELTARUN_PROMPT_FILE"], encoding="utf-8").read()
files = subprocess.run(["find", ".", "-type", "f"], capture_output=True, text=True).stdout
request = {
    "model": os.environ.get("DELTARUN_MODEL", ""),
    "messages": [
        {"role": "system", "content": "Reply with one unified diff (a/ b/ paths) and nothing else."},
        {"role": "user", "content": f"{prompt}\n\nFiles:\n{files}"},
    ],
    "temperature": 0,
}
req = urllib.request.Request(
    os.environ["DELTARUN_MODEL_BASE_URL"] + "/chat/completions",
    data=json.dumps(request).encode(),
    headers={"Content-Type": "application/json"},
)
with urllib.request.urlopen(req, timeout=240) as response:
    reply = json.load(response)
text = reply["choices"][0]["message"]["content"] or ""
diff = re.sub(r"^```\w*\n|```\s*$", "", text.strip(), flags=re.M)
subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], input=diff + "\n", text=True)
