"""Accounts and authentication: tokens (pure), passwords, principals, guards, rate limits."""
