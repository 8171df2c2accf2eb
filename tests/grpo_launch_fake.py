"""``dr_core.train.launch`` with scripted engines, for tests/test_grpo_deepspeed.py (run by ``accelerate launch``).

Generator: a fixed two-item rubric. Verifier: a deterministic pseudo-random yes/no per (criterion, response).
"""

import hashlib
import sys

from dr_core.train import launch as grpo_launch
from dr_core.engines.base import Completion, Engine

RUBRIC = '{"rubrics": [{"criterion": "is polite", "weight": 3}, {"criterion": "is short", "weight": 1}]}'


class ScriptedEngine(Engine):
    model_name = "scripted"

    def chat(self, conversations, *, n=1, temperature=0.0, max_tokens=256, json_schema=None, choices=None, seed=None):
        out = []
        for conv in conversations:
            user = conv[-1]["content"]
            text = RUBRIC if not choices else ("yes" if hashlib.md5(user.encode()).digest()[0] & 1 else "no")
            out.append(Completion((text,) * n, ("stop",) * n, len(user), (3,) * n, 0))
        return out


if __name__ == "__main__":
    grpo_launch.main(sys.argv[1:], engines=(ScriptedEngine(), ScriptedEngine()))
