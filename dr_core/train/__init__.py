"""GRPO training: settings, rewards, the TRL trainer glue, training records, the multi-process launcher.

The only code that imports trl or peft."""
