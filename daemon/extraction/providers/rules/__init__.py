"""The offline, deterministic `rules` provider."""
