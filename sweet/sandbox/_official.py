"""The released SWEET-RL scoring rules (``check_correctness`` in facebookresearch/sweet_rl, code_utils.py), parent side.

Only text rules live here; the code still runs in the sandbox's children (``_child``, scope "per_call"):
* an answer whose text contains one of ``BANNED`` scores 0, whatever it does (a harmless ``import os`` too);
* fences are stripped the released way (``strip_fences``), not by ``sandbox.strip_code_fences``;
* per test, the code is executed anew with its top-level names apart from its functions' globals, so a helper
  function, a top-level import or a recursive call is a NameError inside the answer's functions (the reference
  runs the same way);
* each answer call has ``CALL_TIMEOUT_S`` (the released 1 s alarm around exec + eval);
* a test passes only if the reference's value is not None and equals the answer's (an error there
  gives None too, so a reference that fails or returns None never passes).
"""

from __future__ import annotations

# In the released order; checked on the raw answer, before its fences are stripped.
BANNED = ("import os", "from os", "import sys", "from sys", "sudo", "transformers", "exit(", "quit(", "argparse")
CALL_TIMEOUT_S = 1.0


def banned(answer: str) -> str | None:
    """The first banned substring in ``answer``, or None."""
    return next((b for b in BANNED if b in answer), None)


def strip_fences(answer: str) -> str:
    """The released split: the text after the first ```python up to the next fence, then, if a fence is still
    there, the text between the first two fences.  Unlike ``strip_code_fences`` a ```py block keeps its ``py``
    line (a NameError at exec) and an unfenced prose preamble stays (a SyntaxError)."""
    if "```python" in answer:
        answer = answer.split("```python")[1].split("```")[0]
    if "```" in answer:
        answer = answer.split("```")[1].split("```")[0]
    return answer
