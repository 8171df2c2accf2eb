"""``dr_core.train.launch`` with scripted engines, for tests/integration/test_grpo_deepspeed.py (run by ``accelerate
launch``).

Generator: a fixed two-item rubric. Verifier: a deterministic pseudo-random yes/no per (criterion, response).
"""

import sys

from dr_core.train import launch
from tests.support.fakes import FakeEngine, hashed_verdict

RUBRIC = '{"rubrics": [{"criterion": "is polite", "weight": 3}, {"criterion": "is short", "weight": 1}]}'


if __name__ == "__main__":
    engines = tuple(FakeEngine(RUBRIC, verdict=hashed_verdict, model_name="scripted") for _ in range(2))
    launch.main(sys.argv[1:], engines=engines)
