"""Webhooks: endpoints, signing, retry schedule, sender and dispatcher."""
