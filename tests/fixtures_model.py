"""Session fixtures for the real default model and one inference engine per test session."""
