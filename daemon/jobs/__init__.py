"""Jobs: models, pure transitions, the queue (claim/lease) and the worker pool."""
