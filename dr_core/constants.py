"""Names and bounds used across the project, defined once.

A leaf module: it imports nothing of the project, so every subpackage (dr_core/scoring included, which stays pure
numpy) may import from it.
"""

# -- the unscorable state and the rubric bounds (the rubric model: dr_core/rubric/schema.py) ------------------------

#: The one "could not score" value: a missing verdict, an empty or malformed rubric. Never 0.0.
UNSCORABLE = None

#: Integer weight w_m of a rubric item (paper section 3.4): 1 (minor) to 5 (essential).
WEIGHT_MIN, WEIGHT_MAX = 1, 5
#: Most items a rubric may have (the parser's bound; the generator is asked for fewer, dr_core/rubric/prompts.py).
MAX_ITEMS = 12
#: Longest criterion the parser accepts (characters).
MAX_CRITERION_CHARS = 300

# -- end of the rubric bounds ---------------------------------------------------------------------------------------

# -- roles, stages and the completion marker --------------------------------------------------------------------------

#: The engine roles of a config (dr_core/config/engines.py ``EnginesConfig``): who writes rubrics, who checks them,
#: who answers.
ENGINE_ROLES = ("generator", "verifier", "policy")
#: The roles that are trained and checkpointed (GRPO updates, the ``checkpoints`` and training tables).
TRAINED_ROLES = ("generator", "policy")
#: The ``stage`` of a run row (dr_core/store/schemas.py): the two updates, the measurement, the stale/fresh probe,
#: and the sets scored by the reward service (``dr serve``, dr_core/service).
STAGES = ("generator", "policy", "measure", "stale", "fresh", "service")
#: The file written last into a finished model or checkpoint directory: without it the directory is not usable.
COMPLETE_MARKER = ".dr-complete"
#: Partition values (run ids among them) and part names become path segments: keep them plain.
SEGMENT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"

# -- end of roles, stages and the completion marker -----------------------------------------------------------------
