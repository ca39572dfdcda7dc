"""What every layer shares: repository paths and caches, secret redaction, failure causes,
env-marker names."""
