"""Session fixtures for a real S3-compatible server (SeaweedFS) on 127.0.0.1."""
